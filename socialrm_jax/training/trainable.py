"""The model being trained: a decoder base with a score head, its parameters as a flat dict, and
which of them train (all of them, or LoRA adapters and the head).

`load_base` reads the base with the scoring stack's own loader (`models.reward_model`): a HF
folder, a GGUF file or a folder holding one (its quantized tensors dequantized, then cast to the
training dtype, as the scorer loads them), a native checkpoint, the default model's alias
(`smollm2`) or a Hub id. A causal-LM checkpoint gets its trunk and a new score head
(`score/kernel` [1, D], drawn from a normal of the config's `initializer_range`, as transformers
initializes a new `score` Linear), a reward model with a one-output `score` head is trained
further as it is.

LoRA (Hu et al. 2021, as PEFT's `LoraLayer`): a target projection's kernel W [L, out..., in...]
(`layers.Projection`'s) gets A [L, in, r] and B [L, r, out] with W' = W + (alpha / r) (A B)^T, the
input and output axes flattened; A is drawn as PEFT draws
`lora_A` (kaiming-uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B starts at 0, so step 0
is the base. In training the projection computes x W + (x A) (alpha / r) B beside the frozen W, as
PEFT does (`layers.Projection`'s adapters, attached by `init_lora`), so the backward pass never
forms the frozen kernel's gradient; `apply_lora` merges W' once for the export. A target's input
axes are read from its einsum (`layers.kernel_axes`: the kernel's trailing subscripts, which the
input carries: D for q/k/v/gate/up, F for down, N and H for o).
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, traverse_util
from jax.experimental import multihost_utils

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import (checkpoint, default_model, families, gguf_import, layers,
                                 reward_model, weights)
from socialrm_jax.runtime import global_arrays

SCORE_KERNEL = "score/kernel"
LORA_A, LORA_B = "lora_a", "lora_b"
DEFAULT_INITIALIZER_RANGE = 0.02  # transformers' PretrainedConfig default
# The projections LoRA adapts by default (socialrm-train's --lora_targets).
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj")


@dataclasses.dataclass
class TrainModel:
  """A base ready to train: family, score-head config, the module's graph and parameters."""
  family: types.ModuleType
  config: Any
  graphdef: Any
  params: dict[str, jax.Array]  # path -> array, in the compute dtype, placed on the mesh
  rest: Any  # the module's state that is not a parameter (none for the decoders)
  module: nnx.Module  # the abstract module: its projections' einsums say LoRA's axes
  tokenizer_path: str
  hf_config: dict  # the base's config.json (a native checkpoint's manifest config otherwise)
  attention: str

  @property
  def sources(self) -> dict[str, weights.WeightSource]:
    return self.family.weight_sources(self.config)


def sequence_classifier(architecture: str, family: types.ModuleType) -> str:
  """The `*ForSequenceClassification` architecture of a causal LM's family."""
  for suffix in ("ForCausalLM", "LMHeadModel"):
    if architecture.endswith(suffix):
      name = architecture[:-len(suffix)] + "ForSequenceClassification"
      if name in family.ARCHITECTURES:
        return name
  raise InputError(f"{architecture}: no sequence-classifier class of its family to train a "
                   "reward model as")


def _base_config(path: str) -> tuple[str, str, dict]:
  """(architecture, head kind, HF config dict) of the base at `path` (resolved)."""
  if checkpoint.is_native(path):
    _, config = checkpoint.read_manifest(path)
    return config["architecture"], config["head"], config
  if os.path.isfile(os.path.join(path, "config.json")):
    hf = tables.read_json_object(os.path.join(path, "config.json"))
  else:
    found = gguf_import.gguf_file_in(path)
    if found is None:
      raise InputError("--model: not a model folder, GGUF file or native checkpoint", path)
    hf = gguf_import.read_gguf(found).hf_config
  architecture = (hf.get("architectures") or [""])[0]
  return architecture, families.supported_architectures().get(architecture, ""), hf


def load_base(path: str, *, dtype: str, mesh, seed: int, attention: str = "auto",
              remat_policy: str = "auto") -> TrainModel:
  """The base at `path` (a HF folder, a GGUF file or a folder with one, a native checkpoint, the
  default model's alias or a Hub id) with a one-output score head; `remat_policy`: what the
  layers' backward pass keeps (`trunk.REMAT_POLICY_NAMES`)."""
  path = default_model.resolve_model_path(path)
  if not os.path.exists(path):
    raise InputError("--model: no such model file or folder", path)
  architecture, head, base_config = _base_config(path)
  if head not in ("score", "lm"):
    raise InputError(f"--model: {architecture or 'no architecture'} is neither a causal language "
                     "model nor a reward model with a score head", path)
  loaded = reward_model.load_reward_model(path, dtype, mesh, head="none" if head == "lm" else None,
                                          attention=attention, remat_policy=remat_policy)
  if not loaded.is_causal:
    raise InputError(f"--model: {architecture} is not a decoder; only decoders are trained", path)
  config = loaded.config
  custom_head = config.reward_head is not None
  if custom_head or (head == "score" and config.num_labels != 1):
    raise InputError(f"--model: {architecture} has a reward head of {config.num_labels} outputs "
                     "or a custom one; only a one-output `score` head is trained", path)
  hf_config = config.to_dict() if checkpoint.is_native(path) else base_config
  jdtype = reward_model.model_dtype(dtype)
  params = {p: v.get_value() for p, v in weights.param_paths(loaded.module).items()}
  if head == "lm":
    config = dataclasses.replace(config, head="score", num_labels=1,
                                 architecture=sequence_classifier(architecture, loaded.family))
    std = float(hf_config.get("initializer_range", DEFAULT_INITIALIZER_RANGE))
    kernel = std * jax.random.normal(jax.random.key(seed), (1, config.hidden_size), jnp.float32)
    # Placed from the host: the same seeded values on every process, whose mesh may span several.
    params[SCORE_KERNEL] = global_arrays.put_global(
        np.asarray(kernel.astype(jdtype)),
        weights.param_sharding((1, config.hidden_size), None, mesh))
  module = reward_model.abstract_module(loaded.family, config, jdtype, loaded.attention,
                                        remat_policy)
  graphdef, _, rest = nnx.split(module, nnx.Param, ...)
  missing = set(weights.param_paths(module)) ^ set(params)
  if missing:
    raise ValueError(f"parameters do not match the score model's: {sorted(missing)}")
  return TrainModel(loaded.family, config, graphdef, params, rest, module, loaded.tokenizer_path,
                    hf_config, loaded.attention)


def nested(flat: Mapping[str, Any]) -> dict:
  """{'a/b/c': x} -> {'a': {'b': {'c': x}}}: what `nnx.merge` takes as a state."""
  return traverse_util.unflatten_dict(flat, sep="/")


def _projection(module: nnx.Module, path: str):
  node = module
  for key in path.split("/")[:-1]:
    node = getattr(node, key)
  return node


def lora_targets(model: TrainModel, names: Sequence[str]) -> list[str]:
  """The kernels of the projections named `names` ('q_proj', ...), or one line naming the
  projections there are."""
  kernels = [p for p in model.params if p.endswith("/kernel") and p != SCORE_KERNEL]
  by_name = {p.split("/")[-2]: p for p in kernels}
  unknown = [n for n in names if not any(p.split("/")[-2] == n for p in kernels)]
  if unknown or not names:
    raise InputError(f"--lora_targets: no projection named {', '.join(unknown) or '(none given)'} "
                     f"in this model; its projections: {', '.join(sorted(by_name))}")
  return sorted(p for p in kernels if p.split("/")[-2] in names)


def lora_axes(model: TrainModel, path: str) -> tuple[int, int]:
  """(output axes, input axes) of a stacked target kernel [L, out..., in...], from its einsum."""
  return layers.kernel_axes(_projection(model.module, path).equation)


def init_lora(model: TrainModel, targets: Sequence[str], rank: int,
              seed: int) -> dict[str, jax.Array]:
  """Attaches LoRA adapters to `model`'s target projections (its graph then computes
  x W + (x A) (alpha / r) B, `layers.Projection`) and returns their initial values:
  {'<target>/lora_a': [L, in, r], '<target>/lora_b': [L, r, out]} in float32."""
  out = {}
  for number, path in enumerate(targets):
    shape = model.params[path].shape  # [L, out..., in...]
    outs, _ = lora_axes(model, path)
    fan_out = math.prod(shape[1:1 + outs])
    fan_in = math.prod(shape[1 + outs:])
    bound = 1.0 / math.sqrt(fan_in)
    key = jax.random.fold_in(jax.random.key(seed), number)
    out[f"{path}/{LORA_A}"] = jax.random.uniform(key, (shape[0], fan_in, rank), jnp.float32,
                                                 -bound, bound)
    out[f"{path}/{LORA_B}"] = jnp.zeros((shape[0], rank, fan_out), jnp.float32)
    projection = _projection(model.module, path)
    for name in (LORA_A, LORA_B):
      value = out[f"{path}/{name}"]
      setattr(projection, name, nnx.Param(jax.ShapeDtypeStruct(value.shape, value.dtype)))
  model.graphdef, _, model.rest = nnx.split(model.module, nnx.Param, ...)
  return out


def lora_delta(a: jax.Array, b: jax.Array, shape: Sequence[int], scale: float) -> jax.Array:
  """(alpha / r) (A B)^T as a kernel of `shape` [L, out..., in...]."""
  return (scale * jnp.einsum("lir,lro->loi", a, b)).reshape(shape)


def apply_lora(params: Mapping[str, jax.Array], lora: Mapping[str, jax.Array],
               scale: float) -> dict[str, jax.Array]:
  """The parameters with every target's W + (alpha / r) A B (in W's dtype)."""
  out = dict(params)
  for key, a in lora.items():
    if not key.endswith("/" + LORA_A):
      continue
    path = key[:-len(LORA_A) - 1]
    w = params[path]
    out[path] = (w.astype(jnp.float32)
                 + lora_delta(a, lora[f"{path}/{LORA_B}"], w.shape, scale)).astype(w.dtype)
  return out


def is_trained(path: str, lora: bool) -> bool:
  """Whether a base parameter trains: every one in full fine-tuning, the head alone with LoRA."""
  return not lora or path == SCORE_KERNEL


def split_trainable(params: Mapping[str, jax.Array], lora: bool):
  """(trained float32 copies, frozen) of the base parameters."""
  trained = {p: v.astype(jnp.float32) for p, v in params.items() if is_trained(p, lora)}
  frozen = {p: v for p, v in params.items() if not is_trained(p, lora)}
  return trained, frozen


def host_params(params: Mapping[str, jax.Array]) -> dict[str, np.ndarray]:
  """The parameters whole on this host. A parameter split over devices of several processes (a
  `model` axis across hosts) is gathered from all of them: every process of the job calls this."""
  def whole(value):
    if isinstance(value, jax.Array) and not value.is_fully_addressable and (
        not value.is_fully_replicated):
      return np.asarray(multihost_utils.process_allgather(value, tiled=True))
    return np.asarray(jax.device_get(value))
  return {p: whole(v) for p, v in params.items()}
