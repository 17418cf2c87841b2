"""`load_reward_model`: a HF folder, a native orbax folder or a GGUF file -> a callable RewardModel.

Only safetensors / orbax / GGUF weights are ever read: pickled PyTorch weights are refused (loading
them can run arbitrary code), and `auto_map` / `trust_remote_code` code is never imported — the
architecture must be one we implement.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import glob
import os
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from socialrm_jax.models import default_model
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import attention as attention_lib
from socialrm_jax.models import (checkpoint, families, heads, masks, readout, tokenizer, trunk,
                                 weights)

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def model_dtype(dtype: str) -> Any:
  if dtype not in DTYPES:
    raise InputError(f"unsupported dtype {dtype!r}; use one of {', '.join(DTYPES)}")
  return DTYPES[dtype]


def _auto_map_entries(hf_config: dict) -> str:
  auto_map = hf_config.get("auto_map") or {}
  return ", ".join(f"{k}: {v}" for k, v in auto_map.items())


def _base_architecture(hf_config: dict, reward_class: str, path: str) -> str:
  """The supported sequence classifier of a reward class's base model (`model_type`)."""
  model_type = str(hf_config.get("model_type", ""))
  wanted = f"{model_type}ForSequenceClassification".lower()
  found = [a for a in families.supported_architectures() if a.lower() == wanted]
  if not found:
    raise InputError(f"{reward_class} on a {model_type!r} base model, which is not supported "
                     "(supported bases: the decoders of "
                     + ", ".join(a for a in families.supported_architectures()
                                 if a.endswith("ForSequenceClassification")) + ")", path)
  return found[0]


def _describe_head(hf_config: dict, architecture: str, path: str,
                   tensors: weights.TensorSource | None) -> heads.HeadSpec | None:
  """The checkpoint's custom reward head (`heads.describe`), or None for a standard class."""
  if tensors is None or not heads.may_carry_custom_head(architecture):
    return None
  shapes = {name: tensors.shape(name) for name in tensors.keys()}
  try:
    return heads.describe(hf_config, architecture, shapes)
  except (heads.HeadError, KeyError, TypeError, ValueError) as e:
    raise InputError(f"cannot read the {architecture} reward head: {e}.{_pickled_head_hint(path)}",
                     path) from None


def _pickled_head_hint(path: str) -> str:
  """What to do when a folder keeps part of its model (a custom head: LDL-Reward's
  `regression_layer.pt`) in pickle files beside its safetensors."""
  pickles = sorted(n for n in os.listdir(path) if n.endswith(PICKLE_SUFFIXES)) if (
      os.path.isdir(path)) else []
  if not pickles:
    return ""
  return (f" The folder keeps {', '.join(pickles)} as pickles, which are never loaded "
          "(unpickling can run arbitrary code): if they hold the model's reward head, load the "
          "model with its own class once, in a trusted environment, and save it whole with "
          "`transformers.PreTrainedModel.save_pretrained(model, OUT, safe_serialization=True)`.")


def family_and_config(hf_config: dict, path: str, head: str | None = None,
                      tensors: weights.TensorSource | None = None):
  """HF config dict -> (family module, family Config), optionally without its head. `tensors`
  (the checkpoint's, headers only) describe a custom reward head (`heads.describe`)."""
  architectures = hf_config.get("architectures") or []
  if not architectures:
    raise InputError("config.json names no architecture (`architectures` is empty); "
                     "supported: " + ", ".join(families.supported_architectures()), path)
  architecture = architectures[0]
  spec = _describe_head(hf_config, architecture, path, tensors)
  if architecture in heads.REWARD_CLASSES and tensors is not None:
    architecture = _base_architecture(hf_config, architecture, path)
  try:
    family = families.family_for(architecture)
  except ValueError as e:
    hint = ""
    if hf_config.get("auto_map"):
      hint = (f" Its `auto_map` ({_auto_map_entries(hf_config)}) points at custom modelling "
              "code, which is never run (no trust_remote_code); the custom reward classes "
              "described as data are: " + ", ".join(heads.REWARD_CLASSES) + ".")
    raise InputError(str(e) + "." + hint + _pickled_head_hint(path), path) from None
  try:
    config = family.config_from_hf(hf_config, architecture)
  except (KeyError, ValueError, TypeError) as e:  # a field missing, or of the wrong kind
    raise InputError(f"cannot read the {architecture} config: {type(e).__name__}: {e}",
                     path) from None
  if spec is not None:
    config = dataclasses.replace(config, reward_head=spec, num_labels=spec.num_outputs)
  if head not in (None, config.head, "none"):
    raise InputError(f"{architecture} carries a {config.head!r} head, not {head!r}", path)
  if head == "none":
    config = dataclasses.replace(config, head="none")
  return family, config


def _native_family_and_config(path: str):
  """A native checkpoint's (family module, Config), from its manifest."""
  _, config_dict = checkpoint.read_manifest(path)
  try:
    family = families.family_for(config_dict.get("architecture"))
    return family, family.Config.from_dict(config_dict)
  except (ValueError, TypeError) as e:  # an architecture or a config field this code lacks
    raise InputError(f"cannot read the manifest's config: {e}",
                     os.path.join(path, checkpoint.MANIFEST)) from None


def abstract_module(family: families.ModelFamily, config: families.ModelConfig, dtype,
                    attention: str, remat_policy: str = "auto") -> nnx.Module:
  """The family's Model with shapes only (no memory), ready for `weights.load_params`;
  `attention` is a concrete implementation (see `resolve_attention`), `remat_policy` a name of
  `trunk.REMAT_POLICY_NAMES` (what a training step's backward pass keeps)."""
  return nnx.eval_shape(lambda: family.Model(config, attention=attention, remat_policy=remat_policy,
                                             dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0)))


def resolve_attention(attention: str, family: families.ModelFamily, config: families.ModelConfig,
                      dtype, mesh) -> str:
  """The concrete attention implementation for this model on the devices it will run on."""
  backend = mesh.devices.flat[0].platform if mesh is not None else jax.default_backend()
  try:
    return attention_lib.resolve(
        attention, backend=backend, dtype=dtype, logit_cap=config.attention_logit_cap,
        has_windows=config.has_sliding_windows, is_causal=family.IS_CAUSAL,
        has_position_bias=family.HAS_POSITION_BIAS)
  except ValueError as e:  # an unknown name, or one that cannot run this model here
    raise InputError(f"attention={attention!r}: {e}") from None


def _refuse_pickles(folder: str) -> None:
  if glob.glob(os.path.join(folder, "*.safetensors")):
    return
  pickles = sorted(n for n in os.listdir(folder) if n.endswith(PICKLE_SUFFIXES))
  if pickles:
    raise InputError(
        f"only PyTorch pickle weights found ({', '.join(pickles)}); they are never loaded, because "
        "unpickling can run arbitrary code. Convert them to safetensors once, in a trusted "
        "environment: `AutoModelForSequenceClassification.from_pretrained(DIR)"
        ".save_pretrained(OUT, safe_serialization=True)` (or AutoModelForCausalLM), then copy the "
        "tokenizer files and pass OUT.", folder)
  raise InputError("no weights found: expected model.safetensors, a sharded "
                   "model.safetensors.index.json, a native checkpoint or a .gguf file", folder)


def _gguf_file(path: str) -> str | None:
  """The GGUF file `path` names or holds, if it is not a HF folder."""
  if os.path.isdir(path) and os.path.exists(os.path.join(path, "config.json")):
    return None
  if not path.endswith(".gguf") and not os.path.isdir(path):
    return None
  from socialrm_jax.models import gguf_import  # imported only for GGUF input
  found = gguf_import.gguf_file_in(path)
  return None if found is None else os.fspath(found)


def _ignored_tensors(family: families.ModelFamily, config: families.ModelConfig,
                     tensors: weights.TensorSource) -> set[str]:
  """HF tensors a checkpoint may hold that this model does not use."""
  # Saved buffers: position ids, RoPE frequencies, causal masks.
  ignored = {name for name in tensors.keys() if family.is_saved_buffer(name)}
  if config.tie_word_embeddings:
    ignored.add("lm_head.weight")  # some tied checkpoints still save the copy
  if config.reward_head is not None:
    ignored |= heads.ignored_tensors(config.reward_head, tensors.keys())
    if config.head == "none":  # a trunk-only load leaves the head out on purpose
      ignored |= heads.head_tensors(config.reward_head)
  if config.head == "none":
    for head in ("score", "lm"):
      try:
        with_head = family.weight_sources(dataclasses.replace(config, head=head))
      except ValueError:
        continue
      ignored |= {name for s in with_head.values() for name in s.hf_names}
  return ignored


def _refuse_unused_head_tensors(family: families.ModelFamily, config: families.ModelConfig,
                                tensors: weights.TensorSource, ignored: set[str],
                                path: str) -> None:
  """A checkpoint holding reward-head tensors its architecture would not read is refused,
  naming them: it is never scored as a base model with its head dropped."""
  used = {name for s in family.weight_sources(config).values() for name in s.hf_names}
  unused = sorted(n for n in tensors.keys()
                  if heads.is_head_tensor(n) and n not in used and n not in ignored)
  if unused:
    raise InputError(
        f"the checkpoint holds reward-head tensors that {config.architecture} does not read "
        f"({', '.join(unused[:8])}{', ...' if len(unused) > 8 else ''}); scoring it without its "
        "head would be wrong. Name its reward class in config.json's `architectures` (one of "
        + ", ".join(heads.REWARD_CLASSES) + ") with the config fields that class reads", path)


class _RenamedTensors:
  """A checkpoint's tensors read under other names (`_name`: ours -> the checkpoint's)."""

  def __init__(self, tensors: weights.TensorSource):
    self.tensors = tensors

  def _name(self, name: str) -> str:
    raise NotImplementedError

  def shape(self, name: str) -> tuple[int, ...]:
    return self.tensors.shape(self._name(name))

  def dtype(self, name: str):
    return self.tensors.dtype(self._name(name))

  def get(self, name: str, index: weights.Index = ()):
    return self.tensors.get(self._name(name), index)

  def __getattr__(self, attribute: str):  # `read_into`, where the checkpoint's source has it
    if attribute != "read_into":
      raise AttributeError(attribute)
    read_into = getattr(self.tensors, attribute)
    return lambda name, *args: read_into(self._name(name), *args)


class _RenamedTrunk(_RenamedTensors):
  """A checkpoint whose decoder lives under another prefix than `model.` (Starling:
  `transformer.`), read under the names `decoder.weight_sources` uses."""

  def __init__(self, tensors: weights.TensorSource, theirs: str, ours: str = "model."):
    super().__init__(tensors)
    self.theirs, self.ours = theirs, ours

  def _name(self, name: str) -> str:
    return self.theirs + name.removeprefix(self.ours) if name.startswith(self.ours) else name

  def keys(self):
    return [self.ours + n.removeprefix(self.theirs) if n.startswith(self.theirs) else n
            for n in self.tensors.keys()]


class _BasePrefixedTensors(_RenamedTensors):
  """A checkpoint saved from the bare base model (`h.0.attn...`, as openai-community/gpt2 is),
  read under the names the head classes use (`transformer.h.0.attn...`), as transformers does."""

  def __init__(self, tensors: weights.TensorSource, prefix: str):
    super().__init__(tensors)
    self.prefix = prefix

  def _name(self, name: str) -> str:
    return name.removeprefix(self.prefix)

  def keys(self):
    return [self.prefix + name for name in self.tensors.keys()]


def _with_base_prefix(family: families.ModelFamily, config: families.ModelConfig,
                      tensors: weights.TensorSource) -> weights.TensorSource:
  prefix = family.BASE_MODEL_PREFIX
  names = set(tensors.keys())
  if not prefix or any(name.startswith(prefix) for name in names):
    return tensors
  wanted = [name for s in family.weight_sources(config).values() for name in s.hf_names]
  if any(w.startswith(prefix) and w.removeprefix(prefix) in names for w in wanted):
    return _BasePrefixedTensors(tensors, prefix)
  return tensors


def _checkpoint_files(path: str) -> tuple[dict, weights.TensorSource, str]:
  """A HF folder's or a GGUF file's (HF config dict, tensors, tokenizer path): config and tensor
  headers read, no tensor yet."""
  gguf_path = _gguf_file(path)
  if gguf_path is not None:
    from socialrm_jax.models import gguf_import  # imported only for GGUF input
    gguf = gguf_import.read_gguf(gguf_path)
    return gguf.hf_config, gguf.tensors, gguf_path
  config_path = os.path.join(path, "config.json")
  if not os.path.isdir(path) or not os.path.exists(config_path):
    raise InputError("not a model: expected a folder with config.json and *.safetensors, a "
                     "native checkpoint folder, or a .gguf file", path)
  hf_config = tables.read_json_object(config_path)
  _refuse_pickles(path)
  return hf_config, weights.SafetensorsSource(path), path


def check_models(paths: Mapping[str, str | None]) -> None:
  """Refuses a model flag's value (flag name -> a path, or the default model's alias; None or ""
  for a flag not given) that cannot be scored, before any work: missing, a config or tensor
  headers that do not read (a cut-off safetensors or GGUF file, a broken config.json), an
  architecture we lack, or no tokenizer. Reads files' headers only, never their tensors."""
  for flag, path in paths.items():
    if not path:
      continue
    path = default_model.resolve_model_path(path)
    if not os.path.exists(path):
      raise InputError(f"--{flag}: no such model file or folder", path)
    if checkpoint.is_native(path):
      _native_family_and_config(path)
      tokenizer.check_tokenizer_files(path)
      continue
    hf_config, tensors, tokenizer_path = _checkpoint_files(path)
    family_and_config(hf_config, path, tensors=tensors)
    if os.path.isdir(tokenizer_path):  # a GGUF file carries its tokenizer
      tokenizer.check_tokenizer_files(tokenizer_path)


def load_reward_model(path: str | os.PathLike, dtype: str = "float32", mesh=None,
                      head: str | None = None, attention: str = "auto",
                      remat_policy: str = "auto",
                      while_loading: Callable[["RewardModel"], None] | None = None
                      ) -> "RewardModel":
  """Loads a HF checkpoint folder, a native orbax folder, or a GGUF file (or a folder with one),
  or a model by Hub id or alias (`default_model.resolve_model_path`).

  `mesh`: parameters are placed with `NamedSharding` over its `model` axis (see weights.py).
  `head`: None keeps the architecture's head; "none" loads the trunk only.
  `attention`: an `attention.IMPLEMENTATIONS` name; "auto" picks the fastest that supports the
  model on the mesh's (else the default) backend.
  `remat_policy`: what a training step's backward pass keeps (`trunk.REMAT_POLICY_NAMES`).
  `while_loading`: called, before any weight is read, with the model's abstract twin (its
  parameters `jax.ShapeDtypeStruct`s with the shardings they load with), so that a caller may
  start compiling its programs (in a thread of its own) while the weights load.
  """
  path = default_model.resolve_model_path(os.fspath(path))
  if not os.path.exists(path):
    raise InputError("no such model file or folder", path)
  jdtype = model_dtype(dtype)
  if checkpoint.is_native(path):
    family, config = _native_family_and_config(path)
    if head not in (None, config.head):
      raise InputError(f"native checkpoint carries a {config.head!r} head, not {head!r}", path)
    implementation = resolve_attention(attention, family, config, jdtype, mesh)
    module = abstract_module(family, config, jdtype, implementation, remat_policy)
    twin = _call_with_twin(while_loading, family, config, jdtype, implementation, remat_policy,
                           mesh, path)
    checkpoint.restore_params(path, module, family.weight_sources(config), dtype=jdtype, mesh=mesh)
    return RewardModel(config, family, module, tokenizer_path=path, attention=implementation,
                       programs_of=twin)

  hf_config, tensors, tokenizer_path = _checkpoint_files(path)
  family, config = family_and_config(hf_config, path, head, tensors)
  if config.reward_head is not None and config.reward_head.trunk_prefix != "model.":
    tensors = _RenamedTrunk(tensors, config.reward_head.trunk_prefix)
  tensors = _with_base_prefix(family, config, tensors)
  implementation = resolve_attention(attention, family, config, jdtype, mesh)
  module = abstract_module(family, config, jdtype, implementation, remat_policy)
  ignored = _ignored_tensors(family, config, tensors)
  _refuse_unused_head_tensors(family, config, tensors, ignored, path)
  twin = _call_with_twin(while_loading, family, config, jdtype, implementation, remat_policy,
                         mesh, tokenizer_path)
  weights.load_params(module, family.weight_sources(config), tensors, dtype=jdtype, mesh=mesh,
                      ignore=ignored)
  return RewardModel(config, family, module, tokenizer_path=tokenizer_path,
                     attention=implementation, programs_of=twin)


def _call_with_twin(while_loading, family, config, dtype, implementation: str, remat_policy: str,
                    mesh, tokenizer_path: str) -> "RewardModel | None":
  """`while_loading(twin)`, the twin a `RewardModel` of abstract parameters placed as
  `weights.load_params` places them; returns the twin (None without `while_loading`)."""
  if while_loading is None:
    return None
  twin = abstract_module(family, config, dtype, implementation, remat_policy)
  weights.abstract_params(twin, family.weight_sources(config), mesh)
  twin = RewardModel(config, family, twin, tokenizer_path=tokenizer_path, attention=implementation)
  while_loading(twin)
  return twin


def _rewards(graphdef, is_causal: bool, state, input_ids, attention_mask, gate_index=None):
  """A padded batch through `readout.readouts` (what the scoring step runs on packed rows), read
  at the last real token (decoders) or the first ([CLS], encoders); a gated head's gate at
  `gate_index` [B]."""
  model = nnx.merge(graphdef, state)
  index = masks.last_real_index(attention_mask) if is_causal else masks.first_real_index(attention_mask)
  scores = readout.readouts(
      model, input_ids, masks.positions_from_mask(attention_mask),
      attention_lib.from_padding_mask(attention_mask, is_causal), jnp.zeros_like(input_ids),
      index[:, None], jnp.zeros_like(index[:, None]), "score",
      gate_index=None if gate_index is None else gate_index[:, None])[:, 0]  # [B, L]
  return scores[:, 0] if scores.shape[-1] == 1 else scores


def gate_indices(spec: heads.HeadSpec, input_ids, attention_mask) -> np.ndarray:
  """[B] where a gated head reads each padded row's gate (`heads.gate_position` over its real
  tokens); a row without the pattern is a ValueError."""
  ids, real = np.asarray(input_ids), np.asarray(attention_mask).astype(bool)
  out = np.zeros(len(ids), np.int32)
  for b in range(len(ids)):
    where = np.flatnonzero(real[b])
    found = heads.gate_position(spec, ids[b][where])
    if found is None:
      raise ValueError(f"row {b}: {spec.architecture} reads its gate at the last "
                       f"{list(spec.gate_pattern)} (the assistant header), absent from this row")
    out[b] = where[found]
  return out


def _token_logprobs(graphdef, state, input_ids, attention_mask):
  """Every position's log-probability of the next token, through `readout.readouts`."""
  model = nnx.merge(graphdef, state)
  predictors = jnp.broadcast_to(jnp.arange(input_ids.shape[1] - 1), input_ids[:, 1:].shape)
  picked = readout.readouts(
      model, input_ids, masks.positions_from_mask(attention_mask),
      attention_lib.from_padding_mask(attention_mask, is_causal=True), None, predictors,
      input_ids[:, 1:], "loglik")  # [B, T-1]: token t+1 predicted from position t
  # A token is scored only when it and the token before it are real.
  real = attention_mask.astype(bool)
  picked = jnp.where(real[:, 1:] & real[:, :-1], picked, 0.0)
  return jnp.concatenate([jnp.zeros_like(picked[:, :1]), picked], axis=1)  # [B, T]


class RewardModel:
  """A loaded model plus what a scorer needs: its config, family, tokenizer location, and the
  attention implementation it runs (`attention`, resolved at load)."""

  def __init__(self, config, family: families.ModelFamily, module: nnx.Module, tokenizer_path: str,
               attention: str, programs_of: "RewardModel | None" = None):
    """`programs_of`: the abstract twin this model's weights loaded beside (`load_reward_model`'s
    `while_loading`), whose programs (`precompile`) this model runs."""
    self.config = config
    self.family = family
    self.module = module
    self.tokenizer_path = tokenizer_path
    self.attention = attention
    self.is_causal: bool = family.IS_CAUSAL
    graphdef = nnx.graphdef(module)
    options = trunk.compiler_options(nnx.state(module))
    self._rewards = jax.jit(functools.partial(_rewards, graphdef, self.is_causal),
                            compiler_options=options)
    self._token_logprobs = jax.jit(functools.partial(_token_logprobs, graphdef),
                                   compiler_options=options)
    # [B, T] -> the rewards' program compiled ahead (or its compilation under way).
    self._programs: dict[tuple[int, int], concurrent.futures.Future] = (
        {} if programs_of is None else programs_of._programs)

  def precompile(self, rows: int, length: int) -> None:
    """Compiles the rewards of a [rows, length] batch in a thread of its own (from the
    parameters' shapes and shardings, so a twin's while the weights load); `__call__` of that
    shape then runs it. Not for a gated head (its gate positions come with the batch)."""
    if self.config.reward_head is not None and self.config.reward_head.gate_pattern:
      return
    batch = jax.ShapeDtypeStruct((rows, length), jnp.int32)
    state = nnx.state(self.module)
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="precompile")
    self._programs[(rows, length)] = pool.submit(
        lambda: self._rewards.lower(state, batch, batch, None).compile())
    pool.shutdown(wait=False)

  def __call__(self, input_ids, attention_mask) -> jax.Array:
    """[B, T] ids and padding mask -> rewards [B] (one label) or [B, num_labels].

    A model loaded without a head (`head="none"`, or `BertModel`) returns its pooled hidden state
    instead, [B, D]: the last real token's for decoders, the pooler's output for BERT.
    """
    if self.config.head == "lm":
      raise ValueError(f"{self.config.architecture} is a language model, with no score head; "
                       "use token_logprobs (or score it with --proxy=loglik)")
    spec = self.config.reward_head
    gate = None
    if spec is not None and spec.gate_pattern:
      gate = jnp.asarray(gate_indices(spec, input_ids, attention_mask))
    ids, mask = jnp.asarray(input_ids, jnp.int32), jnp.asarray(attention_mask, jnp.int32)
    program = self._programs.get(tuple(ids.shape))
    if program is not None and gate is None:
      return program.result()(nnx.state(self.module), ids, mask, None)
    return self._rewards(nnx.state(self.module), ids, mask, gate)

  def token_logprobs(self, input_ids, attention_mask) -> jax.Array:
    """[B, T] -> [B, T] log p(token t | tokens < t); 0 at the first real token and at padding."""
    if self.config.head != "lm" or not self.is_causal:
      raise ValueError(f"{self.config.architecture} is not a causal language model")
    return self._token_logprobs(nnx.state(self.module), jnp.asarray(input_ids, jnp.int32),
                                jnp.asarray(attention_mask, jnp.int32))
