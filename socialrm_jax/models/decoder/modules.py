"""The decoder's modules: grouped-query attention with RoPE, the block, and the `Model` (embeddings,
the scanned blocks, the final norm and the head), built from a `Config`."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from socialrm_jax.base.errors import InputError
from socialrm_jax.models import attention as attention_lib
from socialrm_jax.models import heads as heads_lib
from socialrm_jax.models import layers, trunk
from socialrm_jax.models.decoder.config import Config

# The window of a full-attention layer when other layers slide: farther than any two positions.
FULL_WINDOW = np.iinfo(np.int32).max


class Attention(nnx.Module):
  """Grouped-query self-attention with RoPE, optional q/k norms, soft-capping and a sliding window.

  q/k norms run per head (Qwen3, Gemma 3: a scale [H]) or over every head at once (OLMo 2: a
  scale [N, H] or [K, H], as HF's norm over the whole projection)."""

  def __init__(self, config: Config, *, implementation: str, dtype, param_dtype, rngs: nnx.Rngs):
    d, n, k, h = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.q_proj = layers.Projection("BTD,NHD->BTNH", (n, h, d), (n, h) if config.qkv_bias else None, **kw)
    self.k_proj = layers.Projection("BSD,KHD->BSKH", (k, h, d), (k, h) if config.qkv_bias else None, **kw)
    self.v_proj = layers.Projection("BSD,KHD->BSKH", (k, h, d), (k, h) if config.qkv_bias else None, **kw)
    self.o_proj = layers.Projection("BTNH,DNH->BTD", (d, n, h), (d,) if config.out_bias else None, **kw)
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
                               windows=layer_window_values(self.config),
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
    self.layers = self.stacked_blocks(Block, config, kw)
    self.final_norm = layers.RMSNorm(config.hidden_size, config.rms_norm_eps,
                                     unit_offset=config.unit_offset_norm, dtype=kw["dtype"],
                                     param_dtype=kw["param_dtype"],
                                     scale_in_float32=config.norm_scale_in_float32)
    if config.head == "score" and config.reward_head is not None:
      self.reward_head = heads_lib.RewardHead(config.reward_head, config.hidden_size,
                                              param_dtype=kw["param_dtype"])
    elif config.head == "score":
      self.score = layers.Projection("...D,LD->...L", (config.num_labels, config.hidden_size), None, **kw)
    elif config.head == "lm" and not config.tie_word_embeddings:
      self.lm_head = layers.Projection("...D,VD->...V", (config.vocab_size, config.hidden_size), None, **kw)

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
      x = trunk.scan_layers(self.layers, x, layer, per_layer, remat=self.remat_policy)
      return layers.take_positions(self.final_norm(x), output_index)  # [B, T or P, D]

    def last_layer(block: Block, x: jax.Array, data) -> jax.Array:
      return block(x, positions, layout, *data, output_index)  # [B, P, D]

    x = trunk.scan_layers(self.layers, x, layer, per_layer, last_call=last_layer,
                          remat=self.remat_policy)
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


def layer_window_values(config: Config) -> tuple[int, ...] | None:
  """The distinct values of `layer_window_array` (static: a kernel that needs its window when it
  is traced chooses among them), or None."""
  windows = layer_window_array(config)
  return None if windows is None else tuple(sorted(set(windows.tolist())))


def layer_window_array(config: Config) -> np.ndarray | None:
  """[L] int32 sliding window per layer (FULL_WINDOW where a layer attends fully), or None when
  no layer slides, so that the attention then has no window term at all."""
  if all(window is None for window in config.layer_windows):
    return None
  return np.array([FULL_WINDOW if window is None else window for window in config.layer_windows],
                  dtype=np.int32)
