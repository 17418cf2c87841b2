"""GPT-NeoX (Pythia and the OpenAssistant reward models built on it) in Flax NNX.

Covers `GPTNeoXForSequenceClassification` (a bias-free linear score head), `GPTNeoXForCausalLM`
(the LM head `embed_out`, tied to `embed_in` only when the config says so) and OpenAssistant's
`GPTNeoXRewardModel` (oasst-rm-2.1-pythia-1.4b: a biased one-output `out_proj` at the last real
token, `pooling: "last"`). What sets GPT-NeoX apart from the Llama-like decoders:
- a parallel residual (`use_parallel_residual`, on in Pythia): x + attn(ln_1(x)) + mlp(ln_2(x)),
  or sequential as GPT-2 when off;
- partial rotary embeddings: only the first `rotary_pct` of each head's width is rotated
  (rotate-half layout within that part), the rest passes through;
- a fused `query_key_value` [3D, D] laid out per head: rows [n*3H, (n+1)*3H) hold head n's query,
  key and value in turn, so each head's q/k/v is a contiguous block (not q for every head, then k);
- LayerNorms with bias, biased projections (`attention_bias`), a dense GELU MLP.

The blocks are one stacked module run under `jax.lax.scan` (`trunk.scan_layers`). Positions come
from the caller, so packed rows and shared prefixes see the positions of the sequence alone.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from socialrm_jax.models import attention as attention_lib
from socialrm_jax.models import hf_config as hf_config_lib
from socialrm_jax.models import layers, trunk
from socialrm_jax.models.weights import WeightSource, reshape_to, stacked_sources

ARCHITECTURES = {
    "GPTNeoXForSequenceClassification": "score",
    "GPTNeoXForCausalLM": "lm",
    "GPTNeoXRewardModel": "score",
}
REFUSED_ARCHITECTURES: dict[str, str] = {}
IS_CAUSAL = True
HAS_POSITION_BIAS = False

# HF's `base_model_prefix`: where every head class keeps the trunk.
BASE_MODEL_PREFIX = "gpt_neox."
# OpenAssistant's class reads the reward at the last real token ("last") or averages the
# sequence ("mean", refused: see `config_from_hf`).
SUPPORTED_POOLING = ("last",)
# Non-parameter buffers older checkpoints saved: the causal mask, its fill value, RoPE frequencies.
_SAVED_BUFFER = re.compile(
    r"^(gpt_neox\.)?layers\.\d+\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)$"
    r"|^(gpt_neox\.)?rotary_emb\.inv_freq$")


@dataclasses.dataclass(frozen=True)
class Config(hf_config_lib.FamilyConfig):
  """What a GPT-NeoX checkpoint needs to be rebuilt; JSON-able through `to_dict`/`from_dict`."""
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  layer_norm_eps: float
  activation: str
  rotary_dims: int  # the rotated width of each head: int(head_dim * rotary_pct)
  rope_theta: float = 10000.0
  use_parallel_residual: bool = True
  attention_bias: bool = True
  score_bias: bool = False  # GPTNeoXRewardModel's out_proj has one; the HF classifier's not

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads


def _rope_settings(hf: dict[str, Any]) -> tuple[float, float]:
  """(rotary_pct, rope_theta) from `rope_parameters` (transformers >= 5) or the old fields
  (`rotary_pct`, `rotary_emb_base`), with GPTNeoXConfig's defaults (0.25, 10000)."""
  params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
  rope_type = params.get("rope_type", params.get("type", "default"))
  if rope_type != "default":
    raise ValueError(f"GPT-NeoX rope type {rope_type!r} is not supported; only 'default' is")
  pct = params.get("partial_rotary_factor", hf.get("rotary_pct", 0.25))
  theta = params.get("rope_theta", hf.get("rotary_emb_base", 10000.0))
  return float(pct), float(theta)


def config_from_hf(hf_config: dict[str, Any], architecture: str) -> Config:
  """Our config from a HF GPT-NeoX `config.json` dict (or OpenAssistant's reward-model one)."""
  head_fields = hf_config_lib.head_fields(hf_config, architecture, ARCHITECTURES, "GPT-NeoX")
  activation = hf_config.get("hidden_act", "gelu")
  layers.activation(activation)  # a ValueError naming the supported ones, if unknown
  hidden_size = int(hf_config["hidden_size"])
  num_heads = int(hf_config["num_attention_heads"])
  hf_config_lib.attention_heads(hidden_size, num_heads)
  reward_model = architecture == "GPTNeoXRewardModel"
  if reward_model:
    pooling = hf_config.get("pooling") or "last"
    if pooling not in SUPPORTED_POOLING:
      # "mean" would average every token's hidden state: packed candidates share their prompt
      # tokens once, so a per-sequence mean needs its own readout, which this head lacks.
      raise ValueError(f"`pooling`: {pooling!r} is not supported for GPTNeoXRewardModel; "
                       f"supported: {', '.join(SUPPORTED_POOLING)}")
  pct, theta = _rope_settings(hf_config)
  head_dim = hidden_size // num_heads
  if reward_model:  # OpenAssistant's out_proj is Linear(hidden, 1) whatever the labels say
    head_fields["num_labels"] = 1
  return Config(
      **head_fields,
      vocab_size=int(hf_config["vocab_size"]),
      hidden_size=hidden_size,
      intermediate_size=int(hf_config["intermediate_size"]),
      num_layers=int(hf_config["num_hidden_layers"]),
      num_heads=num_heads,
      layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-5)),
      activation=activation,
      rotary_dims=int(head_dim * pct),
      rope_theta=theta,
      use_parallel_residual=bool(hf_config.get("use_parallel_residual", True)),
      attention_bias=bool(hf_config.get("attention_bias", True)),
      tie_word_embeddings=bool(hf_config.get("tie_word_embeddings", False)),
      score_bias=reward_model,
  )


def is_saved_buffer(hf_name: str) -> bool:
  """True for a checkpoint tensor that is a saved buffer, not a weight: the loader may skip it."""
  return _SAVED_BUFFER.match(hf_name) is not None


def apply_partial_rope(x: jax.Array, positions: jax.Array, rotary_dims: int,
                       inv_freq: np.ndarray) -> jax.Array:
  """Rotates the first `rotary_dims` of each head of x [B, T, N, H]; the rest passes through."""
  if rotary_dims == 0:
    return x
  rotated = layers.apply_rope(x[..., :rotary_dims], positions, inv_freq)
  return jnp.concatenate([rotated, x[..., rotary_dims:]], axis=-1)


class Attention(nnx.Module):
  """Multi-head self-attention with partial RoPE; q/k/v are separate projections here (the fused
  HF tensor is split per head at load, see `weight_sources`)."""

  def __init__(self, config: Config, *, implementation: str, dtype, param_dtype, rngs: nnx.Rngs):
    d, n, h = config.hidden_size, config.num_heads, config.head_dim
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    bias = config.attention_bias
    self.q_proj = layers.Projection("BTD,NHD->BTNH", (n, h, d), (n, h) if bias else None, **kw)
    self.k_proj = layers.Projection("BTD,NHD->BTNH", (n, h, d), (n, h) if bias else None, **kw)
    self.v_proj = layers.Projection("BTD,NHD->BTNH", (n, h, d), (n, h) if bias else None, **kw)
    self.o_proj = layers.Projection("BTNH,DNH->BTD", (d, n, h), (d,) if bias else None, **kw)
    self.config = config
    self.implementation = implementation

  def __call__(self, x: jax.Array, positions: jax.Array, layout: attention_lib.Layout) -> jax.Array:
    config = self.config
    inv_freq = layers.rope_inverse_frequencies(  # [R/2]; "default" RoPE has no scaling terms
        config.rotary_dims, config.rope_theta, "default", factor=1.0, low_freq_factor=1.0,
        high_freq_factor=1.0, original_max_positions=0)
    q = apply_partial_rope(self.q_proj(x), positions, config.rotary_dims, inv_freq)  # [B, T, N, H]
    k = apply_partial_rope(self.k_proj(x), positions, config.rotary_dims, inv_freq)  # [B, T, N, H]
    v = self.v_proj(x)  # [B, T, N, H]
    out = attention_lib.attend(q, k, v, layout, positions, scale=config.head_dim ** -0.5,
                               implementation=self.implementation)  # [B, T, N, H]
    return self.o_proj(out)  # [B, T, D]


class Block(nnx.Module):
  """One GPT-NeoX layer, parallel (x + attn(ln_1 x) + mlp(ln_2 x)) or sequential residual."""

  def __init__(self, config: Config, *, attention: str, dtype, param_dtype, rngs: nnx.Rngs):
    def norm():
      return nnx.LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps, dtype=dtype,
                           param_dtype=param_dtype, rngs=rngs)
    self.input_norm = norm()
    self.attn = Attention(config, implementation=attention, dtype=dtype, param_dtype=param_dtype,
                          rngs=rngs)
    self.post_attn_norm = norm()
    self.mlp = layers.DenseMLP(config.hidden_size, config.intermediate_size, config.activation,
                               dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.parallel = config.use_parallel_residual

  def __call__(self, x: jax.Array, positions: jax.Array, layout: attention_lib.Layout) -> jax.Array:
    attn_out = self.attn(self.input_norm(x), positions, layout)  # [B, T, D]
    if self.parallel:
      # HF's order of the sum, mlp + attn + x, kept so float rounding matches.
      return self.mlp(self.post_attn_norm(x)) + attn_out + x
    x = attn_out + x
    return self.mlp(self.post_attn_norm(x)) + x  # [B, T, D]


class Model(trunk.FamilyModel):
  """Embedding -> scanned blocks -> final LayerNorm; `head` maps chosen hidden states."""

  def build(self, config: Config, kw: dict[str, Any]) -> None:
    d = config.hidden_size
    self.embed = layers.Embedder(config.vocab_size, d, **kw)
    self.layers = self.stacked_blocks(Block, config, kw)
    self.final_norm = nnx.LayerNorm(d, epsilon=config.layer_norm_eps, **kw)
    if config.head == "score":
      self.score = layers.Projection("...D,LD->...L", (config.num_labels, d),
                                     (config.num_labels,) if config.score_bias else None, **kw)
    elif config.head == "lm" and not config.tie_word_embeddings:
      self.lm_head = layers.Projection("...D,VD->...V", (config.vocab_size, d), None, **kw)

  def __call__(self, input_ids: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               token_type_ids: jax.Array | None = None,
               output_index: jax.Array | None = None) -> jax.Array:
    """input_ids, positions [B, T] int32 under `layout` -> hidden [B, T, D] ([B, P, D] at
    `output_index` [B, P])."""
    del token_type_ids  # GPT-NeoX has no segment embeddings
    x = self.embed(input_ids)  # [B, T, D]
    x = trunk.scan_layers(self.layers, x, lambda block, x, _: block(x, positions, layout),
                          remat=self.remat_policy)
    return layers.take_positions(self.final_norm(x), output_index)  # [B, T or P, D]

  def head(self, hidden: jax.Array) -> jax.Array:
    """[..., D] -> [..., num_labels] (score), [..., V] (LM) or [..., D] (loaded trunk-only)."""
    if self.config.head == "score":
      return self.score(hidden)
    if self.config.head == "lm":
      if self.config.tie_word_embeddings:
        return self.embed.attend(hidden)
      return self.lm_head(hidden)
    return hidden



def _fused_qkv_kernel(part: int, head_dim: int, hidden: int):
  """query_key_value.weight [N*3H, D] (heads outermost, then q/k/v, then H) -> part `part`
  (0 q, 1 k, 2 v) as our [N, H, D]; works on a slice of whole heads."""
  def transform(w: np.ndarray) -> np.ndarray:
    return w.reshape(-1, 3, head_dim, hidden)[:, part]
  return transform


def _fused_qkv_bias(part: int, head_dim: int):
  """query_key_value.bias [N*3H] -> part `part` as our [N, H]."""
  def transform(b: np.ndarray) -> np.ndarray:
    return b.reshape(-1, 3, head_dim)[:, part]
  return transform


def weight_sources(config: Config) -> dict[str, WeightSource]:
  """Every parameter of `Model(config)` -> the HF tensor(s) it is read from.

  Block parameters are stacked [L, ...] from the L per-layer tensors; heads are split over
  `model` from the rows of the fused qkv (whole heads, each 3H rows) and from the columns of
  `dense`, the MLP width from the rows of `dense_h_to_4h` and the columns of `dense_4h_to_h`.
  """
  d, h = config.hidden_size, config.head_dim
  trunk = BASE_MODEL_PREFIX

  block = stacked_sources(f"{trunk}layers.{{layer}}.", config.num_layers)

  out: dict[str, WeightSource] = {
      "embed/embedding": WeightSource(f"{trunk}embed_in.weight", model_axis=0, hf_axis=0),
      "final_norm/scale": WeightSource(f"{trunk}final_layer_norm.weight"),
      "final_norm/bias": WeightSource(f"{trunk}final_layer_norm.bias"),
  }
  for ours, theirs in (("input_norm", "input_layernorm"),
                       ("post_attn_norm", "post_attention_layernorm")):
    out[f"layers/{ours}/scale"] = block(f"{theirs}.weight")
    out[f"layers/{ours}/bias"] = block(f"{theirs}.bias")
  for part, name in enumerate(("q_proj", "k_proj", "v_proj")):
    out[f"layers/attn/{name}/kernel"] = block(  # [L, N, H, D]
        "attention.query_key_value.weight", _fused_qkv_kernel(part, h, d), model_axis=1,
        hf_axis=0)
    if config.attention_bias:
      out[f"layers/attn/{name}/bias"] = block(  # [L, N, H]
          "attention.query_key_value.bias", _fused_qkv_bias(part, h), model_axis=1, hf_axis=0)
  out["layers/attn/o_proj/kernel"] = block(  # [L, D, N, H]
      "attention.dense.weight", reshape_to(d, -1, h), model_axis=2, hf_axis=1)
  if config.attention_bias:
    out["layers/attn/o_proj/bias"] = block("attention.dense.bias")
  out["layers/mlp/up/kernel"] = block(  # [L, F, D]
      "mlp.dense_h_to_4h.weight", model_axis=1, hf_axis=0)
  out["layers/mlp/up/bias"] = block("mlp.dense_h_to_4h.bias", model_axis=1, hf_axis=0)
  out["layers/mlp/down/kernel"] = block(  # [L, D, F]
      "mlp.dense_4h_to_h.weight", model_axis=2, hf_axis=1)
  out["layers/mlp/down/bias"] = block("mlp.dense_4h_to_h.bias")
  if config.head == "score":
    head = "out_proj" if config.architecture == "GPTNeoXRewardModel" else "score"
    out["score/kernel"] = WeightSource(f"{head}.weight")  # [L, D]
    if config.score_bias:
      out["score/bias"] = WeightSource(f"{head}.bias")
  elif config.head == "lm" and not config.tie_word_embeddings:
    out["lm_head/kernel"] = WeightSource(  # [V, D]
        "embed_out.weight", model_axis=0, hf_axis=0)
  return out
