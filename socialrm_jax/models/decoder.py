"""Decoder-only transformers: Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3 (text), OLMo 2,
Phi-3 and InternLM2, in one Model.

The variants differ in a handful of switches recorded in `Config` (biases, q/k norms, Gemma's
`1 + w` norms and scaled embeddings, Gemma 2's sandwich norms, soft-capping and alternating sliding
windows, Gemma 3's local RoPE base, OLMo 2's post-norms and whole-projection q/k norms, Phi-3's
partial rotary, RoPE scaling). `config_from_hf` reads them from a HF `config.json` dict, new style
(`rope_parameters`, `layer_types`) or old style (`rope_theta` + `rope_scaling`, no `layer_types`).
Fused checkpoint tensors (Phi-3's `qkv_proj` and `gate_up_proj`, InternLM2's grouped `wqkv`) are
split into the same q/k/v and gate/up parameters on load (`weight_sources`), so the model code is
one for all.

The blocks are one stacked module (every parameter with a leading [L] axis) run under
`jax.lax.scan`, so the traced program holds one layer and compile time does not grow with depth.
What differs between layers is data, not code: each layer's sliding window (and, for Gemma 3, its
RoPE frequencies) is scanned with its parameters.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from socialrm_jax.base.errors import InputError
from socialrm_jax.models import attention as attention_lib
from socialrm_jax.models import heads as heads_lib
from socialrm_jax.models import hf_config as hf_config_lib
from socialrm_jax.models import layers, trunk
from socialrm_jax.models.weights import (WeightSource, linear_to_einsum, reshape_to,
                                         stacked_sources)

IS_CAUSAL = True
HAS_POSITION_BIAS = False
# Every class keeps the trunk under `model.` (a reward class under another prefix:
# `heads.HeadSpec.trunk_prefix`).
BASE_MODEL_PREFIX = ""

# The window of a full-attention layer when other layers slide: farther than any two positions.
FULL_WINDOW = np.iinfo(np.int32).max

# Config.variant -> the HF class-name prefix of that family's `*ForSequenceClassification` and
# `*ForCausalLM`.
_PREFIX = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3",
           "gemma": "Gemma", "gemma2": "Gemma2", "olmo2": "Olmo2", "phi3": "Phi3"}

# HF architecture -> (Config.variant, head).
_VARIANTS: dict[str, tuple[str, str]] = {
    f"{prefix}{suffix}": (variant, head) for variant, prefix in _PREFIX.items()
    for suffix, head in (("ForSequenceClassification", "score"), ("ForCausalLM", "lm"))}
_VARIANTS.update({
    # transformers 5 names the text-only Gemma 3 classifier so; `Gemma3ForSequenceClassification`
    # is the multimodal one (a vision tower and a `text_config`), which is not implemented.
    "Gemma3TextForSequenceClassification": ("gemma3", "score"),
    "Gemma3ForCausalLM": ("gemma3", "lm"),
    # InternLM2's own (remote) code, never run: its reward model reads `v_head` at the last token.
    "InternLM2ForRewardModel": ("internlm2", "score"),
    "InternLM2ForCausalLM": ("internlm2", "lm"),
})

ARCHITECTURES: dict[str, str] = {name: head for name, (_, head) in _VARIANTS.items()}

# Architectures of these families that are refused, and why (`families.family_for` says so).
REFUSED_ARCHITECTURES: dict[str, str] = {
    name: ("multimodal Gemma 3 (a vision tower and a `text_config`) is not implemented; "
           "the text-only Gemma3TextForSequenceClassification and Gemma3ForCausalLM are")
    for name in ("Gemma3ForSequenceClassification", "Gemma3ForConditionalGeneration")}


@dataclasses.dataclass(frozen=True)
class Config(hf_config_lib.FamilyConfig):
  """Everything the decoder needs; hashable, so it can live in an nnx graph definition."""
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
  # InternLM2's dynamic NTK RoPE is the plain one for sequences up to this many tokens (and
  # changes its base beyond): rows longer than this are refused. 0: no such limit.
  rope_max_positions: int = 0
  rotary_dim: int = 0  # Phi-3's partial rotary: the leading dims of each head that rotate; 0 = all
  # Gemma 3: the sliding layers' own RoPE base (plain RoPE), and which layers use it.
  local_rope_theta: float = 0.0
  local_rope_layers: tuple[bool, ...] = ()
  qkv_bias: bool = False
  out_bias: bool = False
  mlp_bias: bool = False
  qk_norm: bool = False  # Qwen3, Gemma 3: RMSNorm over each head's q and k before RoPE
  qk_norm_over_heads: bool = False  # OLMo 2: q/k norms span the whole projection (all heads)
  unit_offset_norm: bool = False  # Gemma: norms multiply by (1 + w)
  scale_embeddings: bool = False  # Gemma: embeddings times sqrt(hidden_size)
  sandwich_norms: bool = False  # Gemma 2, Gemma 3: norms before and after attention and MLP
  post_norms_only: bool = False  # OLMo 2: norms after attention and MLP only, none before
  query_scale: float = 0.0  # multiplies q.k; 0 means head_dim ** -0.5
  attn_logit_softcap: float | None = None
  final_logit_softcap: float | None = None
  layer_windows: tuple[int | None, ...] = ()  # per layer: sliding window or None (full)
  # InternLM2's reward models: their scorer (`get_score`) appends this token to the templated
  # conversation and reads `v_head` there; None for every other model.
  reward_token_id: int | None = None

  @property
  def attention_scale(self) -> float:
    return self.query_scale or self.head_dim ** -0.5

  @property
  def norm_scale_in_float32(self) -> bool:
    """OLMo 2's RMSNorm multiplies by its weight in float32, then casts (Llama's casts first)."""
    return self.variant == "olmo2"

  @property
  def attention_logit_cap(self) -> float | None:
    return self.attn_logit_softcap

  @property
  def has_sliding_windows(self) -> bool:
    return any(window is not None for window in self.layer_windows)


def _rope_settings(hf: dict, variant: str, default_theta: float = 10000.0) -> dict[str, Any]:
  """RoPE theta and scaling from `rope_parameters` (transformers >= 5) or `rope_scaling` (older)."""
  params = dict(hf.get("rope_parameters") or {})
  if not params and hf.get("rope_scaling"):
    params = dict(hf["rope_scaling"])
  theta = params.get("rope_theta", hf.get("rope_theta", default_theta))
  rope_type = params.get("rope_type", params.get("type", "default"))
  out: dict[str, Any] = {}
  if variant == "internlm2" and rope_type == "dynamic":
    # InternLM2's dynamic NTK raises the base only once a sequence is longer than
    # max_position_embeddings; up to there it is the plain RoPE, and longer rows are refused.
    out["rope_max_positions"] = int(hf["max_position_embeddings"])
    rope_type = "default"
  if rope_type not in ("default", "linear", "llama3"):
    why = ""
    if rope_type in ("longrope", "su"):
      why = (": Phi-3's long-context RoPE switches its frequencies with the length of the whole "
             "batch, which packed scoring cannot match")
    raise ValueError(f"unsupported rope type {rope_type!r}{why} (supported: default, linear, "
                     "llama3" + (", dynamic" if variant == "internlm2" else "") + ")")
  partial = params.get("partial_rotary_factor", 1.0)
  if variant == "phi3":  # older Phi-3 configs keep it beside the RoPE settings
    partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
  if partial != 1.0 and variant != "phi3":
    raise ValueError("partial_rotary_factor != 1 is not supported for this decoder")
  if partial != 1.0:
    head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    out["rotary_dim"] = int(head_dim * partial)
  out.update(rope_theta=float(theta), rope_type=rope_type)
  if rope_type in ("linear", "llama3"):
    out["rope_factor"] = float(params["factor"])
  if rope_type == "llama3":
    out["rope_low_freq_factor"] = float(params["low_freq_factor"])
    out["rope_high_freq_factor"] = float(params["high_freq_factor"])
    out["rope_original_max_positions"] = int(
        params.get("original_max_position_embeddings", hf.get("max_position_embeddings", 8192)))
  return out


def _gemma3_rope_settings(hf: dict) -> dict[str, Any]:
  """Gemma 3: full-attention layers' RoPE (possibly scaled) and the sliding layers' own base,
  from `rope_parameters` per layer type (transformers >= 5) or `rope_theta`, `rope_scaling` and
  `rope_local_base_freq` (older), with Gemma3TextConfig's defaults."""
  params = hf.get("rope_parameters") or {}
  if "full_attention" in params or "sliding_attention" in params:
    full = dict(params.get("full_attention") or {})
    local = dict(params.get("sliding_attention") or {})
  else:
    full = dict(hf.get("rope_scaling") or {})
    full.setdefault("rope_theta", hf.get("rope_theta", 1_000_000.0))
    local = {"rope_theta": hf.get("rope_local_base_freq", 10_000.0)}
  local_type = local.get("rope_type", local.get("type", "default"))
  if local_type != "default":
    raise ValueError(f"unsupported rope type {local_type!r} for Gemma 3's sliding layers "
                     "(supported: default)")
  out = _rope_settings({"rope_parameters": full, **{k: v for k, v in hf.items() if k not in (
      "rope_parameters", "rope_scaling", "rope_theta")}}, "gemma3", default_theta=1_000_000.0)
  out["local_rope_theta"] = float(local.get("rope_theta", 10_000.0))
  return out


def _layer_types(hf: dict, variant: str, num_layers: int) -> list[str] | None:
  """Each layer's "sliding_attention" or "full_attention" where the config says (`layer_types`)
  or the family implies it; None when every layer attends fully."""
  if hf.get("layer_types") is not None:
    return list(hf["layer_types"])
  if variant == "gemma3":
    pattern = hf.get("sliding_window_pattern", 6)  # Gemma3TextConfig's default: 5 local, 1 global
    return ["sliding_attention" if (i + 1) % pattern else "full_attention"
            for i in range(num_layers)]
  return None


def _layer_windows(hf: dict, variant: str, num_layers: int) -> tuple[int | None, ...]:
  """Per-layer sliding window, following each family's HF config logic."""
  window = hf.get("sliding_window", 4096 if variant == "gemma3" else None)
  if variant in ("mistral", "phi3"):
    # Mistral and Phi-3 slide on every layer whenever a window is set.
    return (window,) * num_layers if window else (None,) * num_layers
  if variant in ("qwen2", "qwen3") and not hf.get("use_sliding_window", False):
    window = None
  layer_types = _layer_types(hf, variant, num_layers)
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
  if variant in ("llama", "gemma", "olmo2", "internlm2"):
    window = None
  return tuple(window if (t == "sliding_attention" and window) else None for t in layer_types)


_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3"}
_GEMMA_LIKE = ("gemma", "gemma2", "gemma3")


def _activation(hf: dict, variant: str) -> str:
  """The MLP activation each HF family actually runs."""
  if variant in ("gemma2", "gemma3"):
    return hf.get("hidden_activation") or "gelu_pytorch_tanh"
  if variant == "gemma":
    act = hf.get("hidden_act") or "gelu_pytorch_tanh"
    # GemmaConfig rewrites the legacy "gelu" of the official releases to the tanh approximation.
    return "gelu_pytorch_tanh" if act == "gelu" else act
  return hf.get("hidden_act") or "silu"


def _reward_token_id(hf: dict, architecture: str) -> int | None:
  """The token InternLM2's reward model appends after the conversation and scores at."""
  if architecture != "InternLM2ForRewardModel":
    return None
  if not isinstance(hf.get("reward_token_id"), int):
    raise ValueError("InternLM2ForRewardModel needs an integer `reward_token_id` (the token its "
                     "scorer appends after the conversation and reads the score at)")
  return hf["reward_token_id"]


def config_from_hf(hf_config: dict, architecture: str) -> Config:
  """HF `config.json` dict + architecture name -> Config."""
  head_fields = hf_config_lib.head_fields(hf_config, architecture, ARCHITECTURES, "decoder")
  variant = _VARIANTS[architecture][0]
  hidden = hf_config["hidden_size"]
  num_heads = hf_config["num_attention_heads"]
  num_layers = hf_config["num_hidden_layers"]
  head_dim = hf_config.get("head_dim") or hidden // num_heads
  gemma_like = variant in _GEMMA_LIKE
  act = _activation(hf_config, variant)
  # As in transformers: `id2label` decides the label count when present.
  # InternLM2 names it `bias` (wqkv and wo alike).
  attention_bias = bool(hf_config.get("bias" if variant == "internlm2" else "attention_bias", False))
  if variant == "gemma3":
    if hf_config.get("use_bidirectional_attention"):
      raise ValueError("use_bidirectional_attention (Gemma 3 as an encoder) is not supported")
    rope = _gemma3_rope_settings(hf_config)
    rope["local_rope_layers"] = tuple(
        t == "sliding_attention" for t in _layer_types(hf_config, variant, num_layers))
  else:
    rope = _rope_settings(hf_config, variant)
  gemma_2_or_3 = variant in ("gemma2", "gemma3")
  if architecture == "InternLM2ForRewardModel":
    head_fields["num_labels"] = 1  # one `v_head` output whatever its config says
  return Config(
      **head_fields,
      reward_token_id=_reward_token_id(hf_config, architecture),
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
      **rope,
      # Qwen2 always has q/k/v biases and no o bias; Mistral has none; the rest follow the flag.
      qkv_bias=variant == "qwen2" or (attention_bias and variant != "mistral"),
      out_bias=attention_bias and variant not in ("qwen2", "mistral"),
      mlp_bias=bool(hf_config.get("mlp_bias", False)) and variant == "llama",
      qk_norm=variant in ("qwen3", "gemma3", "olmo2"),
      qk_norm_over_heads=variant == "olmo2",
      unit_offset_norm=gemma_like,
      scale_embeddings=gemma_like,
      sandwich_norms=variant in ("gemma2", "gemma3"),
      post_norms_only=variant == "olmo2",
      query_scale=(float(hf_config.get("query_pre_attn_scalar", 256)) ** -0.5
                   if gemma_2_or_3 else 0.0),
      # Gemma 3 keeps `attn_logit_softcapping` in its config but its attention never applies it.
      attn_logit_softcap=hf_config.get("attn_logit_softcapping") if variant == "gemma2" else None,
      final_logit_softcap=hf_config.get("final_logit_softcapping") if gemma_2_or_3 else None,
      layer_windows=_layer_windows(hf_config, variant, num_layers),
      tie_word_embeddings=bool(hf_config.get("tie_word_embeddings", variant in _TIED_BY_DEFAULT)),
  )


class Attention(nnx.Module):
  """Grouped-query self-attention with RoPE, optional q/k norms, soft-capping and a sliding window.

  q/k norms run per head (Qwen3, Gemma 3: a scale [H]) or over every head at once (OLMo 2: a
  scale [N, H] or [K, H], as HF's norm over the whole projection)."""

  def __init__(self, config: Config, *, implementation: str, dtype, param_dtype, rngs: nnx.Rngs):
    d, n, k, h = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.q_proj = layers.Projection("BTD,DNH->BTNH", (d, n, h), (n, h) if config.qkv_bias else None, **kw)
    self.k_proj = layers.Projection("BSD,DKH->BSKH", (d, k, h), (k, h) if config.qkv_bias else None, **kw)
    self.v_proj = layers.Projection("BSD,DKH->BSKH", (d, k, h), (k, h) if config.qkv_bias else None, **kw)
    self.o_proj = layers.Projection("BTNH,NHD->BTD", (n, h, d), (d,) if config.out_bias else None, **kw)
    if config.qk_norm:
      norm_kw = dict(unit_offset=config.unit_offset_norm, dtype=dtype, param_dtype=param_dtype,
                     scale_in_float32=config.norm_scale_in_float32)
      over_heads = config.qk_norm_over_heads
      self.q_norm = layers.RMSNorm((n, h) if over_heads else h, config.rms_norm_eps, **norm_kw)
      self.k_norm = layers.RMSNorm((k, h) if over_heads else h, config.rms_norm_eps, **norm_kw)
    self.config = config
    self.implementation = implementation

  def __call__(self, x: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               window: jax.Array | None, inv_freq: jax.Array | None = None,
               output_index: jax.Array | None = None) -> jax.Array:
    """`inv_freq` [R/2]: this layer's RoPE frequencies when they differ between layers (Gemma 3,
    scanned); None: the config's, a constant. `output_index` [B, P]: queries (and outputs) only
    at those tokens -> [B, P, D]; keys and values are still every token's."""
    q = self.q_proj(layers.take_positions(x, output_index))  # [B, T or P, N, H]
    k = self.k_proj(x)  # [B, T, K, H]
    v = self.v_proj(x)  # [B, T, K, H]
    if self.config.qk_norm:
      q, k = self.q_norm(q), self.k_norm(k)
    if inv_freq is None:
      inv_freq = rope_inverse_frequencies(self.config)
    q = layers.apply_rope(q, layers.take_positions(positions, output_index), inv_freq)
    k = layers.apply_rope(k, positions, inv_freq)
    out = attention_lib.attend(q, k, v, layout, positions, scale=self.config.attention_scale,
                               logit_cap=self.config.attn_logit_softcap, window=window,
                               implementation=self.implementation,
                               query_index=output_index)  # [B, T or P, N, H]
    return self.o_proj(out)  # [B, T or P, D]


def rope_inverse_frequencies(config: Config) -> np.ndarray:
  """[R/2] float32: the (full-attention layers') RoPE frequencies over the R rotated dims."""
  return layers.rope_inverse_frequencies(
      config.rotary_dim or config.head_dim, config.rope_theta, config.rope_type, config.rope_factor,
      config.rope_low_freq_factor, config.rope_high_freq_factor, config.rope_original_max_positions)


def layer_rope_array(config: Config) -> np.ndarray | None:
  """[L, R/2] float32 RoPE frequencies per layer when they differ between layers (Gemma 3's
  sliding layers rotate with their own base, unscaled), else None: every layer then uses the
  constant `rope_inverse_frequencies`, with nothing scanned."""
  if not config.local_rope_theta:
    return None
  dim = config.rotary_dim or config.head_dim
  local = layers.rope_inverse_frequencies(dim, config.local_rope_theta, "default", 1.0, 1.0, 1.0, 0)
  full = rope_inverse_frequencies(config)
  return np.stack([local if is_local else full for is_local in config.local_rope_layers])


class Block(nnx.Module):
  """One decoder layer: pre-norm residual attention and MLP (Gemma 2 and 3 also norm their
  outputs; OLMo 2 norms only their outputs)."""

  def __init__(self, config: Config, *, attention: str, dtype, param_dtype, rngs: nnx.Rngs):
    def norm():
      return layers.RMSNorm(config.hidden_size, config.rms_norm_eps,
                            unit_offset=config.unit_offset_norm, dtype=dtype, param_dtype=param_dtype,
                            scale_in_float32=config.norm_scale_in_float32)
    self.pre_norms = not config.post_norms_only
    self.post_norms = config.sandwich_norms or config.post_norms_only
    if self.pre_norms:
      self.pre_attn_norm = norm()
    self.attn = Attention(config, implementation=attention, dtype=dtype, param_dtype=param_dtype,
                          rngs=rngs)
    if self.pre_norms:
      self.pre_mlp_norm = norm()
    self.mlp = layers.GatedMLP(config.hidden_size, config.intermediate_size, config.activation,
                               config.mlp_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    if self.post_norms:
      self.post_attn_norm = norm()
      self.post_mlp_norm = norm()

  def __call__(self, x: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               window: jax.Array | None, inv_freq: jax.Array | None = None,
               output_index: jax.Array | None = None) -> jax.Array:
    """-> [B, T, D], or [B, P, D] at `output_index` [B, P] (attention's queries and the MLP only
    there)."""
    attn_in = self.pre_attn_norm(x) if self.pre_norms else x
    attn_out = self.attn(attn_in, positions, layout, window, inv_freq, output_index)
    if self.post_norms:
      attn_out = self.post_attn_norm(attn_out)
    x = layers.take_positions(x, output_index) + attn_out
    mlp_out = self.mlp(self.pre_mlp_norm(x) if self.pre_norms else x)
    if self.post_norms:
      mlp_out = self.post_mlp_norm(mlp_out)
    return x + mlp_out  # [B, T or P, D]


class Model(trunk.FamilyModel):
  """Embeddings -> blocks -> final norm; `head` maps chosen hidden states to scores or logits."""

  def build(self, config: Config, kw: dict[str, Any]) -> None:
    self.embedder = layers.Embedder(config.vocab_size, config.hidden_size, **kw)
    attention = self.attention
    self.layers = trunk.stack_layers(
        lambda rngs: Block(config, attention=attention, **dict(kw, rngs=rngs)),
        config.num_layers, kw["rngs"])
    self.final_norm = layers.RMSNorm(config.hidden_size, config.rms_norm_eps,
                                     unit_offset=config.unit_offset_norm, dtype=kw["dtype"],
                                     param_dtype=kw["param_dtype"],
                                     scale_in_float32=config.norm_scale_in_float32)
    if config.head == "score" and config.reward_head is not None:
      self.reward_head = heads_lib.RewardHead(config.reward_head, config.hidden_size,
                                              param_dtype=kw["param_dtype"])
    elif config.head == "score":
      self.score = layers.Projection("...D,DL->...L", (config.hidden_size, config.num_labels), None, **kw)
    elif config.head == "lm" and not config.tie_word_embeddings:
      self.lm_head = layers.Projection("...D,DV->...V", (config.hidden_size, config.vocab_size), None, **kw)

  def __call__(self, input_ids: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               token_type_ids: jax.Array | None = None,
               output_index: jax.Array | None = None) -> jax.Array:
    """input_ids, positions [B, T] int32 under `layout` -> hidden [B, T, D], or [B, P, D] at
    `output_index` [B, P] (the tokens a readout reads).

    With `output_index` of at most half the row's tokens and xla attention, the last layer
    computes its queries, attention and MLP only at those tokens (its keys and values at every
    token, as the earlier layers): a reward read at the end of each sequence then skips most of a
    layer's work. Other implementations take every query, so there the whole last layer runs and
    the hidden states are picked after it.
    """
    del token_type_ids  # decoders have no segment embeddings
    if self.config.rope_max_positions and input_ids.shape[1] > self.config.rope_max_positions:
      # Decided when the program is traced (shapes are static), so it costs nothing per step.
      raise InputError(
          f"rows of {input_ids.shape[1]} tokens: {self.config.architecture}'s dynamic RoPE "
          f"matches its reference only up to {self.config.rope_max_positions} tokens "
          "(max_position_embeddings); score with --max_length at most that")
    x = self.embedder(input_ids)  # [B, T, D]
    if self.config.scale_embeddings:
      # Gemma multiplies by sqrt(D) rounded to the compute dtype (55.4256 -> 55.5 in bf16), as HF.
      x = x * jnp.asarray(math.sqrt(self.config.hidden_size), dtype=self.dtype)
    # Per layer: its sliding window and RoPE frequencies (each None where no layer differs).
    per_layer = (layer_window_array(self.config), layer_rope_array(self.config))

    def layer(block: Block, x: jax.Array, data) -> jax.Array:
      return block(x, positions, layout, *data)

    reads_few = output_index is not None and 2 * output_index.shape[1] <= input_ids.shape[1]
    if not reads_few or self.attention != "xla":
      x = trunk.scan_layers(self.layers, x, layer, per_layer)
      return layers.take_positions(self.final_norm(x), output_index)  # [B, T or P, D]

    def last_layer(block: Block, x: jax.Array, data) -> jax.Array:
      return block(x, positions, layout, *data, output_index)  # [B, P, D]

    x = trunk.scan_layers(self.layers, x, layer, per_layer, last_call=last_layer)
    return self.final_norm(x)  # [B, P, D]

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




def _grouped_qkv(part: str, groups: int, h: int, d: int | None = None):
  """InternLM2's fused `wqkv` rows (or bias), laid out per key/value head: its G query heads, then
  its key, then its value -> our q kernel [D, N, H] or k/v kernel [D, K, H] (the bias: [N or K, H]).

  Works on any run of whole groups, so a device holding whole groups of query heads reads only
  its rows (a shard that cuts a group reads the tensor whole: `WeightSource.hf_block`).
  """
  picks = {"q": slice(0, groups), "k": slice(groups, groups + 1), "v": slice(groups + 1, groups + 2)}

  def transform(w: np.ndarray) -> np.ndarray:
    per_group = w.reshape(-1, groups + 2, h, *w.shape[1:])  # [K', G + 2, H, (D)]
    rows = per_group[:, picks[part]].reshape(-1, *w.shape[1:])  # [N' or K' x H, (D)]
    return rows.reshape(-1, h) if d is None else rows.T.reshape(d, -1, h)
  return transform


def _internlm2_trunk(config: Config, block) -> dict[str, WeightSource]:
  """InternLM2's trunk: its own tensor names, a fused `wqkv`, and w1/w3/w2 for gate/up/down."""
  d, h = config.hidden_size, config.head_dim
  groups = config.num_heads // config.num_kv_heads
  out = {
      "embedder/embedding": WeightSource("model.tok_embeddings.weight", model_axis=0, hf_axis=0),
      "final_norm/scale": WeightSource("model.norm.weight"),
      "layers/pre_attn_norm/scale": block("attention_norm.weight"),
      "layers/pre_mlp_norm/scale": block("ffn_norm.weight"),
      "layers/attn/o_proj/kernel": block(  # [L, N, H, D]
          "attention.wo.weight", linear_to_einsum(-1, h, d), model_axis=1, hf_axis=1),
      "layers/mlp/gate_proj/kernel": block(  # [L, D, F]
          "feed_forward.w1.weight", linear_to_einsum(d, -1), model_axis=2, hf_axis=0),
      "layers/mlp/up_proj/kernel": block(
          "feed_forward.w3.weight", linear_to_einsum(d, -1), model_axis=2, hf_axis=0),
      "layers/mlp/down_proj/kernel": block(  # [L, F, D]
          "feed_forward.w2.weight", linear_to_einsum(-1, d), model_axis=1, hf_axis=1),
  }
  for part in ("q", "k", "v"):
    per_block = groups if part == "q" else 1  # one block of rows: a key/value head's group
    out[f"layers/attn/{part}_proj/kernel"] = block(  # [L, D, N or K, H]
        "attention.wqkv.weight", _grouped_qkv(part, groups, h, d), model_axis=2, hf_axis=0,
        hf_block=per_block)
    if config.qkv_bias:
      out[f"layers/attn/{part}_proj/bias"] = block(  # [L, N or K, H]
          "attention.wqkv.bias", _grouped_qkv(part, groups, h), model_axis=1, hf_axis=0,
          hf_block=per_block)
  if config.out_bias:
    out["layers/attn/o_proj/bias"] = block("attention.wo.bias")
  return out


# Per variant, the head tensors where they are not named `score` / `lm_head`.
_HEAD_TENSORS = {"internlm2": {"score": "v_head.weight", "lm": "output.weight"}}


def weight_sources(config: Config) -> dict[str, WeightSource]:
  """Our parameter path -> HF tensor(s), transform, and the axes split over `model`.

  Block parameters are stacked [L, ...] from the L per-layer HF tensors, so their `model_axis`
  counts the layer axis. Heads and MLP width are split: an HF Linear keeps them in its rows
  (`hf_axis=0`: q/k/v, gate/up, the LM head) or, for the projections back to D, its columns
  (`hf_axis=1`: o_proj, down_proj); the embedding keeps the vocabulary in its rows. A fused
  tensor feeds several parameters, each reading its own rows (`hf_span`: Phi-3's q|k|v and
  gate|up; InternLM2's grouped `wqkv`, by its transform).
  """
  d, h = config.hidden_size, config.head_dim
  n_rows, k_rows, f = config.num_heads * h, config.num_kv_heads * h, config.intermediate_size

  block = stacked_sources("model.layers.{layer}.", config.num_layers)

  if config.variant == "internlm2":
    out = _internlm2_trunk(config, block)
  else:
    out = {
        "embedder/embedding": WeightSource("model.embed_tokens.weight", model_axis=0, hf_axis=0),
        "final_norm/scale": WeightSource("model.norm.weight"),
    }
    if config.post_norms_only:
      out["layers/post_attn_norm/scale"] = block("post_attention_layernorm.weight")
      out["layers/post_mlp_norm/scale"] = block("post_feedforward_layernorm.weight")
    elif config.sandwich_norms:
      out["layers/pre_attn_norm/scale"] = block("input_layernorm.weight")
      out["layers/post_attn_norm/scale"] = block("post_attention_layernorm.weight")
      out["layers/pre_mlp_norm/scale"] = block("pre_feedforward_layernorm.weight")
      out["layers/post_mlp_norm/scale"] = block("post_feedforward_layernorm.weight")
    else:
      out["layers/pre_attn_norm/scale"] = block("input_layernorm.weight")
      out["layers/pre_mlp_norm/scale"] = block("post_attention_layernorm.weight")
    if config.variant == "phi3":  # q, k, v stacked in one `qkv_proj`; gate, up in `gate_up_proj`
      spans = {"q_proj": (0, n_rows), "k_proj": (n_rows, n_rows + k_rows),
               "v_proj": (n_rows + k_rows, n_rows + 2 * k_rows)}
      for name, span in spans.items():
        out[f"layers/attn/{name}/kernel"] = block(  # [L, D, N or K, H]
            "self_attn.qkv_proj.weight", linear_to_einsum(d, -1, h), 2, 0, span)
      for name, span in (("gate_proj", (0, f)), ("up_proj", (f, 2 * f))):
        out[f"layers/mlp/{name}/kernel"] = block(  # [L, D, F]
            "mlp.gate_up_proj.weight", linear_to_einsum(d, -1), 2, 0, span)
    else:
      for name in ("q_proj", "k_proj", "v_proj"):
        out[f"layers/attn/{name}/kernel"] = block(  # [L, D, N or K, H]
            f"self_attn.{name}.weight", linear_to_einsum(d, -1, h), model_axis=2, hf_axis=0)
        if config.qkv_bias:
          out[f"layers/attn/{name}/bias"] = block(  # [L, N or K, H]
              f"self_attn.{name}.bias", reshape_to(-1, h), model_axis=1, hf_axis=0)
      for name in ("gate_proj", "up_proj"):
        out[f"layers/mlp/{name}/kernel"] = block(  # [L, D, F]
            f"mlp.{name}.weight", linear_to_einsum(d, -1), model_axis=2, hf_axis=0)
        if config.mlp_bias:
          out[f"layers/mlp/{name}/bias"] = block(f"mlp.{name}.bias", model_axis=1, hf_axis=0)
    out["layers/attn/o_proj/kernel"] = block(  # [L, N, H, D]
        "self_attn.o_proj.weight", linear_to_einsum(-1, h, d), model_axis=1, hf_axis=1)
    if config.out_bias:
      out["layers/attn/o_proj/bias"] = block("self_attn.o_proj.bias")
    if config.qk_norm_over_heads:  # [N x H] and [K x H] -> [L, N, H] and [L, K, H]
      out["layers/attn/q_norm/scale"] = block("self_attn.q_norm.weight", reshape_to(-1, h), 1, 0)
      out["layers/attn/k_norm/scale"] = block("self_attn.k_norm.weight", reshape_to(-1, h), 1, 0)
    elif config.qk_norm:
      out["layers/attn/q_norm/scale"] = block("self_attn.q_norm.weight")
      out["layers/attn/k_norm/scale"] = block("self_attn.k_norm.weight")
    out["layers/mlp/down_proj/kernel"] = block(  # [L, F, D]
        "mlp.down_proj.weight", linear_to_einsum(-1, d), model_axis=1, hf_axis=1)
    if config.mlp_bias:
      out["layers/mlp/down_proj/bias"] = block("mlp.down_proj.bias")
  head_tensors = _HEAD_TENSORS.get(config.variant, {})
  if config.head == "score" and config.reward_head is not None:
    out.update(heads_lib.weight_sources(config.reward_head))
  elif config.head == "score":
    out["score/kernel"] = WeightSource(head_tensors.get("score", "score.weight"),
                                       linear_to_einsum(d, config.num_labels))
  elif config.head == "lm" and not config.tie_word_embeddings:
    out["lm_head/kernel"] = WeightSource(  # [D, V]
        head_tensors.get("lm", "lm_head.weight"), linear_to_einsum(d, -1), model_axis=1,
        hf_axis=0)
  return out
