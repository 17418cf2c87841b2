"""Reward heads as data: the custom heads of published reward models, read from `config.json` and
the checkpoint's tensor names, run on a decoder's hidden states.

A `HeadSpec` says everything a head computes; `describe` builds it from the config's
`architectures` (the reward class), its head fields (`num_objectives`, `num_quantiles`,
`gating_temperature`, `vhead_layer_type`, `score_type`, `do_normalize`, ...) and the tensors the
checkpoint holds (which Linear and BatchNorm layers a head's `nn.Sequential` has, their widths and
biases). `RewardHead` runs it; `weight_sources` maps its parameters to those tensors. No class of
the reward model's own code is ever imported: each is described here from its published source
(the rewardbench 0.1.4 wheel's `models/*.py`, or the checkpoint's modelling file).

Three kinds of head, each reading the hidden state at the answer's last token, h [..., D]:

- "value": a chain of Linear layers (ReLU between them) -> [L] outputs, times `scale`, then
  Beaver's normalizer when the config turns it on. INF-ORM (`score.0`, `score.2`), GRM
  (`v_head.summary`, linear or MLP), UltraRM / Eurus (`regression_head`), Starling (`v_head`),
  Beaver (`score_head`; the cost model's pipeline ranks by minus its score, `scale = -1`).
- "gated" (ArmoRM, QRM): `regression_layer` -> [K objectives (x Q quantiles, averaged)], a gating
  network read at a *prompt* position g [..., D] -> softmax(x / temperature) * logit_scale [K],
  and `reward_transform_matrix` [K, K]: score = sum_k gate_k (r @ T)_k. The prompt position is
  the last occurrence of `gate_pattern` in the sequence (ArmoRM's and QRM's
  `find_token_for_gating`); it lies in the prompt, so the scorer reads it where an item's
  candidates share it (`scoring/packing.py`).
- "distribution" (LDL-Reward): `regression_layer` -> K / bins distributions over `bins` reward
  levels (softmax), mixed by `gating_layer` (read at the last token too) into one distribution
  whose mean over linspace(0, 1, bins) is the score.

Output 0 is always the score the model's own pipeline ranks by; the objectives follow
(`output_names`): ArmoRM's 19 `rewards`, QRM's expected objective rewards, LDL's per-objective
means.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from socialrm_jax.models.weights import WeightSource

# ArmoRM's and QRM's gating position: the last `<|eot_id|><|start_header_id|>assistant
# <|end_header_id|>\n\n` in Llama 3's ids, as their published `find_token_for_gating` hard-codes.
LLAMA3_ASSISTANT_HEADER = (128009, 128006, 78191, 128007, 271)
PATTERN_TEXTS = {LLAMA3_ASSISTANT_HEADER:
                 "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n"}
# The 19 objectives of RLHFlow/ArmoRM-Llama3-8B-v0.1, in the order of its `rewards` (model card).
ARMORM_OBJECTIVES = (
    "helpsteer-helpfulness", "helpsteer-correctness", "helpsteer-coherence",
    "helpsteer-complexity", "helpsteer-verbosity", "ultrafeedback-overall_score",
    "ultrafeedback-instruction_following", "ultrafeedback-truthfulness", "ultrafeedback-honesty",
    "ultrafeedback-helpfulness", "beavertails-is_safe", "prometheus-score",
    "argilla-overall_quality", "argilla-judge_lm", "code-complexity", "code-style",
    "code-explanation", "code-instruction-following", "code-readability")
# LDL-Reward's reward levels per objective (`MultiOutputNN.forward`: x.view(-1, 10)).
LDL_BINS = 10
BATCH_NORM_EPS = 1e-5  # torch.nn.BatchNorm1d's default
LEAKY_RELU_SLOPE = 0.01  # torch.nn.LeakyReLU's default
BEAVER_EPS = 1e-8  # safe-rlhf's Normalizer.normalize
# Tensors a head's modules save that are not weights.
_SAVED_BUFFERS = re.compile(r"\.num_batches_tracked$|^normalizer\.count$")


@dataclasses.dataclass(frozen=True)
class Chain:
  """Linear layers in sequence, `activation` after each but the last, and after it a BatchNorm1d
  where `norms` names one (QRM's gating network); HF module names, output widths, biases."""
  layers: tuple[str, ...]
  widths: tuple[int, ...]
  biases: tuple[bool, ...]
  norms: tuple[str, ...]
  activation: str = "relu"  # "relu" | "leaky_relu"


@dataclasses.dataclass(frozen=True)
class HeadSpec:
  """One reward head (see the module docstring); hashable, and JSON through `to_dict`."""
  architecture: str  # the reward class, as config.json names it
  kind: str  # "value" | "gated" | "distribution"
  value: Chain
  output_names: tuple[str, ...]
  trunk_prefix: str = "model."  # where the decoder's tensors live (Starling: "transformer.")
  scale: float = 1.0
  normalize: str = ""  # Beaver with do_normalize: "affine" | "scale" | "translate" | "identity"
  gate: Chain | None = None
  gate_softmax: bool = True
  gate_temperature: float = 1.0
  gate_logit_scale: str = ""  # tensor name, or "" (none)
  transform_matrix: str = ""  # tensor name, or ""
  gate_pattern: tuple[int, ...] = ()  # gated: read the gate at this pattern's last occurrence
  num_quantiles: int = 1
  objectives_transformed: bool = False  # the objectives reported are r @ T (QRM), else r
  bins: int = 0

  @property
  def num_outputs(self) -> int:
    return len(self.output_names)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "HeadSpec":
    def chain(c):
      return None if c is None else Chain(**{k: tuple(v) if isinstance(v, list) else v
                                              for k, v in c.items()})
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
    return cls(**{**fields, "value": chain(d["value"]), "gate": chain(d.get("gate"))})


class HeadError(ValueError):
  """A checkpoint whose head cannot be described (a tensor or field missing)."""


def _chain(shapes: Mapping[str, tuple[int, ...]], prefix: str, activation: str = "relu") -> Chain:
  """The Linear (and BatchNorm1d) layers saved under `prefix`: one Linear (`prefix.weight`) or an
  nn.Sequential / ModuleList (`prefix.0.weight`, `prefix.2.weight`, ...)."""
  if f"{prefix}.weight" in shapes:
    names = [prefix]
  else:
    pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.weight$")
    names = [f"{prefix}.{i}" for i in sorted(int(m.group(1)) for m in map(pattern.match, shapes)
                                                if m)]
  layers, widths, biases, norms = [], [], [], []
  for name in names:
    if f"{name}.running_mean" in shapes:  # a BatchNorm1d after the previous layer's activation
      if not layers or norms[-1]:
        raise HeadError(f"{name} is a BatchNorm1d with no Linear layer before it")
      norms[-1] = name
      continue
    shape = shapes[f"{name}.weight"]
    if len(shape) != 2:
      raise HeadError(f"{name}.weight has shape {list(shape)}, not a Linear layer's [out, in]")
    layers.append(name)
    widths.append(int(shape[0]))
    biases.append(f"{name}.bias" in shapes)
    norms.append("")
  if not layers:
    raise HeadError(f"no tensors of the head's {prefix!r} layer")
  return Chain(tuple(layers), tuple(widths), tuple(biases), tuple(norms), activation)


def _objective_names(count: int, published: tuple[str, ...] = ()) -> tuple[str, ...]:
  """The published names when there are as many, else objective_0, objective_1, ..."""
  if len(published) == count:
    return published
  return tuple(f"objective_{k}" for k in range(count))


def _gated(architecture: str, hf: dict, shapes) -> HeadSpec:
  """ArmoRM (`LlamaForRewardModelWithGating`) and QRM (`...Gating3`, `...Gating31`): QRM's
  config carries `num_quantiles`, and its reported objectives are transformed."""
  k = int(hf.get("num_objectives", 19))
  quantiles = int(hf.get("num_quantiles") or 1)
  value = _chain(shapes, "regression_layer")
  if value.widths != (k * quantiles,) or any(value.biases):
    raise HeadError(f"regression_layer gives {list(value.widths)} outputs "
                    f"{'with' if any(value.biases) else 'without'} bias; num_objectives={k} x "
                    f"num_quantiles={quantiles} expected, without bias")
  gate = _chain(shapes, "gating.layers")
  if gate.widths[-1] != k:
    raise HeadError(f"the gating network gives {gate.widths[-1]} weights for {k} objectives")
  is_qrm = "num_quantiles" in hf
  return HeadSpec(
      architecture=architecture, kind="gated", value=value, gate=gate,
      output_names=("score",) + _objective_names(k, () if is_qrm else ARMORM_OBJECTIVES),
      gate_temperature=float(hf.get("gating_temperature", 10)),
      gate_logit_scale="gating.logit_scale" if "gating.logit_scale" in shapes else "",
      transform_matrix="reward_transform_matrix",
      gate_pattern=LLAMA3_ASSISTANT_HEADER, num_quantiles=quantiles,
      objectives_transformed=is_qrm)


def _ldl(architecture: str, hf: dict, shapes) -> HeadSpec:
  """LDL-Reward (`LDLRewardModel27B`): distributions over LDL_BINS levels, gated at the last
  token."""
  k = int(hf.get("num_objectives", 220))
  value = _chain(shapes, "regression_layer.network", "leaky_relu")
  gate = _chain(shapes, "gating_layer.network", "leaky_relu")
  if value.widths[-1] != k or k % LDL_BINS or gate.widths[-1] != k // LDL_BINS:
    raise HeadError(f"regression_layer gives {value.widths[-1]} and gating_layer "
                    f"{gate.widths[-1]} outputs; num_objectives={k} (a multiple of {LDL_BINS}) "
                    f"and {k // LDL_BINS} expected")
  return HeadSpec(
      architecture=architecture, kind="distribution", value=value, gate=gate,
      output_names=("score",) + _objective_names(k // LDL_BINS),
      gate_softmax=bool(hf.get("softmax", False)), gate_temperature=float(hf.get("temperature", 1.0)),
      bins=LDL_BINS)


def _value(prefix: str, trunk_prefix: str = "model."):
  def build(architecture: str, hf: dict, shapes) -> HeadSpec:
    value = _chain(shapes, prefix)
    if value.widths[-1] != 1:
      raise HeadError(f"{value.layers[-1]} gives {value.widths[-1]} outputs, not one reward")
    return HeadSpec(architecture=architecture, kind="value", value=value,
                    output_names=("score",), trunk_prefix=trunk_prefix)
  return build


def _grm(architecture: str, hf: dict, shapes) -> HeadSpec:
  """GRM's ValueHead: `vhead_layer_type` "linear" (one Linear) or "mlp" (the default:
  `vhead_num_layers` x (Linear, ReLU), then a Linear)."""
  layer_type = hf.get("vhead_layer_type", "mlp")
  spec = _value("v_head.summary")(architecture, hf, shapes)
  linear = spec.value.layers == ("v_head.summary",)
  if linear != (layer_type == "linear"):
    raise HeadError(f"vhead_layer_type={layer_type!r}, but the checkpoint's v_head.summary is "
                    f"{'one Linear' if linear else 'a Sequential of ' + str(len(spec.value.layers))}")
  return spec


def _beaver(architecture: str, hf: dict, shapes) -> HeadSpec:
  """safe-rlhf's `LlamaForScore`: `score_head` [score_dim]; the cost model's pipeline returns
  minus its scores; `do_normalize` applies the saved normalizer."""
  value = _chain(shapes, "score_head")
  score_type = hf.get("score_type", "reward")
  if score_type not in ("reward", "cost", "critic"):
    raise HeadError(f"score_type={score_type!r}; one of reward, cost, critic expected")
  normalize = ""
  if hf.get("do_normalize", False):
    normalize = {"reward": "affine", "cost": "scale", "critic": "identity"}[score_type]
  dims = value.widths[-1]
  names = ("score",) if dims == 1 else tuple(f"score_{d}" for d in range(dims))
  return HeadSpec(architecture=architecture, kind="value", value=value, output_names=names,
                  scale=-1.0 if score_type == "cost" else 1.0, normalize=normalize)


# The reward classes this module describes: config.json's `architectures[0]` -> builder.
REWARD_CLASSES = {
    "LlamaForRewardModelWithGating": _gated,     # ArmoRM (and QRM's published configs)
    "LlamaForRewardModelWithGating3": _gated,    # QRM-Llama3 (rewardbench qrm.py)
    "LlamaForRewardModelWithGating31": _gated,   # QRM-Llama3.1
    "LDLRewardModel27B": _ldl,                   # LDL-Reward-Gemma-2
    "INFORMForSequenceClassification": _value("score"),  # INF-ORM: Linear, ReLU, Linear
    "GRewardModel": _grm,                        # GRM: v_head, linear or MLP
    "LlamaRewardModel": _value("regression_head"),   # UltraRM
    "EurusRewardModel": _value("regression_head"),   # Eurus-RM (Mistral)
    "LlamaForScore": _beaver,                    # Beaver reward and cost
    # The same class under safe-rlhf's earlier name, as some published configs spell it.
    "LlamaModelForScore": _beaver,
}
BEAVER_CLASSES = ("LlamaForScore", "LlamaModelForScore")


def is_starling(architecture: str, shapes: Mapping[str, Any]) -> bool:
  """Starling-RM-34B saves its class under transformers' own name, LlamaForSequenceClassification,
  with the trunk under `transformer.` and a `v_head` instead of `score`."""
  return (architecture == "LlamaForSequenceClassification" and "v_head.weight" in shapes
          and "score.weight" not in shapes)


def may_carry_custom_head(architecture: str) -> bool:
  """Whether `describe` needs the checkpoint's tensors for `architecture` (a reward class, or a
  sequence classifier that may be Starling's)."""
  return architecture in REWARD_CLASSES or architecture == "LlamaForSequenceClassification"


def describe(hf_config: dict, architecture: str,
             shapes: Mapping[str, tuple[int, ...]]) -> HeadSpec | None:
  """The custom head of `architecture` on this checkpoint, or None for a standard class."""
  if is_starling(architecture, shapes):
    return dataclasses.replace(_value("v_head")(architecture, hf_config, shapes),
                               trunk_prefix="transformer.")
  builder = REWARD_CLASSES.get(architecture)
  return None if builder is None else builder(architecture, hf_config, shapes)


def head_tensors(spec: HeadSpec) -> set[str]:
  """Every tensor name the head reads."""
  return {name for s in weight_sources(spec).values() for name in s.hf_names}


def ignored_tensors(spec: HeadSpec, names) -> set[str]:
  """Tensors of the checkpoint the head saves but never computes with: BatchNorm's batch counts,
  and Beaver's normalizer when `do_normalize` is off (its reference never reads it then)."""
  out = {n for n in names if _SAVED_BUFFERS.search(n)}
  if spec.architecture in BEAVER_CLASSES and not spec.normalize:
    out |= {n for n in names if n.startswith("normalizer.")}
  return out


# Tensor names that only reward heads carry: a checkpoint holding any that its loader would not
# read is refused (never a base model scored with its head dropped).
HEAD_TENSOR_PREFIXES = ("score.", "v_head.", "regression_head.", "regression_layer.", "gating.",
                        "gating_layer.", "reward_transform_matrix", "score_head.", "normalizer.")


def is_head_tensor(name: str) -> bool:
  return name.startswith(HEAD_TENSOR_PREFIXES)


def _transpose(w: np.ndarray) -> np.ndarray:
  return w.T


def _chain_sources(chain: Chain, path: str) -> dict[str, WeightSource]:
  out = {}
  for i, (name, bias, norm) in enumerate(zip(chain.layers, chain.biases, chain.norms)):
    out[f"{path}/dense_{i}/kernel"] = WeightSource(f"{name}.weight", _transpose)  # [in, out]
    if bias:
      out[f"{path}/dense_{i}/bias"] = WeightSource(f"{name}.bias")
    if norm:
      for ours, theirs in (("mean", "running_mean"), ("var", "running_var"), ("scale", "weight"),
                           ("bias", "bias")):
        out[f"{path}/norm_{i}/{ours}"] = WeightSource(f"{norm}.{theirs}")
  return out


def weight_sources(spec: HeadSpec, path: str = "reward_head") -> dict[str, WeightSource]:
  """Our parameter path (under `path`) -> the checkpoint's tensor."""
  out = _chain_sources(spec.value, f"{path}/value")
  if spec.gate is not None:
    out.update(_chain_sources(spec.gate, f"{path}/gate"))
  if spec.gate_logit_scale:
    out[f"{path}/logit_scale"] = WeightSource(spec.gate_logit_scale)
  if spec.transform_matrix:
    out[f"{path}/transform"] = WeightSource(spec.transform_matrix)
  if spec.normalize:
    out[f"{path}/normalizer_mean"] = WeightSource("normalizer.mean")
    out[f"{path}/normalizer_var"] = WeightSource("normalizer.var")
  return out


def _zeros(shape, dtype) -> nnx.Param:
  return nnx.Param(jnp.zeros(shape, dtype))


class ChainModule(nnx.Module):
  """A `Chain` on [..., in] -> [..., widths[-1]], in float32 (the references upcast their heads or
  run them in the trunk's dtype; float32 is the closer of the two for bf16 trunks)."""

  def __init__(self, chain: Chain, in_dim: int, *, param_dtype):
    self.chain = chain
    for i, (width, bias, norm) in enumerate(zip(chain.widths, chain.biases, chain.norms)):
      setattr(self, f"dense_{i}", _Dense(in_dim, width, bias, param_dtype))
      if norm:
        setattr(self, f"norm_{i}", _BatchNorm(width, param_dtype))
      in_dim = width

  def __call__(self, x: jax.Array) -> jax.Array:
    act = (jax.nn.relu if self.chain.activation == "relu"
           else lambda v: jax.nn.leaky_relu(v, LEAKY_RELU_SLOPE))
    last = len(self.chain.layers) - 1
    for i, norm in enumerate(self.chain.norms):
      x = getattr(self, f"dense_{i}")(x)
      if i < last:
        x = act(x)
        if norm:
          x = getattr(self, f"norm_{i}")(x)
    return x


class _Dense(nnx.Module):
  def __init__(self, in_dim: int, out_dim: int, bias: bool, param_dtype):
    self.kernel = _zeros((in_dim, out_dim), param_dtype)
    self.bias = _zeros((out_dim,), param_dtype) if bias else None

  def __call__(self, x: jax.Array) -> jax.Array:
    y = jnp.einsum("...D,DO->...O", x, self.kernel[...].astype(jnp.float32),
                   precision=jax.lax.Precision.HIGHEST)
    return y if self.bias is None else y + self.bias[...].astype(jnp.float32)


class _BatchNorm(nnx.Module):
  """BatchNorm1d in eval mode: its running statistics."""

  def __init__(self, dim: int, param_dtype):
    self.mean, self.var = _zeros((dim,), param_dtype), _zeros((dim,), param_dtype)
    self.scale, self.bias = _zeros((dim,), param_dtype), _zeros((dim,), param_dtype)

  def __call__(self, x: jax.Array) -> jax.Array:
    f32 = lambda p: p[...].astype(jnp.float32)  # noqa: E731
    return ((x - f32(self.mean)) * jax.lax.rsqrt(f32(self.var) + BATCH_NORM_EPS) * f32(self.scale)
            + f32(self.bias))


class RewardHead(nnx.Module):
  """A `HeadSpec` on hidden states: [..., D] (and the gate's [..., D]) -> [..., num_outputs]."""

  def __init__(self, spec: HeadSpec, hidden_size: int, *, param_dtype):
    self.spec = spec
    self.value = ChainModule(spec.value, hidden_size, param_dtype=param_dtype)
    if spec.gate is not None:
      self.gate = ChainModule(spec.gate, hidden_size, param_dtype=param_dtype)
    if spec.gate_logit_scale:
      self.logit_scale = _zeros((1,), param_dtype)
    if spec.transform_matrix:
      k = spec.num_outputs - 1
      self.transform = _zeros((k, k), param_dtype)
    if spec.normalize:
      self.normalizer_mean = _zeros((spec.num_outputs,), param_dtype)
      self.normalizer_var = _zeros((spec.num_outputs,), param_dtype)

  def __call__(self, hidden: jax.Array, gate_hidden: jax.Array | None = None) -> jax.Array:
    spec = self.spec
    h = hidden.astype(jnp.float32)
    if spec.kind == "value":
      return self._normalized(self.value(h)) * spec.scale  # [..., L]
    if spec.kind == "gated":
      k = spec.num_outputs - 1
      quantiles = self.value(h).reshape(h.shape[:-1] + (k, spec.num_quantiles))  # [..., K, Q]
      rewards = quantiles.mean(axis=-1)  # [..., K]
      transformed = jnp.einsum("...K,KJ->...J", rewards, self.transform[...].astype(jnp.float32),
                               precision=jax.lax.Precision.HIGHEST)  # [..., K]
      if gate_hidden is None:
        raise ValueError(f"{spec.architecture} reads its gate at a prompt position: pass "
                         "gate_hidden")
      weights = self._gate_weights(gate_hidden.astype(jnp.float32))  # [..., K]
      score = jnp.sum(weights * transformed, axis=-1, keepdims=True)  # [..., 1]
      return jnp.concatenate([score, transformed if spec.objectives_transformed else rewards], -1)
    # "distribution"
    levels = self.value(h).reshape(h.shape[:-1] + (-1, spec.bins))  # [..., O, bins]
    distributions = jax.nn.softmax(levels, axis=-1)
    weights = self._gate_weights(h)  # [..., O]
    total = jnp.einsum("...O,...OB->...B", weights, distributions,
                       precision=jax.lax.Precision.HIGHEST)  # [..., bins]
    support = jnp.linspace(0.0, 1.0, spec.bins, dtype=jnp.float32)  # [bins]
    score = jnp.einsum("...B,B->...", total, support)[..., None]  # [..., 1]
    per_objective = jnp.einsum("...OB,B->...O", distributions, support)  # [..., O]
    return jnp.concatenate([score, per_objective], axis=-1)

  def _gate_weights(self, g: jax.Array) -> jax.Array:
    x = self.gate(g)
    if self.spec.gate_softmax:
      x = jax.nn.softmax(x / self.spec.gate_temperature, axis=-1)
    if self.spec.gate_logit_scale:
      x = x * self.logit_scale[...].astype(jnp.float32)[0]
    return x

  def _normalized(self, x: jax.Array) -> jax.Array:
    """Beaver's Normalizer.normalize (`do_normalize`), else x."""
    how = self.spec.normalize
    if not how or how == "identity":
      return x
    mean = self.normalizer_mean[...].astype(jnp.float32)
    std = jnp.sqrt(self.normalizer_var[...].astype(jnp.float32))
    if how == "affine":
      return (x - mean) / (std + BEAVER_EPS)
    if how == "scale":
      return x / (std + BEAVER_EPS)
    return x - mean  # "translate"


def gate_position(spec: HeadSpec, sequence: np.ndarray) -> int | None:
  """Where a gated head reads its gate in `sequence`: the first token of the last occurrence of
  `gate_pattern` (as the published `find_token_for_gating` searches), or None if it is absent."""
  pattern = np.asarray(spec.gate_pattern)
  sequence = np.asarray(sequence)
  if len(sequence) < len(pattern):
    return None
  windows = np.lib.stride_tricks.sliding_window_view(sequence, len(pattern))  # [T - n + 1, n]
  hits = np.flatnonzero((windows == pattern).all(axis=1))
  return int(hits[-1]) if hits.size else None
