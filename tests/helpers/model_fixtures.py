"""Tiny random HuggingFace checkpoints for model tests (transformers + torch on CPU).

`save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification", sliding_window=4)` builds the
named transformers class from a shrunken config, re-draws every weight from a fixed seed with a
spread large enough that norms, soft-caps and windows change the outputs, and saves it with
`save_pretrained` (safetensors). `hf_reference(folder, architecture)` loads it back in fp32 with
eager attention, as the reference to compare against.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
from typing import Any, Callable

import numpy as np
import torch
import transformers

VOCAB_SIZE = 128
# Real tokens are drawn below this id; the last id is the pad token, so HF's pad-id pooling and
# our attention-mask pooling agree.
PAD_TOKEN_ID = VOCAB_SIZE - 1

_DECODER = dict(vocab_size=VOCAB_SIZE, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                max_position_embeddings=64, pad_token_id=PAD_TOKEN_ID, bos_token_id=1,
                eos_token_id=2)

# Per model_type: the smallest config that still exercises the architecture.
TINY_CONFIGS: dict[str, dict] = {
    "llama": _DECODER,
    "mistral": _DECODER,
    "qwen2": _DECODER,
    "qwen3": _DECODER,
    "gemma": _DECODER,
    "gemma2": _DECODER,
    "gemma3_text": _DECODER,
    "olmo2": _DECODER,
    "phi3": _DECODER,
    "gpt2": dict(vocab_size=VOCAB_SIZE, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                 pad_token_id=PAD_TOKEN_ID, bos_token_id=1, eos_token_id=2),
    "bert": dict(vocab_size=VOCAB_SIZE, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, max_position_embeddings=64, type_vocab_size=2,
                 pad_token_id=PAD_TOKEN_ID),
}

WEIGHT_STD = 0.2
# Families whose norms multiply by (1 + w): their weights are drawn around 0, the others' around 1.
UNIT_OFFSET_NORMS = ("gemma", "gemma2", "gemma3_text")


def save_tiny_hf_model(tmp_path: str | os.PathLike, architecture: str, *, seed: int = 0,
                       torch_dtype: torch.dtype = torch.float32, max_shard_size: str | None = None,
                       subdir: str | None = None, **config_overrides) -> pathlib.Path:
  """Builds transformers' `architecture` with a tiny random config and saves it; returns the folder.

  `config_overrides` go to the config class (e.g. `num_labels=3`, `sliding_window=4`); sequence
  classifiers default to `num_labels=1`.
  `torch_dtype=torch.bfloat16` saves bf16 weights; `max_shard_size="20KB"` saves several shards
  with a `model.safetensors.index.json`.
  """
  model_class = getattr(transformers, architecture)
  config_class = model_class.config_class
  settings = dict(TINY_CONFIGS.get(config_class.model_type, {}))
  if architecture.endswith("ForSequenceClassification"):
    settings["num_labels"] = 1  # a reward model's single scalar, unless overridden
  settings.update(config_overrides)
  config = config_class(**settings)
  config.architectures = [architecture]
  torch.manual_seed(seed)
  model = model_class(config).eval()
  with torch.no_grad():
    for name, param in model.named_parameters():
      # A norm weight around 1 (or 0 for Gemma's 1 + w) keeps activations in range.
      param.normal_(0.0, WEIGHT_STD)
      if param.ndim == 1 and "norm" in name.lower() and config_class.model_type not in UNIT_OFFSET_NORMS:
        param.add_(1.0)
  model = model.to(torch_dtype)
  folder = pathlib.Path(tmp_path) / (subdir or architecture)
  kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
  model.save_pretrained(folder, **kwargs)
  return folder


def hf_reference(folder: str | os.PathLike, architecture: str) -> torch.nn.Module:
  """The saved model, loaded back by transformers in fp32 with eager attention."""
  model_class = getattr(transformers, architecture)
  return model_class.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()


def random_batch(batch_lengths: list[int], seq_len: int, *, padding_side: str, seed: int = 0,
                 vocab_size: int = PAD_TOKEN_ID) -> tuple[np.ndarray, np.ndarray]:
  """int32 ids [B, T] (pad id where padded) and mask [B, T], padded on `padding_side`."""
  rng = np.random.default_rng(seed)
  return pad_rows([rng.integers(3, vocab_size, size=length) for length in batch_lengths], seq_len,
                  padding_side)


def pad_rows(sequences: list[np.ndarray], seq_len: int, side: str,
             pad_id: int = PAD_TOKEN_ID) -> tuple[np.ndarray, np.ndarray]:
  """Sequences padded on `side` to `seq_len`: int32 ids [B, T] (`pad_id` where padded), mask
  [B, T] (1 = real token)."""
  ids = np.full((len(sequences), seq_len), pad_id, np.int32)
  mask = np.zeros((len(sequences), seq_len), np.int32)
  for row, seq in enumerate(sequences):
    span = slice(0, len(seq)) if side == "right" else slice(seq_len - len(seq), seq_len)
    ids[row, span], mask[row, span] = seq, 1
  return ids, mask


def hf_alone(model: torch.nn.Module, seq: np.ndarray):
  """The transformers model's output for one unpadded sequence [T] (a batch of one)."""
  with torch.no_grad():
    return model(input_ids=torch.tensor(seq[None], dtype=torch.long))


def save_tiny_tokenizer(folder: str | os.PathLike, vocab_size: int = VOCAB_SIZE) -> None:
  """A word-level tokenizer (`w0`..`wN`, pad = the last id) saved beside a tiny model."""
  import tokenizers  # pylint: disable=import-outside-toplevel
  vocab = {f"w{i}": i for i in range(vocab_size - 1)}
  vocab["<pad>"] = PAD_TOKEN_ID
  vocab["<unk>"] = 0
  model = tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>")
  backend = tokenizers.Tokenizer(model)
  backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>",
                                                   unk_token="<unk>")
  tokenizer.save_pretrained(folder)


def hf_rewards(reference, ids, mask) -> np.ndarray:
  """A transformers score head's rewards for a padded batch: [B], or [B, L] with L > 1 labels."""
  with torch.no_grad():
    logits = reference(input_ids=torch.tensor(ids).long(),
                       attention_mask=torch.tensor(mask).long()).logits.numpy()  # [B, L]
  return logits[:, 0] if logits.shape[-1] == 1 else logits


# The rewardbench wheel's models/ folder: OpenAssistant's GPTNeoXRewardModel and the custom reward
# heads' reference classes, loaded by path (the wheel's package imports would pull in its
# dependencies).
WHEEL_MODELS = pathlib.Path(transformers.__file__).parents[1] / "rewardbench" / "models"


def load_wheel_module(file_name: str, module_name: str):
  """`WHEEL_MODELS / file_name` as a module, loaded by path."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  spec = importlib.util.spec_from_file_location(module_name, WHEEL_MODELS / file_name)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@functools.cache
def openassistant():
  """The wheel's models/openassistant.py (GPTNeoXRewardModel and its config class)."""
  return load_wheel_module("openassistant.py", "rewardbench_openassistant")

# GPT-NeoX as Pythia and OpenAssistant's reward models set it up, shrunk.
NEOX = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=512)
# DeBERTa-v3 as reward-model-deberta-v3-large-v2 sets it up: shared keys, log buckets, LayerNormed
# relative embeddings, no absolute positions, no token types.
DEBERTA_V3 = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=512, relative_attention=True,
                  position_buckets=8, max_relative_positions=-1, norm_rel_ebd="layer_norm",
                  share_att_key=True, pos_att_type="p2c|c2p", position_biased_input=False,
                  type_vocab_size=0)


def build_redrawn(name: str, fields: dict, seed: int, **overrides) -> torch.nn.Module:
  """The class `name` (transformers', or OpenAssistant's GPTNeoXRewardModel) with `fields` and
  `overrides`, every weight redrawn from `seed` with std WEIGHT_STD (norms around 1)."""
  model_class = getattr(openassistant(), name, None) or getattr(transformers, name)
  config_class = (openassistant().GPTNeoXRewardModelConfig if name == "GPTNeoXRewardModel"
                  else model_class.config_class)
  settings = dict(fields)
  settings.update(overrides)
  config = config_class(**settings)
  config.architectures = [name]
  torch.manual_seed(seed)
  model = model_class(config).eval()
  with torch.no_grad():
    for param_name, param in model.named_parameters():
      param.normal_(0.0, WEIGHT_STD)
      if param.ndim == 1 and "norm" in param_name.lower():
        param.add_(1.0)
  return model


def deberta_v3_tokenizer(folder: str | os.PathLike, texts: list[str]):
  """A DeBERTa-v3-style SentencePiece Unigram tokenizer over the words of `texts`, built by
  transformers' `DebertaV2Tokenizer` and saved (tokenizer.json) in `folder`."""
  words = sorted({w for text in texts for w in text.split()})
  chars = sorted({c for w in words for c in w})
  vocab = [("[PAD]", 0.0), ("[UNK]", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[MASK]", 0.0)]
  vocab += [(f"\u2581{w}", -float(len(w))) for w in words[:200]]  # the rest split into pieces
  vocab += [(c, -20.0) for c in chars] + [(f"\u2581{c}", -21.0) for c in chars]
  tok = transformers.DebertaV2Tokenizer(vocab=vocab)
  tok.save_pretrained(folder)
  return tok


def reference_rewards_of_pairs(model, tok, items) -> dict:
  """(item_id, candidate) -> an encoder's reward for (question, answer) encoded as a pair by
  transformers' tokenizer, each scored alone."""
  out = {}
  with torch.no_grad():
    for item in items:
      question = item["prompt"][0]["content"] if len(item["prompt"]) == 1 else "\n\n".join(
          f"{m['role'].capitalize()}: {m['content']}" for m in item["prompt"])
      for c, text in enumerate(item["candidates"]):
        enc = tok(question, text, return_tensors="pt")
        out[(item["item_id"], c)] = float(model(input_ids=enc["input_ids"]).logits[0, 0])
  return out


def with_config_changes(source: pathlib.Path, folder: pathlib.Path, **changes) -> pathlib.Path:
  """`folder`: `source`'s weights (linked) under a config.json with `changes`."""
  import json  # pylint: disable=import-outside-toplevel
  folder.mkdir()
  (folder / "model.safetensors").symlink_to(source / "model.safetensors")
  config = json.loads((source / "config.json").read_text())
  config.update(changes)
  (folder / "config.json").write_text(json.dumps(config))
  return folder


def save_native_per_layer(folder, model, family: str, format_version: int) -> None:
  """`model` (a RewardModel) as a native checkpoint of an older format that kept each layer's
  parameters under their own keys ('layers.0.attn.q_proj.kernel', ...): format 1, or format 2
  of GPT-2 and BERT (`checkpoint.PER_LAYER_IN_FORMAT_2`). Their projection kernels are laid out
  [L?, in..., out...], the transpose of ours."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  from socialrm_jax.models import checkpoint, layers, weights  # pylint: disable=import-outside-toplevel
  checkpoint.save(folder, model.module, family, model.config)
  per_layer = {}
  for path, variable in weights.param_paths(model.module).items():
    value = np.asarray(variable.get_value())
    node = model.module
    for key in path.split("/")[:-1]:
      node = getattr(node, key)
    if isinstance(node, layers.Projection) and path.endswith("/kernel"):
      outs, ins = layers.kernel_axes(node.equation)
      lead = value.ndim - outs - ins
      value = value.transpose(*range(lead), *range(lead + outs, value.ndim),
                              *range(lead, lead + outs))
    if path.startswith("layers/"):
      for i, layer in enumerate(value):
        per_layer[f"layers/{i}/{path.removeprefix('layers/')}".replace("/", ".")] = layer
    else:
      per_layer[path.replace("/", ".")] = value
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(os.path.join(folder, "params"), per_layer, force=True)
    checkpointer.wait_until_finished()
  manifest_path = os.path.join(folder, "socialrm_model.json")
  with open(manifest_path) as f:
    manifest = json.load(f)
  with open(manifest_path, "w") as f:
    json.dump(dict(manifest, format_version=format_version), f)
