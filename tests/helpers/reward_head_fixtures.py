"""Tiny random checkpoints of reward models with custom heads, each saved by its own PyTorch class,
and that class's scoring of one sequence (its pipeline's score first, then its objectives).

The classes: the rewardbench 0.1.4 wheel's model files, loaded by path (the package's
`__init__` imports every model's dependencies, and some files import transformers 4's docstring
constants, stubbed here); ArmoRM's and Eurus-RM's published modelling code, which no package
ships, rewritten below from their checkpoints' `modeling_custom.py` / `modeling_eurus_rm.py`.
Every parameter and buffer is drawn at random (a head at its init would hide a misread tensor:
identity transform matrices, unit BatchNorm statistics, zero biases).

ArmoRM and QRM read their gate at Llama 3's ids of the assistant header, so their tokenizer
(`llama3_tokenizer`) places those five tokens at Llama 3's ids in a 128,256-token vocabulary.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import pathlib
import shutil
import sys
import tempfile
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers import scoring_fixtures as fx

WHEEL_MODELS = pathlib.Path(importlib.util.find_spec("rewardbench").submodule_search_locations[0]
                            ) / "models"
LLAMA3_VOCAB = 128256
LLAMA3_IDS = {"<|begin_of_text|>": 128000, "<|start_header_id|>": 128006,
              "<|end_header_id|>": 128007, "<|eot_id|>": 128009, "assistant": 78191, "ĊĊ": 271}
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
# Llama 3's pre-tokenizer split: "\n\n" stays one piece (id 271), as in the real tokenizer.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TRUNK = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=1024, initializer_range=0.2,
             tie_word_embeddings=False)
WEIGHT_STD = 0.2


def wheel_module(name: str):
  """rewardbench's `models/<name>.py`, by path: the package's `__init__` is never run. Files
  written for transformers 4 import its docstring constants, which transformers 5 dropped."""
  import transformers.models.llama.modeling_llama as modeling_llama
  for constant, value in (("LLAMA_INPUTS_DOCSTRING", ""), ("_CONFIG_FOR_DOC", "LlamaConfig")):
    if not hasattr(modeling_llama, constant):
      setattr(modeling_llama, constant, value)
  key = f"rewardbench_wheel_{name}"
  if key not in sys.modules:
    spec = importlib.util.spec_from_file_location(key, WHEEL_MODELS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
  return sys.modules[key]


# --- ArmoRM-Llama3-8B-v0.1's modeling_custom.py, rewritten (no package ships it) ---

class ArmoGatingNetwork(nn.Module):
  """ArmoRM's gating network: n_hidden x (Linear, ReLU), a Linear, softmax(x / T) * logit_scale."""

  def __init__(self, in_features, out_features, bias=True, temperature=10, logit_scale=1.0,
               hidden_dim=1024, n_hidden=3):
    super().__init__()
    self.temperature = temperature
    self.logit_scale = nn.Parameter(torch.ones(1) * logit_scale)
    layers = []
    for _ in range(n_hidden):
      layers.append(nn.Linear(in_features, hidden_dim))
      in_features = hidden_dim
    layers.append(nn.Linear(in_features, out_features, bias=bias))
    self.layers = nn.ModuleList(layers)

  def forward(self, x):
    for i, layer in enumerate(self.layers):
      x = layer(x)
      if i < len(self.layers) - 1:
        x = F.relu(x)
    x = F.softmax(x / self.temperature, dim=1)
    return x * self.logit_scale[0]


ARMORM_TOKEN_PATTERN = [128009, 128006, 78191, 128007, 271]


def find_token_for_gating(lst):
  """The last occurrence of ARMORM_TOKEN_PATTERN (ArmoRM's own search)."""
  n = len(ARMORM_TOKEN_PATTERN)
  for j in range(len(lst) - n, -1, -1):
    if lst[j:j + n] == ARMORM_TOKEN_PATTERN:
      return j
  raise ValueError("Token pattern not found in the list.")


def _armorm_class():
  from transformers import LlamaModel, LlamaPreTrainedModel

  class LlamaForRewardModelWithGating(LlamaPreTrainedModel):
    """ArmoRM: regression_layer (19 objectives), gating network at the prompt, transform."""

    def __init__(self, config):
      super().__init__(config)
      self.num_labels = config.num_labels
      self.model = LlamaModel(config)
      config_dict = config.to_dict()
      self.num_objectives = config_dict.get("num_objectives", 19)
      self.regression_layer = nn.Linear(config.hidden_size, self.num_objectives, bias=False)
      self.post_init()
      eye = torch.zeros(self.num_objectives, self.num_objectives)
      eye[range(self.num_objectives), range(self.num_objectives)] = 1.0
      self.reward_transform_matrix = nn.Parameter(eye)
      self.reward_transform_matrix.requires_grad = False
      self.gating = ArmoGatingNetwork(config.hidden_size, config.num_objectives,
                                      temperature=config_dict.get("gating_temperature", 10),
                                      hidden_dim=config_dict.get("gating_hidden_dim", 1024),
                                      n_hidden=config_dict.get("gating_n_hidden", 3))

    def forward(self, input_ids, attention_mask=None):
      tokens_hidden_states = self.model(input_ids, attention_mask=attention_mask)[0]
      batch_size = input_ids.shape[0]
      sequence_lengths = torch.eq(input_ids, self.config.pad_token_id).int().argmax(-1) - 1
      sequence_lengths = sequence_lengths % input_ids.shape[-1]
      rows = torch.arange(batch_size)
      hidden_states = tokens_hidden_states[rows, sequence_lengths]
      rewards = self.regression_layer(hidden_states)
      gating_token_positions = [find_token_for_gating(ids.tolist()) for ids in input_ids]
      prompt_embedding = tokens_hidden_states[rows, gating_token_positions, :]
      gating_output = self.gating(prompt_embedding)
      rewards_adjusted = rewards @ self.reward_transform_matrix
      score = torch.sum(gating_output * rewards_adjusted, dim=1)
      return dict(rewards=rewards, gating_output=gating_output, score=score, logits=score)

  return LlamaForRewardModelWithGating


# --- Eurus-RM-7b's modeling_eurus_rm.py, rewritten (no package ships it) ---

def _eurus_class():
  from transformers import MistralConfig, MistralModel, PreTrainedModel

  class EurusRewardModel(PreTrainedModel):
    """Eurus-RM: Mistral and a bias-free `regression_head` at the last real token."""
    config_class = MistralConfig

    def __init__(self, config):
      super().__init__(config)
      self.model = MistralModel(config)
      self.regression_head = nn.Linear(self.config.hidden_size, 1, bias=False)
      self.post_init()

    def forward(self, input_ids, attention_mask):
      hidden_states = self.model(input_ids, attention_mask=attention_mask)[0]
      rewards = self.regression_head(hidden_states).squeeze(-1)
      ends = attention_mask.cumsum(dim=1).argmax(dim=1).view(-1, 1)
      return torch.gather(rewards, 1, ends)

  return EurusRewardModel


# --- Tokenizers ---

def llama3_tokenizer(folder: pathlib.Path):
  """A byte-level BPE tokenizer with Llama 3's ids where ArmoRM's gate pattern needs them: the
  header and end-of-turn special tokens, `assistant` (78191) and "\\n\\n" (271); every other text
  is spelled byte by byte. 128,256 ids, as Llama 3; the unused ones are placeholders. Built once
  a session, then copied."""
  from transformers import PreTrainedTokenizerFast
  for name in _llama3_tokenizer_files().iterdir():
    shutil.copy(name, folder / name.name)
  return PreTrainedTokenizerFast.from_pretrained(folder)


@functools.cache
def _llama3_tokenizer_files() -> pathlib.Path:
  from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
  from transformers import PreTrainedTokenizerFast
  folder = pathlib.Path(tempfile.mkdtemp(prefix="llama3_tokenizer_"))
  alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
  vocab = {symbol: i for i, symbol in enumerate(alphabet)}  # ids 0..255: the bytes
  vocab.update(LLAMA3_IDS)
  vocab["<pad>"] = LLAMA3_VOCAB - 1
  taken = set(vocab.values())
  vocab.update({f"<placeholder_{i}>": i for i in range(LLAMA3_VOCAB) if i not in taken})
  tok = Tokenizer(models.BPE(vocab=vocab, merges=[("Ċ", "Ċ")]))
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok.decoder = decoders.ByteLevel()
  tok.add_tokens([AddedToken("assistant", special=False, normalized=False)])
  specials = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
              "<pad>"]
  tok.add_special_tokens(specials)
  fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                 eos_token="<|eot_id|>", pad_token="<pad>")
  fast.chat_template = LLAMA3_TEMPLATE
  fast.save_pretrained(folder)
  assert fast("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi",
              add_special_tokens=False)["input_ids"][:5] == ARMORM_TOKEN_PATTERN
  return folder


# --- Checkpoints: (reference scoring one sequence -> outputs, tokenizer) ---

def _randomize(model: nn.Module, seed: int) -> nn.Module:
  """Every parameter and float buffer drawn anew; variances (BatchNorm, Beaver's normalizer)
  drawn positive."""
  generator = torch.Generator().manual_seed(seed)
  saved = set(model.state_dict())  # not the buffers computed at init (RoPE, Gemma's sqrt(D))
  with torch.no_grad():
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
      if not tensor.is_floating_point() or name not in saved or name.endswith("inv_freq"):
        continue
      draw = torch.randn(tensor.shape, generator=generator) * WEIGHT_STD
      if name.endswith(("running_var", ".var")):
        draw = 0.5 + torch.rand(tensor.shape, generator=generator)
      elif name.endswith(("norm.weight", "logit_scale", "reward_transform_matrix")):
        draw += torch.eye(*tensor.shape) if tensor.ndim == 2 else 1.0  # scales near one
      tensor.copy_(draw.to(tensor.dtype))
  return model.float().eval()


def _save(model, folder: pathlib.Path, auto_map: dict | None = None):
  if auto_map:
    model.config.auto_map = auto_map
  model.save_pretrained(folder, safe_serialization=True)


def _llama_config(tokenizer, **fields):
  from transformers import LlamaConfig
  return LlamaConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                     bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                     **TRUNK, **fields)


def no_grad(reference: Callable) -> Callable:
  def scored(ids):
    with torch.no_grad():
      return reference(ids)
  return scored


def _inputs(ids) -> dict:
  """One sequence alone: no padding."""
  return {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}


def make_armorm(folder: pathlib.Path, seed: int = 0, llama3_ids: bool = True):
  """ArmoRM-shaped: 19 objectives, a 3-hidden-layer gating network, a random transform.
  `llama3_ids=False`: the fixture chat tokenizer, whose renderings never hold the gate's pattern
  (the embedding still has Llama 3's 128,256 rows)."""
  tokenizer = llama3_tokenizer(folder) if llama3_ids else fx.train_chat_tokenizer(folder)
  config = _llama_config(tokenizer, num_objectives=19, gating_temperature=10,
                         gating_hidden_dim=16, gating_n_hidden=3)
  config.vocab_size = LLAMA3_VOCAB
  model = _randomize(_armorm_class()(config), seed)
  _save(model, folder, {"AutoModelForSequenceClassification":
                        "modeling_custom.LlamaForRewardModelWithGating"})

  @no_grad
  def reference(ids):
    out = model(**_inputs(ids))
    return np.concatenate([out["score"].numpy(), out["rewards"][0].numpy()])
  return reference, tokenizer


def _make_qrm(class_name: str):
  def make(folder: pathlib.Path, seed: int = 0):
    """QRM: 5 objectives x 5 quantiles (its `reward_quantiles` broadcasts only when the two are
    equal), a gating network with BatchNorm."""
    tokenizer = llama3_tokenizer(folder)
    config = _llama_config(tokenizer, num_objectives=5, num_quantiles=5, gating_temperature=10,
                           gating_hidden_dim=16, gating_n_hidden=3)
    model = _randomize(getattr(wheel_module("qrm"), class_name)(config), seed)
    _save(model, folder)

    @no_grad
    def reference(ids):
      out = model(**_inputs(ids))
      return np.concatenate([out.score[0].numpy(), out.rewards[0].numpy()])
    return reference, tokenizer
  return make


def make_ldl(folder: pathlib.Path, seed: int = 0):
  """LDL-Reward-shaped on Gemma 2: 3 objectives x 10 levels, a softmax gate. Its head's widths
  (4096, hard-coded) are cut to 16 so the checkpoint stays small; the tensor names stay. Saved
  by PreTrainedModel.save_pretrained, whole: the class's own override writes the head as pickles
  (`regression_layer.pt`), which are never loaded."""
  from transformers import Gemma2Config, PreTrainedModel
  ldl = wheel_module("ldlreward")
  tokenizer = fx.train_chat_tokenizer(folder)
  config = Gemma2Config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        head_dim=8, num_objectives=30, softmax=True, temperature=2.0,
                        sliding_window=16, query_pre_attn_scalar=8, **TRUNK)
  model = ldl.LDLRewardModel27B(config)
  model.regression_layer = ldl.MultiOutputNN(config.hidden_size, 30, hidden_dims=[16, 16])
  model.gating_layer = ldl.GatingNN(config.hidden_size, 3, hidden_dim=16, temperature=2.0,
                                    softmax=True)
  model = _randomize(model, seed)
  PreTrainedModel.save_pretrained(model, folder, safe_serialization=True)
  # transformers 5 no longer writes `temperature` (a generation setting now); the checkpoint's
  # config.json, written by transformers 4, holds it, and the class reads it from there.
  config_path = folder / "config.json"
  config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "temperature": 2.0}))
  support = np.linspace(0, 1, 10)

  @no_grad
  def reference(ids):
    out = model(**_inputs(ids))
    per_objective = out.rewards[0].double().numpy() @ support
    return np.concatenate([out.score.double().numpy(), per_objective])
  return reference, tokenizer


def _llama_value_head(builder: Callable, read: Callable, auto_map: dict | None = None,
                      **fields):
  def make(folder: pathlib.Path, seed: int = 0):
    tokenizer = fx.train_chat_tokenizer(folder)
    model = _randomize(builder()(_llama_config(tokenizer, **fields)), seed)
    _save(model, folder, auto_map)

    @no_grad
    def reference(ids):
      return np.atleast_1d(read(model(**_inputs(ids))).detach().double().numpy().reshape(-1))
    return reference, tokenizer
  return make


def make_eurus(folder: pathlib.Path, seed: int = 0):
  from transformers import MistralConfig
  tokenizer = fx.train_chat_tokenizer(folder)
  config = MistralConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, **TRUNK)
  model = _randomize(_eurus_class()(config), seed)
  _save(model, folder, {"AutoModel": "modeling_eurus_rm.EurusRewardModel"})
  return no_grad(lambda ids: model(**_inputs(ids)).double().numpy().reshape(-1)), tokenizer


def _beaver(score_type: str, do_normalize: bool):
  def build():
    cls = wheel_module("beaver").LlamaForScore

    def construct(config):
      config.score_type, config.do_normalize = score_type, do_normalize
      config.normalizer_type = "ExponentialMovingAverage"
      config.momentum = 0.9
      return cls(config)
    return construct
  sign = -1.0 if score_type == "cost" else 1.0  # BeaverCostPipeline returns -end_scores
  return _llama_value_head(build, lambda out: sign * out.end_scores)


# Each head: name -> make(folder, seed) -> (reference(ids) -> [outputs], tokenizer).
HEADS = {
    "armorm": make_armorm,
    "qrm_llama3": _make_qrm("LlamaForRewardModelWithGating3"),
    "qrm_llama3.1": _make_qrm("LlamaForRewardModelWithGating31"),
    "ldl_gemma2": make_ldl,
    "inf_orm": _llama_value_head(lambda: wheel_module("inform").INFORMForSequenceClassification,
                                 lambda out: out.logits),
    "grm_linear": _llama_value_head(lambda: wheel_module("grm").GRewardModel, lambda out: out,
                                    vhead_layer_type="linear"),
    "grm_mlp": _llama_value_head(lambda: wheel_module("grm").GRewardModel, lambda out: out,
                                 vhead_layer_type="mlp", vhead_num_neurons=16,
                                 vhead_num_layers=2),
    "ultrarm": _llama_value_head(lambda: wheel_module("openbmb").LlamaRewardModel,
                                 lambda out: out),
    "eurus": make_eurus,
    "starling": _llama_value_head(lambda: wheel_module("starling").LlamaForSequenceClassification,
                                  lambda out: out["scores"]),
    "beaver_reward": _beaver("reward", do_normalize=True),
    "beaver_cost": _beaver("cost", do_normalize=False),
}
