"""Attention over packed rows: the layout that says who sees whom, and the kernels that compute it.

Every model takes a `Layout` instead of a dense mask: per token, its segment (0 = padding, else
one sequence or one packed group of a row) and its branch (0 = the shared prefix, c + 1 =
candidate c's continuation; see `scoring/packing.py`). From it:
- causal models: a token sees earlier (or same) tokens of its own segment that are in the shared
  prefix or in its own branch;
- encoders: a token sees every token of its own segment.
A padded batch is the layout with segment = attention mask and branch = 0.

Implementations (`attend(..., implementation=)`), chosen once per model by `resolve`:
- "xla": the dense [B, T, S] mask and an einsum softmax in float32; runs everywhere, and is the
  reference the others are tested against (`xla_attention`); for causal rows longer than
  `CAUSAL_QUERY_BLOCK`, by blocks of queries that skip the keys after them;
- "cudnn": `jax.nn.dot_product_attention(implementation="cudnn")` with the dense mask (GPU,
  bfloat16/float16 only, no soft-capping);
- "splash": the Pallas TPU splash-attention kernel with segment ids, forward and backward (rows a
  multiple of 128 long, else xla; a sliding-window layer whose window is shorter than the row
  runs xla, see `_splash_by_window`). It is compiled as a Mosaic kernel for the TPU
  devices the program is traced for (the mesh set with `jax.set_mesh`, so also a TPU topology
  compiled from a CPU host, `socialrm_jax.main.plan`); off TPU it runs in Pallas interpret mode, which
  is only good for tests. A Mosaic kernel cannot be partitioned by XLA: on several devices the
  caller sets the mesh (`jax.set_mesh`), and the kernel runs per device under `shard_map`.
Einsum letters: B batch, T query time, S key time, N query heads, K key/value heads, G query heads
per key/value head, H head width.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu import splash_attention as splash
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as splash_kernel_lib)

# A large negative logit for masked keys: finite, so a query that sees nothing (padding) still
# yields a finite (uniform) softmax instead of NaN.
MASKED_LOGIT = -1e30

IMPLEMENTATIONS = ("auto", "xla", "cudnn", "splash")
# cuDNN's fused attention refuses float32.
CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)
# Splash tiles rows into blocks of a multiple of 128 (the TPU lane width); the largest of these
# that divides the row length is used (512 is MaxText's default).
SPLASH_BLOCKS = (512, 256, 128)
# Query rows per block of causal "xla" attention: no query sees a key after its own block, so each
# block's logits stop at the block's end: on a row of T tokens the blocks compute about
# (T + block) / 2T of the dense [T, T] logits, in a [B, N, block, <=T] temporary instead of
# [B, N, T, T].
CAUSAL_QUERY_BLOCK = 128
# The mesh axis parameters (so attention heads) are split over; see `weights.py`.
HEADS_AXIS = "model"

# Splash segment ids that match nothing: a query (or key) that must see no key (query) in a pass.
_NO_QUERY, _NO_KEY = -1, -2


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Layout:
  """Who attends to whom in a [B, T] batch of rows."""
  segment_ids: jax.Array  # [B, T] int32, 0 = padding
  branch_ids: jax.Array   # [B, T] int32, 0 = shared prefix (or the whole sequence)
  is_causal: bool = dataclasses.field(metadata=dict(static=True))


def from_padding_mask(attention_mask: jax.Array, is_causal: bool) -> Layout:
  """A padded batch [B, T] (1 = real token, left or right padding) as a layout: one segment a row."""
  segments = jnp.asarray(attention_mask).astype(jnp.int32)
  return Layout(segments, jnp.zeros_like(segments), is_causal)


def dense_mask(layout: Layout, positions: jax.Array | None = None,
               window: jax.Array | int | None = None,
               query_index: jax.Array | None = None) -> jax.Array:
  """[B, T, S] bool (query, key), True = may attend.

  Same non-padding segment; for causal models also key not after query, and key in the shared
  prefix or in the query's own branch; with `window` (and `positions`), keys fewer than `window`
  positions back (a traced scalar is fine: scanned layers carry theirs). Every token may attend
  to itself, so a padding token's softmax has a real key. `query_index` [B, P]: only the queries
  at those tokens of each row -> [B, P, S], the rows of the whole mask there.
  """
  length = layout.segment_ids.shape[1]
  key_index = jnp.arange(length)[None, None, :]  # [1, 1, S]
  if query_index is None:  # every token a query: no gather in the program
    at_queries = lambda a: a[:, :, None]  # [B, T, 1]
    queries = jnp.arange(length)[None, :, None]  # [1, T, 1]
  else:
    at_queries = lambda a: jnp.take_along_axis(a, query_index, axis=1)[:, :, None]  # [B, P, 1]
    queries = query_index[:, :, None]  # [B, P, 1]
  seg_q, seg_k = at_queries(layout.segment_ids), layout.segment_ids[:, None, :]  # [B, 1, S]
  mask = (seg_q == seg_k) & (seg_q > 0)
  if layout.is_causal:
    br_q, br_k = at_queries(layout.branch_ids), layout.branch_ids[:, None, :]
    mask = mask & (queries >= key_index) & ((br_k == 0) | (br_k == br_q))
  if window is not None:
    if positions is None:
      raise ValueError("a sliding window needs positions")
    distance = at_queries(positions) - positions[:, None, :]  # [B, P, S]
    mask = mask & (distance < window)
  return mask | (queries == key_index)


def soft_cap(x: jax.Array, cap: float | None) -> jax.Array:
  """cap * tanh(x / cap): bounds logits smoothly to (-cap, cap) (Gemma 2)."""
  if cap is None:
    return x
  return jnp.tanh(x / cap) * cap


def matmul_precision(dtype) -> jax.lax.Precision | None:
  """Full float32 products when computing in float32 (GPUs would otherwise use TF32 and drift
  ~1e-3 from the PyTorch reference); the backend default for bfloat16."""
  return jax.lax.Precision.HIGHEST if jnp.dtype(dtype) == jnp.float32 else None


def einsum(equation: str, x: jax.Array, y: jax.Array, out_dtype=None) -> jax.Array:
  """`jnp.einsum` with the products summed in float32 and the result rounded to `out_dtype`
  (default: the operands' common dtype) once, as PyTorch's bfloat16 matmuls do. In float32 it is
  the plain einsum."""
  common = jnp.result_type(x, y)
  out = jnp.einsum(equation, x, y, precision=matmul_precision(common),
                   preferred_element_type=jnp.float32)
  return out.astype(out_dtype or common)


# The names `softmax_attention` gives its output and its rows' softmax statistics (largest logit,
# sum of exponentials), so that a remat policy can keep them for the backward pass
# (`trunk.REMAT_POLICIES`).
ATTENTION_OUTPUT, ATTENTION_ROW_STATISTICS = "attention_output", "attention_row_statistics"
# The name of attention's queries, keys and values, heads-major and after RoPE
# (`_attention_by_query_blocks`), kept the same way.
ATTENTION_INPUTS = "attention_inputs"


def _masked_logits(q, k, mask, scale, logit_cap, bias=None):
  """q [B, K, Q, H] (Q = G x T rows), k [B, K, S, H], mask [B, T, S], bias [B, N, T, S] or None
  -> the float32 logits [B, K, Q, S] as the softmax takes them, and the scaled logits (bias
  added) before soft-capping."""
  batch, num_kv_heads, rows, _ = q.shape
  q_len = mask.shape[1]
  raw = einsum("BKQH,BKSH->BKQS", q, k, jnp.float32) * scale
  if bias is not None:  # query head n = k G + g is row g T + t of key/value head k
    raw = raw + bias.reshape(batch, num_kv_heads, rows, -1)
  logits = soft_cap(raw, logit_cap).reshape(batch, num_kv_heads, rows // q_len, q_len, -1)
  logits = jnp.where(mask[:, None, None, :, :], logits, MASKED_LOGIT)
  return logits.reshape(batch, num_kv_heads, rows, -1), raw


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def softmax_attention(q, k, v, mask, scale, logit_cap):
  """softmax(q k^T scale, masked) v over heads-major operands: q [B, K, Q, H], k/v [B, K, S, H],
  mask [B, T, S] (Q = G x T: query head n's T rows under key/value head n // G) -> [B, T, K, G, H],
  token-major, as the output projection reads it.

  Its backward pass is FlashAttention's (the one cuDNN's and splash's kernels compute): from the
  output and each row's largest logit and sum of exponentials (kept, under the names above) it
  recomputes the probabilities P, and takes the softmax's row sums as rowsum(dO * O) over H
  instead of rowsum(dP * P) over S; so a checkpointed layer keeps no [Q, S] array and recomputes
  one product, not the whole forward."""
  return _softmax_attention_forward(q, k, v, mask, scale, logit_cap)[0]


def _softmax_attention_forward(q, k, v, mask, scale, logit_cap):
  logits, _ = _masked_logits(q, k, mask, scale, logit_cap)
  # Kept apart rather than as one log-sum-exp: a query that sees no key (padding) has every logit
  # at MASKED_LOGIT, where adding log(sum) to the largest is lost to rounding; this way its
  # softmax is uniform, as jax.nn.softmax's is.
  largest = jnp.max(logits, axis=-1, keepdims=True)  # [B, K, Q, 1]
  exps = jnp.exp(logits - largest)
  total = jnp.sum(exps, axis=-1, keepdims=True)  # [B, K, Q, 1]
  out = _token_major(einsum("BKQS,BKSH->BKQH", (exps / total).astype(v.dtype), v), mask.shape[1])
  out = jax.ad_checkpoint.checkpoint_name(out, ATTENTION_OUTPUT)
  largest, total = jax.ad_checkpoint.checkpoint_name((largest, total), ATTENTION_ROW_STATISTICS)
  return out, (q, k, v, mask, scale, out, largest, total)


def _softmax_attention_backward(logit_cap, residuals, d_out):
  q, k, v, mask, scale, out, largest, total = residuals
  logits, raw = _masked_logits(q, k, mask, scale, logit_cap)  # [B, K, Q, S]
  probs = jnp.exp(logits - largest) / total
  row_sums = _heads_major(jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1,
                                  keepdims=True))  # rowsum(dO * O): [B, K, Q, 1]
  d_out = _heads_major(d_out)  # [B, K, Q, H]
  d_v = einsum("BKQS,BKQH->BKSH", probs.astype(v.dtype), d_out.astype(v.dtype))
  d_probs = einsum("BKQH,BKSH->BKQS", d_out, v, jnp.float32)
  d_logits = probs * (d_probs - row_sums)
  d_logits = jnp.where(_grouped(mask, q.shape[2]), d_logits, 0.0)  # a masked logit is a constant
  if logit_cap is not None:  # d/dx cap tanh(x / cap) = 1 - tanh(x / cap)^2
    d_logits = d_logits * (1.0 - jnp.square(jnp.tanh(raw / logit_cap)))
  d_logits = d_logits * scale
  d_q = einsum("BKQS,BKSH->BKQH", d_logits.astype(k.dtype), k)
  d_k = einsum("BKQS,BKQH->BKSH", d_logits.astype(q.dtype), q)
  # The mask and the scale (a model's constant, or a layer's scanned constant) get none.
  return d_q, d_k, d_v, None, None


def _grouped(mask: jax.Array, rows: int) -> jax.Array:
  """mask [B, T, S] against heads-major logits [B, K, G x T, S]: [B, 1, G x T, S]."""
  return jnp.tile(mask, (1, rows // mask.shape[1], 1))[:, None]


softmax_attention.defvjp(_softmax_attention_forward, _softmax_attention_backward)


def _token_major(x: jax.Array, q_len: int) -> jax.Array:
  """[B, K, G x T, H] -> [B, T, K, G, H]."""
  batch, num_kv_heads, rows, head_dim = x.shape
  return x.reshape(batch, num_kv_heads, rows // q_len, q_len, head_dim).transpose(0, 3, 1, 2, 4)


def _heads_major(x: jax.Array) -> jax.Array:
  """[B, T, K, G, H] -> [B, K, G x T, H]."""
  batch, q_len, num_kv_heads, groups, head_dim = x.shape
  return x.transpose(0, 2, 3, 1, 4).reshape(batch, num_kv_heads, groups * q_len, head_dim)


def differentiated_softmax_attention(q, k, v, mask, scale, logit_cap, bias=None):
  """`softmax_attention`'s result, `bias` [B, N, T, S] added to the scaled logits, differentiated
  as JAX differentiates it: the path of a position bias (DeBERTa), which is trained."""
  logits, _ = _masked_logits(q, k, mask, scale, logit_cap, bias)
  probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
  return _token_major(einsum("BKQS,BKSH->BKQH", probs, v), mask.shape[1])


def xla_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *, scale: float,
                  logit_cap: float | None, bias: jax.Array | None = None) -> jax.Array:
  """q [B, T, N, H], k/v [B, S, K, H], mask [B, T, S] -> [B, T, N, H].

  Query head n uses key/value head n // G, as HF's `repeat_kv` does. The softmax runs in float32.
  `bias` [B, N, T, S] is added to the scaled logits (DeBERTa's relative-position scores);
  without one, the softmax and its backward pass are `softmax_attention`'s.

  The products run heads-major, each key/value head's G query heads and T queries as one axis of
  G x T rows ([B, K, G x T, H] against [B, K, S, H]), so that grouped heads need no copy of the
  keys and values.
  """
  return _attention_by_query_blocks(q, k, v, mask, scale=scale, logit_cap=logit_cap, bias=bias,
                                    block=q.shape[1], keys_end_with_block=False)


def blocked_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *,
                      scale: float, logit_cap: float | None, block: int = CAUSAL_QUERY_BLOCK,
                      keys_end_with_block: bool = True) -> jax.Array:
  """`xla_attention` one block of queries at a time, so that the float32 logits are
  [B, N, block, S] at a time, not [B, N, T, S]. `keys_end_with_block`: the queries are the row's
  tokens in order (mask [B, T, T] of a causal model: no key after its query), so each block
  attends the keys up to its own end; the keys left out are masked for every query of the block,
  so the result is the dense one. Else (queries picked anywhere in the row) every block attends
  every key. -> [B, T, N, H]"""
  return _attention_by_query_blocks(q, k, v, mask, scale=scale, logit_cap=logit_cap, bias=None,
                                    block=block, keys_end_with_block=keys_end_with_block)


def _attention_by_query_blocks(q, k, v, mask, *, scale, logit_cap, bias, block,
                               keys_end_with_block):
  """`xla_attention` and `blocked_attention`: the operands made heads-major once (q [B, K, G, T,
  H], k/v [B, K, S, H]) and named ATTENTION_INPUTS (a remat policy may keep them rather than
  recompute RoPE and the transposes), then each block of queries against its keys."""
  batch, q_len, num_heads, head_dim = q.shape
  num_kv_heads = k.shape[2]
  groups = num_heads // num_kv_heads
  q = q.reshape(batch, q_len, num_kv_heads, groups, head_dim).transpose(0, 2, 3, 1, 4)
  k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
  q, k, v = jax.ad_checkpoint.checkpoint_name((q, k, v), ATTENTION_INPUTS)
  blocks = []
  starts = range(0, q_len, block)
  # Split in one op: the backward pass joins the blocks' gradients.
  for start, rows in zip(starts, jnp.split(q, list(starts[1:]), axis=3)):
    end = min(start + block, q_len)
    keys = end if keys_end_with_block else k.shape[2]
    rows = rows.reshape(batch, num_kv_heads, groups * (end - start), head_dim)
    operands = (rows, k[:, :, :keys], v[:, :, :keys], mask[:, start:end, :keys], scale, logit_cap)
    if bias is None:
      out = softmax_attention(*operands)
    else:
      out = differentiated_softmax_attention(*operands, bias[:, :, start:end, :keys])
    # Each block comes token-major ([B, block, K, G, H]), joined over T.
    blocks.append(out)
  out = blocks[0] if len(blocks) == 1 else jnp.concatenate(blocks, axis=1)
  return out.reshape(batch, q_len, num_heads, head_dim)


def dense_fused_attention(q: jax.Array, k: jax.Array, v: jax.Array, layout: Layout,
                          positions: jax.Array, *, scale: float | jax.Array,
                          window: jax.Array | int | None = None,
                          implementation: str = "cudnn") -> jax.Array:
  """q [B, T, N, H], k/v [B, S, K, H] -> [B, T, N, H] by `jax.nn.dot_product_attention` under the
  layout's dense mask (sliding window included, from positions: a packed branch's positions skip
  its siblings, so the window cannot come from token indices).

  `implementation` is jax's: "cudnn" is the fused kernel; "xla" makes the same call on any
  backend, which is how the call's arguments are tested off GPU. jax takes grouped key/value
  heads as they are (query head n reads key/value head n // G, like `xla_attention`).
  `is_causal` repeats what the mask already says, so that cuDNN can skip the blocks above the
  diagonal. jax's kernels take a constant scale: a traced one (a scanned layer's own, GPT-2's
  `scale_attn_by_inverse_layer_idx`) scales the queries instead.
  """
  if not isinstance(scale, (int, float)):
    q, scale = q * jnp.asarray(scale, q.dtype), 1.0
  mask = dense_mask(layout, positions, window)[:, None]  # [B, 1, T, S]
  specs = _mesh_specs(q, k)
  if specs is not None:  # jax's kernels take operands sharded alike: FSDP's weights would not
    activations, row_axes = specs
    q, k, v = (jax.lax.with_sharding_constraint(x, activations) for x in (q, k, v))
    mask = jax.lax.with_sharding_constraint(
        mask, jax.sharding.PartitionSpec(row_axes, None, None, None))
  return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale,
                                      is_causal=layout.is_causal, implementation=implementation)


def splash_block(length: int) -> int | None:
  """The splash block size for rows of `length` tokens, or None when no block size divides it."""
  return next((block for block in SPLASH_BLOCKS if length % block == 0), None)


@dataclasses.dataclass(frozen=True)
class _SplashSpec:
  """What a splash kernel is built from (static, hashable: a custom_vjp's nondiff argument)."""
  length: int
  num_heads: int
  block: int
  is_causal: bool
  logit_cap: float | None
  interpret: bool


def _splash_kernel(spec: _SplashSpec):
  """A splash kernel over [N, T, H] queries that returns its log-sum-exp, with backward blocks.

  Built anew in every trace: its mask tables become that trace's values, so it cannot be kept
  across traces; cheap, as jax caches the mask processing itself. Its forward and backward
  kernels are called apart (`_splash_layout_attention`): splash's own VJP refuses a kernel that
  returns its log-sum-exp, which the passes' merge needs. The fused backward kernel computes
  dq, dk and dv in one pass over the blocks.
  """
  shape = (spec.length, spec.length)
  head_mask = splash.CausalMask(shape) if spec.is_causal else splash.FullMask(shape)
  block = spec.block
  return splash.make_splash_mha(
      splash.MultiHeadMask(tuple(head_mask for _ in range(spec.num_heads))),
      block_sizes=splash.BlockSizes(
          block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
          block_kv_dkv=block, block_kv_dkv_compute=block, use_fused_bwd_kernel=True),
      save_residuals=True, attn_logits_soft_cap=spec.logit_cap, head_shards=1, q_seq_shards=1,
      interpret=spec.interpret)


def _merge_by_logsumexp(out_a: jax.Array, lse_a: jax.Array, out_b: jax.Array,
                        lse_b: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Two softmax-attention results over disjoint key sets -> the result over their union, and the
  union's log-sum-exp.

  out [..., T, H] normalised within its own set, lse [..., T] that set's log-sum-exp of logits:
  the union's softmax weighs each by its share exp(lse) of the total (as flash attention merges
  blocks). A set that was empty has a log-sum-exp near splash's mask value (about -2.4e38), so its
  share is exactly 0; its output (an average over masked keys) is then dropped, not multiplied,
  so that it could not turn the result into NaN even if it were one.
  """
  top = jnp.maximum(lse_a, lse_b)
  share_a = jnp.exp(lse_a - top)[..., None]  # [..., T, 1]
  share_b = jnp.exp(lse_b - top)[..., None]
  part_a = jnp.where(share_a > 0, share_a * out_a.astype(jnp.float32), 0.0)
  part_b = jnp.where(share_b > 0, share_b * out_b.astype(jnp.float32), 0.0)
  total = share_a + share_b
  return (part_a + part_b) / total, top + jnp.log(total[..., 0])


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _splash_layout_attention(spec: _SplashSpec, q, k, v, pass_ids):
  """One example's attention under its layout by splash: q [N, T, H] (scaled), k/v [K, T, H],
  `pass_ids` the (query, key) segment ids of each pass (`_splash_ids`) -> [N, T, H].

  The passes cover disjoint key sets, so the union's softmax is theirs merged by log-sum-exp.
  Backward: FlashAttention's, with the probabilities exp(logit - lse) and row sums rowsum(dO * O)
  of the *merged* result. Each logit lies in exactly one pass, so each pass's backward kernel,
  given the merged output and log-sum-exp, yields the gradient through that pass's logits, and
  the gradients are their sums. (Differentiating the merge itself would need each pass's
  log-sum-exp differentiable; splash's is not.)"""
  return _splash_layout_forward(spec, q, k, v, pass_ids)[0]


def _splash_layout_forward(spec, q, k, v, pass_ids):
  kernel = _splash_kernel(spec)
  out, (lse,) = kernel(q, k, v, splash.SegmentIds(*pass_ids[0]))
  for ids in pass_ids[1:]:
    out_b, (lse_b,) = kernel(q, k, v, splash.SegmentIds(*ids))
    out, lse = _merge_by_logsumexp(out, lse, out_b, lse_b)
  out = jax.ad_checkpoint.checkpoint_name(out.astype(q.dtype), ATTENTION_OUTPUT)
  lse = jax.ad_checkpoint.checkpoint_name(lse.astype(jnp.float32), ATTENTION_ROW_STATISTICS)
  return out, (q, k, v, pass_ids, out, lse)


def _splash_layout_backward(spec, residuals, d_out):
  q, k, v, pass_ids, out, lse = residuals
  kernel = _splash_kernel(spec)
  grads = None
  for ids in pass_ids:
    splash_residuals = (q, k, v, splash.SegmentIds(*ids), None, out, lse, kernel.dq_mask_info,
                        kernel.dkv_mask_info)
    # splash's own backward (its VJP rule) with the kernel's settings: dq, dk, dv after the
    # cotangents of its three mask tables.
    d_q, d_k, d_v = splash_kernel_lib._splash_attention_bwd(
        *(kernel.kwargs[name] for name in _SPLASH_BACKWARD_SETTINGS), splash_residuals,
        d_out)[3:6]
    pass_grads = [g.astype(jnp.float32) for g in (d_q, d_k, d_v)]
    grads = pass_grads if grads is None else [a + b for a, b in zip(grads, pass_grads)]
  d_q, d_k, d_v = (g.astype(x.dtype) for g, x in zip(grads, (q, k, v)))
  return d_q, d_k, d_v, None  # segment ids get none


_splash_layout_attention.defvjp(_splash_layout_forward, _splash_layout_backward)
# `splash_attention_kernel._splash_attention_bwd`'s leading (static) arguments, in order.
_SPLASH_BACKWARD_SETTINGS = ("save_residuals", "mask_value", "is_mqa", "block_sizes",
                             "residual_checkpoint_name", "mask_function", "attn_logits_soft_cap",
                             "interpret")


def _splash_ids(layout: Layout) -> list[tuple[jax.Array, jax.Array]]:
  """Per splash pass, the [B, T] (query, key) segment ids that together express the layout.

  Splash allows query i to see key j when their ids are equal (and, for causal models, j <= i).
  Padding tokens get ids of their own, -(index + 1), so they see only themselves, as in
  `dense_mask`. Encoders: one pass, the segments. Causal models: "the prefix of my segment plus
  my own branch" is no single id equality, so two passes over disjoint key sets, merged by their
  log-sum-exps:
  1. branch queries (branch > 0) against the prefix keys (branch 0) of their segment; every other
     query sees nothing here (weight 0 in the merge);
  2. every token against its own (segment, branch): a prefix query sees the prefix, a branch query
     its branch. Always non-empty: it holds the query itself.
  The (segment, branch) id is segment * T + branch (branch < T, as every branch holds a token;
  int32 for rows up to 46340 tokens).
  """
  segments, branches = layout.segment_ids, layout.branch_ids  # [B, T]
  length = segments.shape[1]
  real = segments > 0
  alone = -(jnp.arange(length, dtype=jnp.int32) + 1)[None]  # [1, T]
  if not layout.is_causal:
    ids = jnp.where(real, segments, alone)
    return [(ids, ids)]
  prefix_q = jnp.where(real & (branches > 0), segments, _NO_QUERY)
  prefix_kv = jnp.where(real & (branches == 0), segments, _NO_KEY)
  own = jnp.where(real, segments * length + branches, alone)
  return [(prefix_q, prefix_kv), (own, own)]


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, layout: Layout, *, scale: float,
                     logit_cap: float | None = None, block: int | None = None,
                     interpret: bool | None = None) -> jax.Array:
  """q [B, T, N, H], k/v [B, T, K, H] under `layout` -> [B, T, N, H] by the splash kernel.

  `block`: the kernel's block size (default `splash_block(T)`); T must be a multiple of it.
  `interpret`: run in Pallas interpret mode (default: when the devices traced for are not TPUs,
  see `traced_platform`).
  The kernel takes grouped key/value heads directly (query head n reads key/value head n // G,
  its index maps divide by G), so keys and values are neither repeated (G copies in memory) nor
  vmapped over as MQA kernels. It does not scale logits: the queries are scaled first (as MaxText
  does), then soft-capped inside. Under a multi-device mesh set with `jax.set_mesh`, the kernel
  runs per device under `shard_map` (Mosaic kernels cannot be partitioned automatically).
  """
  length = q.shape[1]
  block = splash_block(length) if block is None else block
  if block is None or length % block:
    raise ValueError(f"splash needs rows a multiple of {block or SPLASH_BLOCKS[-1]} tokens, got "
                     f"{length}")
  if interpret is None:
    interpret = traced_platform() != "tpu"
  q = q * jnp.asarray(scale, q.dtype)

  def per_device(q, k, v, segment_ids, branch_ids):
    # The kernel is per example with heads leading, [N, T, H] and [K, S, H]: vmapped over rows,
    # over this device's query heads (all, or its share under a mesh).
    spec = _SplashSpec(length, q.shape[2], block, layout.is_causal, logit_cap, interpret)
    pass_ids = _splash_ids(Layout(segment_ids, branch_ids, layout.is_causal))
    heads_first = [jnp.swapaxes(x, 1, 2) for x in (q, k, v)]  # [B, N, T, H], [B, K, S, H] x2
    out = jax.vmap(functools.partial(_splash_layout_attention, spec))(*heads_first, pass_ids)
    return jnp.swapaxes(out, 1, 2)  # [B, T, N, H]

  return _over_context_mesh(per_device, q, k, v, layout.segment_ids, layout.branch_ids)


def traced_platform() -> str:
  """The platform of the devices being traced for: the mesh's set with `jax.set_mesh` (the scoring
  step always sets it), else the default backend. Not `jax.default_backend()` alone: a program
  for TPU devices may be compiled on a host whose own backend is the CPU (`socialrm_jax.main.plan`)."""
  device = jax.sharding.get_abstract_mesh().abstract_device
  return jax.default_backend() if device is None else device.platform


def _mesh_specs(q: jax.Array, k: jax.Array):
  """Under a mesh of several devices set with `jax.set_mesh`: (the spec of q, k and v [B, T, N or
  K, H], the row axes): rows split over every axis but `HEADS_AXIS`, heads over `HEADS_AXIS` when
  both query and key/value heads divide by it. None without such a mesh."""
  mesh = jax.sharding.get_abstract_mesh()
  sizes = dict(mesh.shape)  # axis name -> size; empty when no mesh is set
  if math.prod(sizes.values()) <= 1:
    return None
  heads = sizes.get(HEADS_AXIS, 1)
  head_axis = HEADS_AXIS if q.shape[2] % heads == 0 and k.shape[2] % heads == 0 else None
  row_axes = tuple(name for name in mesh.axis_names if name != HEADS_AXIS) or None
  return jax.sharding.PartitionSpec(row_axes, None, head_axis, None), row_axes


def _over_context_mesh(per_device, q, k, v, segment_ids, branch_ids):
  """`per_device(q, k, v, segment_ids, branch_ids)` once per device of the mesh set with
  `jax.set_mesh` (if it has more than one): rows split over every axis but `HEADS_AXIS`, heads
  over `HEADS_AXIS` when both query and key/value heads divide by it (else each of its devices
  attends all heads of its rows). Splitting heads in whole groups keeps query head n with
  key/value head n // G on one device."""
  specs = _mesh_specs(q, k)
  if specs is None:
    return per_device(q, k, v, segment_ids, branch_ids)
  activations, row_axes = specs
  ids = jax.sharding.PartitionSpec(row_axes, None)  # [B, T]
  return jax.shard_map(per_device, in_specs=(activations, activations, activations, ids, ids),
                       out_specs=activations, check_vma=False)(q, k, v, segment_ids, branch_ids)


def attend(q: jax.Array, k: jax.Array, v: jax.Array, layout: Layout, positions: jax.Array, *,
           scale: float | jax.Array, logit_cap: float | None = None,
           window: jax.Array | int | None = None, windows: tuple[int, ...] | None = None,
           implementation: str = "xla", bias: jax.Array | None = None,
           query_index: jax.Array | None = None) -> jax.Array:
  """q [B, T, N, H], k/v [B, S, K, H] under `layout` -> [B, T, N, H].

  `scale` multiplies the logits: a constant, or a layer's own traced scalar under a scan.

  `window`: a sliding window (keys fewer than `window` positions back), a constant or a scanned
  layer's own traced scalar; `windows`: the values a traced one may take (the model's, static),
  which splash needs (`_splash_by_window`).

  `query_index` [B, P]: q holds only the queries of those tokens ([B, P, N, H], e.g. the
  positions a reward is read at, in a model's last layer) -> [B, P, N, H]; "xla" only.

  `bias` [B, N, T, S]: added to the scaled logits, "xla" only (`resolve` gives models with a
  position bias nothing else); no other family passes one, so their programs are unchanged.

  `implementation` must be a concrete one (see `resolve`); "auto" is resolved at load time.
  "splash" on rows that are not a multiple of 128 long runs "xla" instead (shapes are static, so
  this is decided at trace time; the packer's rows are powers of two from 128, and `max_length`).
  """
  if implementation == "splash" and splash_block(q.shape[1]) is None:
    implementation = "xla"
  if bias is not None and implementation != "xla":
    raise ValueError(f"{implementation} attention takes no additive bias; use xla")
  if query_index is not None and implementation != "xla":
    raise ValueError(f"{implementation} attention takes every query; attend to some with xla")
  if implementation == "xla":
    mask = dense_mask(layout, positions, window, query_index)
    if bias is not None:  # encoders only (DeBERTa): no blocked causal path needed
      return xla_attention(q, k, v, mask, scale=scale, logit_cap=logit_cap, bias=bias)
    if layout.is_causal and q.shape[1] > CAUSAL_QUERY_BLOCK:
      return blocked_attention(q, k, v, mask, scale=scale, logit_cap=logit_cap,
                               keys_end_with_block=query_index is None)
    return xla_attention(q, k, v, mask, scale=scale, logit_cap=logit_cap)
  if implementation == "cudnn":
    if logit_cap is not None:
      raise ValueError("cudnn attention has no logit soft-capping; use xla")
    return dense_fused_attention(q, k, v, layout, positions, scale=scale, window=window,
                                 implementation="cudnn")
  if implementation == "splash":
    if window is not None:
      return _splash_by_window(q, k, v, layout, positions, scale=scale, logit_cap=logit_cap,
                               window=window, windows=windows)
    return splash_attention(q, k, v, layout, scale=scale, logit_cap=logit_cap)
  raise ValueError(f"unknown attention implementation {implementation!r}; "
                   f"one of {', '.join(IMPLEMENTATIONS[1:])}")


def _splash_by_window(q, k, v, layout, positions, *, scale, logit_cap, window, windows):
  """A sliding-window layer with "splash": splash where the window covers the row, xla where it
  is shorter.

  Within a row a key a token sees is fewer positions back than tokens back (a packed branch's
  positions skip its siblings), so fewer than T: a window of at least T tokens cuts nothing, and
  splash computes the layer as it computes a full one. A shorter window follows positions, which
  splash's local mask (`splash.LocalMask`, by token index) cannot: a later branch's tokens see
  the prefix as if their siblings were not there, farther back in tokens than in positions. Those
  layers run xla, as rows that are not block multiples do. A traced (scanned) window picks
  between the two by `jax.lax.cond`, when the model's `windows` hold both kinds; one kind is
  decided at trace time."""
  length = q.shape[1]
  if isinstance(window, (int, np.integer)):
    windows = (int(window),)
  elif windows is None:
    raise ValueError("splash attention under a traced sliding window needs `windows`, the values "
                     "it may take")
  run_splash = lambda: splash_attention(q, k, v, layout, scale=scale, logit_cap=logit_cap)
  run_xla = lambda: attend(q, k, v, layout, positions, scale=scale, logit_cap=logit_cap,
                           window=window, implementation="xla")
  if min(windows) >= length:
    return run_splash()
  if max(windows) < length:
    return run_xla()
  return jax.lax.cond(window < length, run_xla, run_splash)


def resolve(implementation: str, *, backend: str, dtype, logit_cap: float | None,
            has_windows: bool, is_causal: bool, has_position_bias: bool = False) -> str:
  """The concrete implementation for a model: `implementation`, or for "auto" the fastest that
  supports it on `backend` ("cpu", "gpu", "tpu").

  "auto": cuDNN on GPU in bfloat16/float16 without soft-capping; splash on TPU (causal models and
  encoders alike, soft-capped or with sliding windows; `_splash_by_window`); else xla. The same
  for scoring and training: both kernels have their backward pass. A model with an additive
  position bias (`has_position_bias`: DeBERTa) runs xla only. An explicit choice that cannot run
  the model is a ValueError saying why.
  """
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"unknown attention implementation {implementation!r}; "
                     f"one of {', '.join(IMPLEMENTATIONS)}")
  # Both kernels handle causal models and encoders, and sliding windows (cuDNN in its dense
  # mask; splash where the window covers the row, xla in the layers where it does not).
  del is_causal, has_windows
  cudnn_refusal = _cudnn_refusal(backend, dtype, logit_cap)
  splash_refusal = _splash_refusal(backend)
  if has_position_bias:
    cudnn_refusal = splash_refusal = (
        "this model adds a relative-position bias to its attention logits (DeBERTa), which only "
        "xla attention takes; use xla")
  if implementation == "auto":
    if backend == "gpu" and cudnn_refusal is None:
      return "cudnn"
    if backend == "tpu" and splash_refusal is None:
      return "splash"
    return "xla"
  refusal = {"cudnn": cudnn_refusal, "splash": splash_refusal}.get(implementation)
  if refusal is not None:
    raise ValueError(refusal)
  return implementation


def _cudnn_refusal(backend: str, dtype, logit_cap: float | None) -> str | None:
  """Why cuDNN cannot run this model, or None."""
  if backend != "gpu":
    return f"cudnn attention runs on gpu, not {backend}"
  if jnp.dtype(dtype) not in CUDNN_DTYPES:
    return f"cudnn attention needs bfloat16 or float16, not {jnp.dtype(dtype).name}"
  if logit_cap is not None:
    return "cudnn attention has no logit soft-capping (Gemma 2); use xla"
  return None


def _splash_refusal(backend: str) -> str | None:
  """Why splash cannot run this model, or None. Off TPU it runs interpreted: allowed on cpu,
  where tests run it, refused on gpu, where it would be a slow surprise."""
  if backend == "gpu":
    return "splash attention is a TPU kernel; on gpu use cudnn or xla"
  return None
