"""Decoder-only transformers: Llama, Mistral, Qwen2, Qwen3, Gemma and Gemma 2, in one Model.

The variants differ in a handful of switches recorded in `Config` (biases, q/k norms, Gemma's
`1 + w` norms and scaled embeddings, Gemma 2's sandwich norms, soft-capping and alternating sliding
windows, RoPE scaling). `config_from_hf` reads them from a HF `config.json` dict, new style
(`rope_parameters`, `layer_types`) or old style (`rope_theta` + `rope_scaling`, no `layer_types`).

The blocks are one stacked module (every parameter with a leading [L] axis) run under
`jax.lax.scan`, so the traced program holds one layer and compile time does not grow with depth.
What differs between layers is data, not code: each layer's sliding window is scanned with its
parameters.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from socialrm_jax.models import attention as attention_lib
from socialrm_jax.models import heads as heads_lib
from socialrm_jax.models import hf_config as hf_config_lib
from socialrm_jax.models import layers
from socialrm_jax.models.weights import WeightSource, identity

IS_CAUSAL = True

# The window of a full-attention layer when other layers slide: farther than any two positions.
FULL_WINDOW = np.iinfo(np.int32).max

# Config.variant -> the HF class-name prefix of that family.
_PREFIX = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3",
           "gemma": "Gemma", "gemma2": "Gemma2"}

ARCHITECTURES: dict[str, str] = {
    f"{prefix}{suffix}": head for prefix in _PREFIX.values()
    for suffix, head in (("ForSequenceClassification", "score"), ("ForCausalLM", "lm"))}


def _variant_of(architecture: str) -> str:
  for variant, prefix in _PREFIX.items():
    if architecture in (f"{prefix}ForSequenceClassification", f"{prefix}ForCausalLM"):
      return variant
  raise ValueError(f"not a decoder architecture: {architecture!r}; supported: "
                   + ", ".join(ARCHITECTURES))


@dataclasses.dataclass(frozen=True)
class Config(hf_config_lib.JsonConfig):
  """Everything the decoder needs; hashable, so it can live in an nnx graph definition."""
  architecture: str
  head: str  # "score" | "lm" | "none"
  num_labels: int
  pad_token_id: int | None
  variant: str  # a key of _PREFIX
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rms_norm_eps: float
  activation: str
  rope_theta: float = 10000.0
  rope_type: str = "default"  # "default" | "linear" | "llama3"
  rope_factor: float = 1.0
  rope_low_freq_factor: float = 1.0
  rope_high_freq_factor: float = 4.0
  rope_original_max_positions: int = 8192
  qkv_bias: bool = False
  out_bias: bool = False
  mlp_bias: bool = False
  qk_norm: bool = False  # Qwen3: RMSNorm over each head's q and k before RoPE
  unit_offset_norm: bool = False  # Gemma: norms multiply by (1 + w)
  scale_embeddings: bool = False  # Gemma: embeddings times sqrt(hidden_size)
  sandwich_norms: bool = False  # Gemma 2: norms before and after attention and MLP
  query_scale: float = 0.0  # multiplies q.k; 0 means head_dim ** -0.5
  attn_logit_softcap: float | None = None
  final_logit_softcap: float | None = None
  layer_windows: tuple[int | None, ...] = ()  # per layer: sliding window or None (full)
  tie_word_embeddings: bool = False
  # A custom reward head (ArmoRM, GRM, ...: `heads.describe`) in place of `score`; None: `score`.
  reward_head: heads_lib.HeadSpec | None = None

  @property
  def attention_scale(self) -> float:
    return self.query_scale or self.head_dim ** -0.5

  def to_dict(self) -> dict[str, Any]:
    out = super().to_dict()
    out["reward_head"] = None if self.reward_head is None else self.reward_head.to_dict()
    return out

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> "Config":
    head = d.get("reward_head")
    config = super().from_dict({k: v for k, v in d.items() if k != "reward_head"})
    return dataclasses.replace(
        config, reward_head=None if head is None else heads_lib.HeadSpec.from_dict(head))


def _rope_settings(hf: dict) -> dict[str, Any]:
  """RoPE theta and scaling from `rope_parameters` (transformers >= 5) or `rope_scaling` (older)."""
  params = dict(hf.get("rope_parameters") or {})
  if not params and hf.get("rope_scaling"):
    params = dict(hf["rope_scaling"])
  theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
  rope_type = params.get("rope_type", params.get("type", "default"))
  if rope_type not in ("default", "linear", "llama3"):
    raise ValueError(f"unsupported rope type {rope_type!r} (supported: default, linear, llama3)")
  if params.get("partial_rotary_factor", 1.0) != 1.0:
    raise ValueError("partial_rotary_factor != 1 is not supported for these decoders")
  out: dict[str, Any] = {"rope_theta": float(theta), "rope_type": rope_type}
  if rope_type in ("linear", "llama3"):
    out["rope_factor"] = float(params["factor"])
  if rope_type == "llama3":
    out["rope_low_freq_factor"] = float(params["low_freq_factor"])
    out["rope_high_freq_factor"] = float(params["high_freq_factor"])
    out["rope_original_max_positions"] = int(
        params.get("original_max_position_embeddings", hf.get("max_position_embeddings", 8192)))
  return out


def _layer_windows(hf: dict, variant: str, num_layers: int) -> tuple[int | None, ...]:
  """Per-layer sliding window, following each family's HF config logic."""
  window = hf.get("sliding_window")
  if variant == "mistral":
    # Mistral slides on every layer whenever a window is set.
    return (window,) * num_layers if window else (None,) * num_layers
  if variant in ("qwen2", "qwen3") and not hf.get("use_sliding_window", False):
    window = None
  layer_types = hf.get("layer_types")
  if layer_types is None:
    if variant == "gemma2":
      layer_types = ["sliding_attention" if (i + 1) % 2 else "full_attention"
                     for i in range(num_layers)]
    elif variant in ("qwen2", "qwen3") and window:
      first = hf.get("max_window_layers", 28)
      layer_types = ["sliding_attention" if i >= first else "full_attention"
                     for i in range(num_layers)]
    else:
      layer_types = ["full_attention"] * num_layers
  if variant in ("llama", "gemma"):
    window = None
  return tuple(window if (t == "sliding_attention" and window) else None for t in layer_types)


_TIED_BY_DEFAULT = {"gemma", "gemma2"}


def _activation(hf: dict, variant: str) -> str:
  """The MLP activation each HF family actually runs."""
  if variant == "gemma2":
    return hf.get("hidden_activation") or "gelu_pytorch_tanh"
  if variant == "gemma":
    act = hf.get("hidden_act") or "gelu_pytorch_tanh"
    # GemmaConfig rewrites the legacy "gelu" of the official releases to the tanh approximation.
    return "gelu_pytorch_tanh" if act == "gelu" else act
  return hf.get("hidden_act") or "silu"


def config_from_hf(hf_config: dict, architecture: str) -> Config:
  """HF `config.json` dict + architecture name -> Config."""
  variant = _variant_of(architecture)
  hidden = hf_config["hidden_size"]
  num_heads = hf_config["num_attention_heads"]
  num_layers = hf_config["num_hidden_layers"]
  head_dim = hf_config.get("head_dim") or hidden // num_heads
  gemma_like = variant in ("gemma", "gemma2")
  act = _activation(hf_config, variant)
  # As in transformers: `id2label` decides the label count when present.
  attention_bias = bool(hf_config.get("attention_bias", False))
  return Config(
      architecture=architecture,
      head=ARCHITECTURES[architecture],
      num_labels=hf_config_lib.num_labels(hf_config),
      pad_token_id=hf_config.get("pad_token_id"),
      variant=variant,
      vocab_size=hf_config["vocab_size"],
      hidden_size=hidden,
      intermediate_size=hf_config["intermediate_size"],
      num_layers=num_layers,
      num_heads=num_heads,
      num_kv_heads=hf_config.get("num_key_value_heads") or num_heads,
      head_dim=head_dim,
      rms_norm_eps=float(hf_config.get("rms_norm_eps", 1e-6)),
      activation=act,
      **_rope_settings(hf_config),
      # Qwen2 always has q/k/v biases and no o bias; Mistral has none; the rest follow the flag.
      qkv_bias=variant == "qwen2" or (attention_bias and variant != "mistral"),
      out_bias=attention_bias and variant not in ("qwen2", "mistral"),
      mlp_bias=bool(hf_config.get("mlp_bias", False)) and variant == "llama",
      qk_norm=variant == "qwen3",
      unit_offset_norm=gemma_like,
      scale_embeddings=gemma_like,
      sandwich_norms=variant == "gemma2",
      query_scale=(float(hf_config.get("query_pre_attn_scalar", 256)) ** -0.5
                   if variant == "gemma2" else 0.0),
      attn_logit_softcap=hf_config.get("attn_logit_softcapping") if variant == "gemma2" else None,
      final_logit_softcap=(hf_config.get("final_logit_softcapping")
                           if variant == "gemma2" else None),
      layer_windows=_layer_windows(hf_config, variant, num_layers),
      tie_word_embeddings=bool(hf_config.get("tie_word_embeddings", variant in _TIED_BY_DEFAULT)),
  )


class Attention(nnx.Module):
  """Grouped-query self-attention with RoPE, optional q/k norms, soft-capping and a sliding window."""

  def __init__(self, config: Config, *, implementation: str, dtype, param_dtype, rngs: nnx.Rngs):
    d, n, k, h = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.q_proj = layers.Projection("BTD,DNH->BTNH", (d, n, h), (n, h) if config.qkv_bias else None, **kw)
    self.k_proj = layers.Projection("BSD,DKH->BSKH", (d, k, h), (k, h) if config.qkv_bias else None, **kw)
    self.v_proj = layers.Projection("BSD,DKH->BSKH", (d, k, h), (k, h) if config.qkv_bias else None, **kw)
    self.o_proj = layers.Projection("BTNH,NHD->BTD", (n, h, d), (d,) if config.out_bias else None, **kw)
    if config.qk_norm:
      norm_kw = dict(unit_offset=False, dtype=dtype, param_dtype=param_dtype)
      self.q_norm = layers.RMSNorm(h, config.rms_norm_eps, **norm_kw)
      self.k_norm = layers.RMSNorm(h, config.rms_norm_eps, **norm_kw)
    self.config = config
    self.implementation = implementation

  def __call__(self, x: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               window: jax.Array | None) -> jax.Array:
    q = self.q_proj(x)  # [B, T, N, H]
    k = self.k_proj(x)  # [B, T, K, H]
    v = self.v_proj(x)  # [B, T, K, H]
    if self.config.qk_norm:
      q, k = self.q_norm(q), self.k_norm(k)
    inv_freq = rope_inverse_frequencies(self.config)
    q = layers.apply_rope(q, positions, inv_freq)
    k = layers.apply_rope(k, positions, inv_freq)
    out = attention_lib.attend(q, k, v, layout, positions, scale=self.config.attention_scale,
                               logit_cap=self.config.attn_logit_softcap, window=window,
                               implementation=self.implementation)  # [B, T, N, H]
    return self.o_proj(out)  # [B, T, D]


def rope_inverse_frequencies(config: Config) -> np.ndarray:
  return layers.rope_inverse_frequencies(
      config.head_dim, config.rope_theta, config.rope_type, config.rope_factor,
      config.rope_low_freq_factor, config.rope_high_freq_factor, config.rope_original_max_positions)


class Block(nnx.Module):
  """One decoder layer: pre-norm residual attention and MLP (Gemma 2 also norms their outputs)."""

  def __init__(self, config: Config, *, attention: str, dtype, param_dtype, rngs: nnx.Rngs):
    def norm():
      return layers.RMSNorm(config.hidden_size, config.rms_norm_eps,
                            unit_offset=config.unit_offset_norm, dtype=dtype, param_dtype=param_dtype)
    self.pre_attn_norm = norm()
    self.attn = Attention(config, implementation=attention, dtype=dtype, param_dtype=param_dtype,
                          rngs=rngs)
    self.pre_mlp_norm = norm()
    self.mlp = layers.GatedMLP(config.hidden_size, config.intermediate_size, config.activation,
                               config.mlp_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    if config.sandwich_norms:
      self.post_attn_norm = norm()
      self.post_mlp_norm = norm()
    self.sandwich = config.sandwich_norms

  def __call__(self, x: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               window: jax.Array | None) -> jax.Array:
    attn_out = self.attn(self.pre_attn_norm(x), positions, layout, window)
    if self.sandwich:
      attn_out = self.post_attn_norm(attn_out)
    x = x + attn_out
    mlp_out = self.mlp(self.pre_mlp_norm(x))
    if self.sandwich:
      mlp_out = self.post_mlp_norm(mlp_out)
    return x + mlp_out  # [B, T, D]


class Model(nnx.Module):
  """Embeddings -> blocks -> final norm; `head` maps chosen hidden states to scores or logits."""

  def __init__(self, config: Config, *, attention: str = "xla", dtype=jnp.float32,
               param_dtype=jnp.float32, rngs: nnx.Rngs | None = None):
    """`attention`: a concrete implementation of `attention.attend` ("xla", "cudnn", ...)."""
    rngs = nnx.Rngs(0) if rngs is None else rngs  # a fresh stream per model, not a shared default
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.config = config
    self.dtype = dtype
    self.attention = attention
    self.embedder = layers.Embedder(config.vocab_size, config.hidden_size, **kw)

    # One Block whose parameters carry a leading [L] axis, each layer drawn from its own key.
    @nnx.split_rngs(splits=config.num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def stacked_blocks(rngs: nnx.Rngs) -> Block:
      return Block(config, attention=attention, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    self.layers = stacked_blocks(rngs)
    self.final_norm = layers.RMSNorm(config.hidden_size, config.rms_norm_eps,
                                     unit_offset=config.unit_offset_norm, dtype=dtype,
                                     param_dtype=param_dtype)
    if config.head == "score" and config.reward_head is not None:
      self.reward_head = heads_lib.RewardHead(config.reward_head, config.hidden_size,
                                              param_dtype=param_dtype)
    elif config.head == "score":
      self.score = layers.Projection("...D,DL->...L", (config.hidden_size, config.num_labels), None, **kw)
    elif config.head == "lm" and not config.tie_word_embeddings:
      self.lm_head = layers.Projection("...D,DV->...V", (config.hidden_size, config.vocab_size), None, **kw)

  def __call__(self, input_ids: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               token_type_ids: jax.Array | None = None) -> jax.Array:
    """input_ids, positions [B, T] int32 under `layout` -> hidden [B, T, D]."""
    del token_type_ids  # decoders have no segment embeddings
    x = self.embedder(input_ids)  # [B, T, D]
    if self.config.scale_embeddings:
      # Gemma multiplies by sqrt(D) rounded to the compute dtype (55.4256 -> 55.5 in bf16), as HF.
      x = x * jnp.asarray(math.sqrt(self.config.hidden_size), dtype=self.dtype)
    graphdef, stacked = nnx.split(self.layers)  # every leaf [L, ...]
    windows = layer_window_array(self.config)

    def layer(x, scanned):  # one layer's parameters and window
      state, window = scanned
      return nnx.merge(graphdef, state)(x, positions, layout, window), None

    x, _ = jax.lax.scan(layer, x, (stacked, windows))
    return self.final_norm(x)  # [B, T, D]

  def head(self, hidden: jnp.ndarray, gate_hidden: jnp.ndarray | None = None) -> jnp.ndarray:
    """[..., D] -> [..., num_labels] (score head) or [..., V] (LM head); unchanged when the
    model was loaded trunk-only (`head="none"`). `gate_hidden` [..., D]: where a gated reward
    head reads its gate (ArmoRM, QRM: a prompt position)."""
    if self.config.head == "score" and self.config.reward_head is not None:
      return self.reward_head(hidden, gate_hidden)
    if self.config.head == "score":
      return self.score(hidden)
    if self.config.head == "lm":
      if self.config.tie_word_embeddings:
        logits = self.embedder.attend(hidden)
      else:
        logits = self.lm_head(hidden)
      return attention_lib.soft_cap(logits, self.config.final_logit_softcap)
    return hidden


def layer_window_array(config: Config) -> np.ndarray | None:
  """[L] int32 sliding window per layer (FULL_WINDOW where a layer attends fully), or None when
  no layer slides, so that the attention then has no window term at all."""
  if all(window is None for window in config.layer_windows):
    return None
  return np.array([FULL_WINDOW if window is None else window for window in config.layer_windows],
                  dtype=np.int32)


def is_saved_buffer(name: str) -> bool:
  """Tensors old checkpoints saved that are not weights: RoPE's inverse frequencies (we compute them)."""
  return name.endswith("rotary_emb.inv_freq")


def _linear_to_einsum(*shape: int):
  """HF Linear weight [out, in] -> its transpose reshaped to our kernel `shape`, where -1 stands
  for the axis split over `model`, so the same transform lays out a slice of rows or columns.

  E.g. q_proj [N*H, D] -> [D, N, H] as (D, -1, H) (rows = heads); o_proj [D, N*H] -> [N, H, D] as
  (-1, H, D) (columns = heads); down_proj [D, F] -> [F, D] as (-1, D).
  """
  def transform(w: np.ndarray) -> np.ndarray:
    return w.T.reshape(shape)
  return transform


def _reshape(*shape: int):
  def transform(w: np.ndarray) -> np.ndarray:
    return w.reshape(shape)
  return transform


def weight_sources(config: Config) -> dict[str, WeightSource]:
  """Our parameter path -> HF tensor(s), transform, and the axes split over `model`.

  Block parameters are stacked [L, ...] from the L per-layer HF tensors, so their `model_axis`
  counts the layer axis. Heads and MLP width are split: an HF Linear keeps them in its rows
  (`hf_axis=0`: q/k/v, gate/up, the LM head) or, for the projections back to D, its columns
  (`hf_axis=1`: o_proj, down_proj); the embedding keeps the vocabulary in its rows.
  """
  d, h = config.hidden_size, config.head_dim

  def per_layer(name: str) -> tuple[str, ...]:
    return tuple(f"model.layers.{i}.{name}" for i in range(config.num_layers))

  def block(name: str, transform=identity, model_axis: int | None = None,
            hf_axis: int | None = None) -> WeightSource:
    return WeightSource(per_layer(name), transform, model_axis, hf_axis)

  out: dict[str, WeightSource] = {
      "embedder/embedding": WeightSource("model.embed_tokens.weight", model_axis=0, hf_axis=0),
      "final_norm/scale": WeightSource("model.norm.weight"),
      "layers/pre_attn_norm/scale": block("input_layernorm.weight"),
  }
  if config.sandwich_norms:
    out["layers/post_attn_norm/scale"] = block("post_attention_layernorm.weight")
    out["layers/pre_mlp_norm/scale"] = block("pre_feedforward_layernorm.weight")
    out["layers/post_mlp_norm/scale"] = block("post_feedforward_layernorm.weight")
  else:
    out["layers/pre_mlp_norm/scale"] = block("post_attention_layernorm.weight")
  for name in ("q_proj", "k_proj", "v_proj"):
    out[f"layers/attn/{name}/kernel"] = block(  # [L, D, N or K, H]
        f"self_attn.{name}.weight", _linear_to_einsum(d, -1, h), model_axis=2, hf_axis=0)
    if config.qkv_bias:
      out[f"layers/attn/{name}/bias"] = block(  # [L, N or K, H]
          f"self_attn.{name}.bias", _reshape(-1, h), model_axis=1, hf_axis=0)
  out["layers/attn/o_proj/kernel"] = block(  # [L, N, H, D]
      "self_attn.o_proj.weight", _linear_to_einsum(-1, h, d), model_axis=1, hf_axis=1)
  if config.out_bias:
    out["layers/attn/o_proj/bias"] = block("self_attn.o_proj.bias")
  if config.qk_norm:
    out["layers/attn/q_norm/scale"] = block("self_attn.q_norm.weight")
    out["layers/attn/k_norm/scale"] = block("self_attn.k_norm.weight")
  for name in ("gate_proj", "up_proj"):
    out[f"layers/mlp/{name}/kernel"] = block(  # [L, D, F]
        f"mlp.{name}.weight", _linear_to_einsum(d, -1), model_axis=2, hf_axis=0)
    if config.mlp_bias:
      out[f"layers/mlp/{name}/bias"] = block(f"mlp.{name}.bias", model_axis=1, hf_axis=0)
  out["layers/mlp/down_proj/kernel"] = block(  # [L, F, D]
      "mlp.down_proj.weight", _linear_to_einsum(-1, d), model_axis=1, hf_axis=1)
  if config.mlp_bias:
    out["layers/mlp/down_proj/bias"] = block("mlp.down_proj.bias")
  if config.head == "score" and config.reward_head is not None:
    out.update(heads_lib.weight_sources(config.reward_head))
  elif config.head == "score":
    out["score/kernel"] = WeightSource("score.weight", _linear_to_einsum(d, config.num_labels))
  elif config.head == "lm" and not config.tie_word_embeddings:
    out["lm_head/kernel"] = WeightSource(  # [D, V]
        "lm_head.weight", _linear_to_einsum(d, -1), model_axis=1, hf_axis=0)
  return out
