"""Where the trainer's step spends its time on a CPU: the jitted forward against the jitted
value-and-gradient step on the same rows, in one process, and what changed it.

  JAX_PLATFORMS=cpu python -m benchmarks.training.train_step_profile --model=DIR --pairs=PAIRS.jsonl
  JAX_PLATFORMS=cpu python -m benchmarks.training.train_step_profile ... --compare=current,before
  JAX_PLATFORMS=cpu python -m benchmarks.training.train_step_profile ... --ops=40
  JAX_PLATFORMS=cpu python -m benchmarks.training.train_step_profile ... --torch

DIR and PAIRS are what `benchmarks/training/train_throughput.py --preset=cpu35m --runs=` writes in its
WORK_DIR: `models/llama-35m-*` and `pairs-cpu35m-in-order.jsonl` (the pairs in the trainer's
order). The first `--steps` steps' pairs (batch 8) are packed as the trainer packs them on a CPU
(`training.pair_batches.pair_packing`: one row a block, rows of 512 tokens, longer buckets for longer
pairs), and the trainer's own jitted programs (`training.train_step.TrainStep`) run on them:

- forward: `add_block_sums`, the loss and metrics of a block (the scorer's forward, the last layer
  at the read tokens only);
- value and gradient: `accumulate`, the loss and the gradients of every trained parameter, added
  to the step's (donated) sums;
- update: the optimizer's step (clipping, AdamW) on the step's gradients.

Every program is compiled first; then `--passes` passes over the blocks, the programs in turn
(forward, value and gradient, ..., then the reverse order on the next pass, so a machine whose
speed drifts moves both alike). Each pass is timed in wall seconds and in this process's CPU
seconds (user + system: on a machine shared with other work the CPU seconds move less than the
wall ones), with the system seconds and the minor page faults among them (the pages of each call's
fresh buffers, which the kernel zeroes on first touch). It prints the totals and the ratio
value-and-gradient / forward; FLOPs put that ratio at 3 for full fine-tuning (a backward pass
computes two products for each of the forward's: the input's gradient and the weight's) and near 2
with LoRA (the frozen weights get no gradient).

`--compare=A,B,...` times named variants of the step in the same way, alternating: `current` is
the code as it is; each other name puts back what an earlier version did or tries an alternative
(`_variant_contexts`), so every change is measured against the code without it, in one process, on
the same rows; `+` joins names.
`--ops=N` traces one block of each program with `jax.profiler` and prints XLA's time per op (its
own, less the ops run inside it, summed over its threads): the N costliest ops, then both programs'
time by kind (`OP_KINDS`: products, the scan's stacked residuals, dynamic slices, the rest) and
their ratio. `--torch` runs PyTorch (the same model folder,
transformers, 2 threads) on the same steps' pairs as TRL's RewardTrainer computes them (chosen
and rejected, padded to the batch's longest), the forward alone and the forward with the backward
of TRL's loss: PyTorch's own ratio.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import glob
import json
import os
import pathlib
import re
import resource
import tempfile
import time

from absl import app, flags


from socialrm_jax.main import command  # noqa: E402  # after the path above
from benchmarks.common import allocator, cpu_name  # noqa: E402

_MODEL = flags.DEFINE_string("model", None, "Model folder (a causal LM or a reward model).",
                             required=True)
_PAIRS = flags.DEFINE_string("pairs", None, "Pairs jsonl (prompt, chosen, rejected), in the "
                             "trainer's order.", required=True)
_STEPS = flags.DEFINE_integer("steps", 2, "Steps of --batch_size pairs to pack and time.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 8, "Pairs a step.")
_PASSES = flags.DEFINE_integer("passes", 4, "Timed passes over the blocks, each program.")
_MAX_LENGTH = flags.DEFINE_integer("max_length", 1024, "The trainer's --max_length.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype.")
_LORA_RANK = flags.DEFINE_integer("lora_rank", 0, "LoRA rank (0: full fine-tuning).")
_LORA_ALPHA = flags.DEFINE_float("lora_alpha", 16.0, "LoRA alpha.")
_COMPARE = flags.DEFINE_list("compare", ["current"],
                             "Variants to time in turn (see _variant_contexts).")
_OPS = flags.DEFINE_integer("ops", 0, "Print XLA's per-op times of one block (this many ops).")
_TORCH = flags.DEFINE_bool("torch", False, "Also time PyTorch's forward and backward.")


def cpu_seconds() -> float:
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def system_seconds_and_faults() -> tuple[float, int]:
  """This process's kernel CPU seconds and minor page faults so far: XLA:CPU allocates a program's
  buffers afresh each call, and the kernel zeroes every page the program first touches."""
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_stime, usage.ru_minflt


@contextlib.contextmanager
def _replaced(owner, name: str, value):
  old = getattr(owner, name)
  setattr(owner, name, value)
  try:
    yield
  finally:
    setattr(owner, name, old)


@contextlib.contextmanager
def _without_residual_workspace():
  """`training.train_step.TrainStep` before it kept the layers' residuals in a workspace on one
  CPU device: every block through `accumulate`, the residuals in the stacks JAX's scan makes
  (and zeroes) afresh on every call."""
  from socialrm_jax.training import train_step
  init = train_step.TrainStep.__init__

  def without_workspace(self, *args, **kwargs):
    init(self, *args, **kwargs)
    self.workspaces = None
  with _replaced(train_step.TrainStep, "__init__", without_workspace):
    yield


def _rope_recomputing_tables(x, positions, inv_freq):
  """layers.apply_rope before its cosines and sines were named for the layers' checkpoint (so
  recomputed by the backward pass)."""
  import jax.numpy as jnp
  rotary = 2 * inv_freq.shape[-1]
  if rotary < x.shape[-1]:
    return jnp.concatenate([_rope_recomputing_tables(x[..., :rotary], positions, inv_freq),
                            x[..., rotary:]], axis=-1)
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)
  angles = jnp.concatenate([angles, angles], axis=-1)
  cos = jnp.cos(angles).astype(x.dtype)[:, :, None, :]
  sin = jnp.sin(angles).astype(x.dtype)[:, :, None, :]
  first, second = jnp.split(x, 2, axis=-1)
  return x * cos + jnp.concatenate([-second, first], axis=-1) * sin


def _einsum_projection(self, x):
  """layers.Projection.__call__ before it was one matrix product: the einsum over named axes."""
  from socialrm_jax.models import attention
  y = attention.einsum(self.equation, x.astype(self.dtype), self.kernel[...].astype(self.dtype))
  if self.bias is not None:
    y = y + self.bias[...].astype(self.dtype)
  return y


def _projection_naming_each_product(self, x):
  """layers.Projection.__call__ before it named its output once: x W, x A and (x A) B each named
  (so kept), where the backward pass reads x W + (x A) B."""
  import math
  import jax
  from socialrm_jax.models import layers
  def named(product):
    return jax.ad_checkpoint.checkpoint_name(product, layers.PROJECTION_OUTPUT)
  kernel = self.kernel[...].astype(self.dtype)
  inputs, outputs = kernel.shape[:self.input_axes], kernel.shape[self.input_axes:]
  leading = x.shape[:x.ndim - self.input_axes]
  rows = x.astype(self.dtype).reshape(-1, math.prod(inputs))
  y = named(layers.matmul(rows, kernel.reshape(math.prod(inputs), math.prod(outputs))))
  if self.lora_a is not None:
    low_rank = named(layers.matmul(rows, self.lora_a[...].astype(self.dtype)))
    y = y + named(layers.matmul(low_rank, self.lora_b[...].astype(self.dtype)))
  y = y.reshape(*leading, *outputs)
  if self.bias is not None:
    y = y + self.bias[...].astype(self.dtype)
  return y


def _norm_over_leading_axes(self, x):
  """`layers.RMSNorm.__call__` before: over [B, T, D] as it comes."""
  import jax
  import jax.numpy as jnp
  scale = self.scale[...]
  axes = tuple(range(-scale.ndim, 0))
  x32 = x.astype(jnp.float32)
  normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=axes, keepdims=True) + self.eps)
  if self.unit_offset:
    return (normed * (1.0 + scale.astype(jnp.float32))).astype(x.dtype)
  if self.scale_in_float32:
    return (scale.astype(jnp.float32) * normed).astype(x.dtype)
  return scale.astype(self.dtype) * normed.astype(x.dtype)


def _softmax_attention_of(forward, backward):
  """A variant's `attention.softmax_attention`: `forward` -> (output, residuals), `backward`."""
  import jax
  softmax = jax.custom_vjp(lambda q, k, v, mask, scale, logit_cap:
                           forward(q, k, v, mask, scale, logit_cap)[0], nondiff_argnums=(5,))
  softmax.defvjp(forward, backward)
  return softmax


def _query_and_key_gradients(d_logits, q, k, mask, scale, cap_slopes):
  """The variants' attention backward from the logits' gradient before the mask, the soft cap
  (`cap_slopes`: 1 - tanh(raw / cap)^2, or None) and the scale: the queries' and the keys'
  gradients, as `attention._softmax_attention_backward` takes them."""
  import jax.numpy as jnp
  from socialrm_jax.models import attention
  batch, num_kv_heads, rows, _ = q.shape
  q_len = mask.shape[1]
  d_logits = jnp.where(mask[:, None, None, :, :],
                       d_logits.reshape(batch, num_kv_heads, rows // q_len, q_len, -1), 0.0)
  d_logits = d_logits.reshape(batch, num_kv_heads, rows, -1)
  if cap_slopes is not None:
    d_logits = d_logits * cap_slopes
  d_logits = d_logits * scale
  d_q = attention.einsum("BKQS,BKSH->BKQH", d_logits.astype(k.dtype), k)
  d_k = attention.contract_leading(d_logits.astype(q.dtype), q)
  return d_q, d_k


def _heads_major_softmax_attention():
  """attention.softmax_attention before its output was token-major: heads-major [B, K, Q, H],
  kept so for the backward pass."""
  import jax
  import jax.numpy as jnp
  from socialrm_jax.models import attention

  def forward(q, k, v, mask, scale, logit_cap):
    logits, _ = attention._masked_logits(q, k, mask, scale, logit_cap)
    largest = jnp.max(logits, axis=-1, keepdims=True)
    exps = jnp.exp(logits - largest)
    total = jnp.sum(exps, axis=-1, keepdims=True)
    out = attention.einsum("BKQS,BKSH->BKQH", (exps / total).astype(v.dtype), v)
    out = jax.ad_checkpoint.checkpoint_name(out, attention.ATTENTION_OUTPUT)
    largest, total = jax.ad_checkpoint.checkpoint_name((largest, total),
                                                       attention.ATTENTION_ROW_STATISTICS)
    return out, (q, k, v, mask, scale, out, largest, total)

  def backward(logit_cap, residuals, d_out):
    q, k, v, mask, scale, out, largest, total = residuals
    logits, raw = attention._masked_logits(q, k, mask, scale, logit_cap)
    probs = jnp.exp(logits - largest) / total
    d_v = attention.contract_leading(probs.astype(v.dtype), d_out.astype(v.dtype))
    d_probs = attention.einsum("BKQH,BKSH->BKQS", d_out, v, jnp.float32)
    row_sums = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), -1, keepdims=True)
    cap_slopes = None if logit_cap is None else 1.0 - jnp.square(jnp.tanh(raw / logit_cap))
    d_q, d_k = _query_and_key_gradients(probs * (d_probs - row_sums), q, k, mask, scale,
                                        cap_slopes)
    return d_q, d_k, d_v, None, None

  return _softmax_attention_of(forward, backward)


ATTENTION_PROBABILITIES = "attention_probabilities"


def _probabilities_kept_softmax_attention(row_sums_as_product: bool):
  """attention.softmax_attention keeping its probabilities for the backward pass (named
  ATTENTION_PROBABILITIES, kept by the layer's checkpoint), where FlashAttention's backward
  recomputes them (the logits' product, the mask and the exponentials); `row_sums_as_product`:
  rowsum(dO * O) as a batched product over H."""
  import jax
  import jax.numpy as jnp
  from socialrm_jax.models import attention

  def forward(q, k, v, mask, scale, logit_cap):
    logits, raw = attention._masked_logits(q, k, mask, scale, logit_cap)
    largest = jnp.max(logits, axis=-1, keepdims=True)
    exps = jnp.exp(logits - largest)
    probs = exps / jnp.sum(exps, axis=-1, keepdims=True)
    out = attention._token_major(attention.einsum("BKQS,BKSH->BKQH", probs.astype(v.dtype), v),
                                 mask.shape[1])
    out = jax.ad_checkpoint.checkpoint_name(out, attention.ATTENTION_OUTPUT)
    probs = jax.ad_checkpoint.checkpoint_name(probs, ATTENTION_PROBABILITIES)
    cap_slopes = None if logit_cap is None else 1.0 - jnp.square(jnp.tanh(raw / logit_cap))
    return out, (q, k, v, mask, scale, out, probs, cap_slopes)

  def backward(logit_cap, residuals, d_out):
    q, k, v, mask, scale, out, probs, cap_slopes = residuals
    return _queries_major_backward(q, k, v, mask, scale, out, probs, cap_slopes, d_out,
                                   row_sums_as_product)

  return _softmax_attention_of(forward, backward)


def _queries_major_backward(q, k, v, mask, scale, out, probs, cap_slopes, d_out,
                            row_sums_as_product: bool):
  """The variants' attention backward from the probabilities [B, K, Q, S] (queries-major, as
  attention._softmax_attention_backward took them before it recomputed them keys-major):
  `row_sums_as_product`, rowsum(dO * O) as a product over H (else summed)."""
  import jax.numpy as jnp
  from socialrm_jax.models import attention
  if row_sums_as_product:
    row_sums = attention._row_sums(d_out, out)
  else:
    row_sums = attention._heads_major(jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32),
                                              -1, keepdims=True))
  d_out = attention._heads_major(d_out)
  d_v = attention.contract_leading(probs.astype(v.dtype), d_out.astype(v.dtype))
  d_probs = attention.einsum("BKQH,BKSH->BKQS", d_out, v, jnp.float32)
  d_q, d_k = _query_and_key_gradients(probs * (d_probs - row_sums), q, k, mask, scale,
                                      cap_slopes)
  return d_q, d_k, d_v, None, None


def _queries_major_softmax_attention(row_sums_as_product: bool):
  """attention.softmax_attention before its backward pass recomputed the probabilities keys-major
  ([B, K, S, Q]): queries-major [B, K, Q, S], as the forward computes them, so that the values'
  and keys' gradients contract the rows of both operands; `row_sums_as_product` as above."""
  import jax.numpy as jnp
  from socialrm_jax.models import attention

  def backward(logit_cap, residuals, d_out):
    q, k, v, mask, scale, out, largest, total = residuals
    logits, raw = attention._masked_logits(q, k, mask, scale, logit_cap)
    probs = jnp.exp(logits - largest) / total
    cap_slopes = None if logit_cap is None else 1.0 - jnp.square(jnp.tanh(raw / logit_cap))
    return _queries_major_backward(q, k, v, mask, scale, out, probs, cap_slopes, d_out,
                                   row_sums_as_product)

  return _softmax_attention_of(attention._softmax_attention_forward, backward)


def _keys_major_mask_broadcast(mask, groups: int):
  """attention._keys_major_mask broadcast over G: [B, T, S] -> [B, 1, S, G x T]."""
  import jax.numpy as jnp
  batch, q_len, keys = mask.shape
  broadcast = jnp.broadcast_to(mask.swapaxes(1, 2)[:, :, None, :], (batch, keys, groups, q_len))
  return broadcast.reshape(batch, 1, keys, groups * q_len)


def _probabilities_kept(row_sums_as_product: bool):
  """The contexts of the variant `probabilities_kept`: the attention above, and the layers'
  policy (`trunk.LAYER_SAVED_RESIDUALS`) keeping its probabilities too."""
  import jax
  from socialrm_jax.models import attention, trunk
  policy = jax.checkpoint_policies.save_from_both_policies(
      trunk.LAYER_SAVED_RESIDUALS,
      jax.checkpoint_policies.save_only_these_names(ATTENTION_PROBABILITIES))
  return [lambda: _replaced(attention, "softmax_attention",
                            _probabilities_kept_softmax_attention(row_sums_as_product)),
          lambda: _replaced(trunk, "LAYER_SAVED_RESIDUALS", policy)]


def _sliced_query_blocks(q, k, v, mask, scale, logit_cap, block, keys_end_with_block):
  """(start, end, keys, operands) of each block of queries, as attention._attention_by_query_blocks
  took them before the blocks were split: q, k and v heads-major and named, as it makes them, and
  each block of queries sliced on its own (its backward pass pads each block's gradient to every
  query and adds them up)."""
  import jax
  from socialrm_jax.models import attention
  batch, q_len, num_heads, head_dim = q.shape
  num_kv_heads, groups = k.shape[2], num_heads // k.shape[2]
  q = q.reshape(batch, q_len, num_kv_heads, groups, head_dim).transpose(0, 2, 3, 1, 4)
  k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
  q, k, v = jax.ad_checkpoint.checkpoint_name((q, k, v), attention.ATTENTION_INPUTS)
  for start in range(0, q_len, block):
    end = min(start + block, q_len)
    keys = end if keys_end_with_block else k.shape[2]
    rows = q[:, :, :, start:end].reshape(batch, num_kv_heads, groups * (end - start), head_dim)
    yield start, end, keys, (rows, k[:, :, :keys], v[:, :, :keys], mask[:, start:end, :keys],
                             scale, logit_cap)


def _blocks_joined_heads_major(q, k, v, mask, *, scale, logit_cap, bias, block,
                               keys_end_with_block):
  """attention._attention_by_query_blocks before attention's output was token-major: each block's
  output heads-major (kept so), the blocks joined so, then the whole output transposed."""
  import jax.numpy as jnp
  assert bias is None, "the decoders' attention has no bias"
  batch, q_len, num_heads, head_dim = q.shape
  num_kv_heads, groups = k.shape[2], num_heads // k.shape[2]
  softmax_attention = _heads_major_softmax_attention()
  blocks = [softmax_attention(*operands).reshape(batch, num_kv_heads, groups, end - start, head_dim)
            for start, end, _, operands in _sliced_query_blocks(
                q, k, v, mask, scale, logit_cap, block, keys_end_with_block)]
  out = blocks[0] if len(blocks) == 1 else jnp.concatenate(blocks, axis=3)
  return out.transpose(0, 3, 1, 2, 4).reshape(batch, q_len, num_heads, head_dim)


def _query_blocks_sliced(q, k, v, mask, *, scale, logit_cap, bias, block, keys_end_with_block):
  """attention._attention_by_query_blocks before its blocks of queries were split
  (`_sliced_query_blocks`)."""
  import jax.numpy as jnp
  from socialrm_jax.models import attention
  batch, q_len, num_heads, head_dim = q.shape
  blocks = []
  for start, end, keys, operands in _sliced_query_blocks(q, k, v, mask, scale, logit_cap, block,
                                                         keys_end_with_block):
    if bias is None:
      blocks.append(attention.softmax_attention(*operands))
    else:
      blocks.append(attention.differentiated_softmax_attention(*operands,
                                                               bias[:, :, start:end, :keys]))
  out = blocks[0] if len(blocks) == 1 else jnp.concatenate(blocks, axis=1)
  return out.reshape(batch, q_len, num_heads, head_dim)


def _grouped_attention(q, k, v, mask, *, scale, logit_cap, bias=None):
  """attention.xla_attention before it ran heads-major: einsums over B, T, K, G, H."""
  import jax
  import jax.numpy as jnp
  from socialrm_jax.models import attention
  batch, q_len, num_heads, head_dim = q.shape
  num_kv_heads = k.shape[2]
  q = q.reshape(batch, q_len, num_kv_heads, num_heads // num_kv_heads, head_dim)
  logits = attention.einsum("BTKGH,BSKH->BKGTS", q, k, jnp.float32) * scale
  if bias is not None:
    logits = logits + bias.reshape(batch, num_kv_heads, -1, *bias.shape[2:])
  logits = attention.soft_cap(logits, logit_cap)
  logits = jnp.where(mask[:, None, None, :, :], logits, attention.MASKED_LOGIT)
  probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
  out = attention.einsum("BKGTS,BSKH->BTKGH", probs, v)
  return out.reshape(batch, q_len, num_heads, head_dim)


def _scan_layers_slicing_outside_checkpoint(layers, x, call, per_layer=None, last_call=None):
  """trunk.scan_layers before the layer's slice of the stacked weights was taken inside the
  checkpoint (the backward pass kept every slice as a stacked residual)."""
  import functools
  import jax
  import jax.numpy as jnp
  from flax import nnx
  from socialrm_jax.models import trunk
  graphdef, stacked = nnx.split(layers)
  scanned = (stacked, per_layer)

  @functools.partial(jax.checkpoint, policy=trunk.LAYER_SAVED_RESIDUALS, prevent_cse=False)
  def layer(x, scanned):
    state, data = scanned
    return call(nnx.merge(graphdef, state), x, data), None

  if last_call is None:
    x, _ = jax.lax.scan(layer, x, scanned)
    return x

  def layer_at(index):
    return jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, index, keepdims=False), scanned)

  num_layers = jax.tree.leaves(stacked)[0].shape[0]
  x, _ = jax.lax.scan(lambda x, index: layer(x, layer_at(index)), x, jnp.arange(num_layers - 1))
  state, data = layer_at(num_layers - 1)
  return last_call(nnx.merge(graphdef, state), x, data)


def _scan_layers_first_outside(layers, x, call, per_layer=None, last_call=None):
  """trunk.scan_layers with the first layer run outside the scan too, as the last is (not a step
  of the code's): out of the scan, a layer whose input has no gradient (LoRA: the embedding is
  frozen) gets none of its input's gradient computed, where the scan's backward computes every
  layer's alike."""
  import jax
  import jax.numpy as jnp
  from flax import nnx
  from socialrm_jax.models import trunk
  graphdef, stacked = nnx.split(layers)
  scanned = (stacked, per_layer)
  num_layers = jax.tree.leaves(stacked)[0].shape[0]
  if num_layers < (2 if last_call is None else 3):
    raise app.UsageError(f"--compare=first_layer_outside_scan: the model has {num_layers} "
                         "layers; it needs a layer between its first and its last")

  def layer_at(index):
    return jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, index, keepdims=False), scanned)

  @functools.partial(jax.checkpoint, policy=trunk.LAYER_SAVED_RESIDUALS, prevent_cse=False)
  def indexed_layer(x, index):
    state, data = layer_at(index)
    return call(nnx.merge(graphdef, state), x, data), None

  end = num_layers if last_call is None else num_layers - 1
  x, _ = indexed_layer(x, 0)
  x, _ = jax.lax.scan(indexed_layer, x, jnp.arange(1, end))
  if last_call is None:
    return x
  state, data = layer_at(num_layers - 1)
  return last_call(nnx.merge(graphdef, state), x, data)


def _contract_leading_rows_transposed(contract_leading, x, y, out_dtype=None):
  """attention.contract_leading with a weight's gradient x^T y, both operands wide (full
  fine-tuning), taken in YNNPACK's order from x transposed into a buffer of its own (not a step of
  the code's: XLA:CPU computes that product in its own loops)."""
  import jax
  from socialrm_jax.models import attention
  if min(x.shape[-1], y.shape[-1]) <= attention.NARROW_OPERAND:
    return contract_leading(x, y, out_dtype)
  rows_last = jax.lax.optimization_barrier(x.swapaxes(-1, -2))
  return attention.einsum("...IR,...RO->...IO", rows_last, y, out_dtype)


def _merged_lora_params(trained, frozen, lora_scale, dtype):
  """train_step.full_params before LoRA ran beside its targets: W + (alpha / r) A B merged."""
  from socialrm_jax.training import train_step, trainable
  base = {**frozen, **{p: v for p, v in trained.items() if not train_step._is_lora(p)}}
  lora = {p: v for p, v in trained.items() if train_step._is_lora(p)}
  return trainable.apply_lora({p: v.astype(dtype) for p, v in base.items()}, lora, lora_scale)


@contextlib.contextmanager
def _merged_lora(model):
  """The model's graph without LoRA's adapters, and the step merging them into the kernels."""
  from flax import nnx
  from socialrm_jax.training import train_step, trainable
  attached = [(projection, name) for path, projection in nnx.iter_graph(model.module)
              if getattr(projection, "lora_a", None) is not None
              for name in (trainable.LORA_A, trainable.LORA_B)]
  saved = [(projection, name, getattr(projection, name)) for projection, name in attached]
  for projection, name in attached:
    setattr(projection, name, None)
  graphdef, rest = model.graphdef, model.rest
  model.graphdef, _, model.rest = nnx.split(model.module, nnx.Param, ...)
  try:
    with _replaced(train_step, "full_params", _merged_lora_params):
      yield
  finally:
    for projection, name, value in saved:
      setattr(projection, name, value)
    model.graphdef, model.rest = graphdef, rest


def _contract_leading_in_place(x, y, out_dtype=None):
  """attention.contract_leading before it transposed an operand on a CPU: the dot as JAX writes
  it."""
  from socialrm_jax.models import attention
  return attention.einsum("...RI,...RO->...IO", x, y, out_dtype)


# XLA:CPU's fusion types handed to YNNPACK: its dots alone (the default adds reductions).
YNNPACK_DOTS_ONLY = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}


def _variant_contexts(name: str, model) -> list:
  """Context managers under which the step is traced as variant `name` ('a+b': both)."""
  import jax
  from socialrm_jax.models import attention, layers, trunk
  variants = {
      "current": [],
      # Every scan unrolled, the layers' among them (not a step of the code's: what the scan's
      # stacked residuals would cost without the scan).
      "unrolled_scans": [lambda: _replaced(jax.lax, "scan",
                                           functools.partial(jax.lax.scan, unroll=True))],
      # RMSNorm over [B, T, D] as it comes (before: over [B x T, D], so that the backward pass's
      # reductions are the forms YNNPACK runs fast).
      # Attention's output heads-major, kept so, the blocks joined so and then the whole output
      # transposed (before: XLA fused the whole output gradient's sum and transpose into every
      # block's slice of it, and the backward pass recomputed the output projection's input by
      # transposing the kept outputs).
      "heads_major_attention_output": [lambda: _replaced(attention, "_attention_by_query_blocks",
                                                         _blocks_joined_heads_major)],
      "norms_over_leading_axes": [lambda: _replaced(layers.RMSNorm, "__call__",
                                                    _norm_over_leading_axes)],
      # The projections as einsums over named axes (before: the backward's transposes).
      "einsum_projections": [lambda: _replaced(layers.Projection, "__call__", _einsum_projection)],
      # The scanned layers keeping every intermediate for the backward pass (no jax.checkpoint).
      "keep_all_residuals": [lambda: _replaced(trunk, "LAYER_SAVED_RESIDUALS",
                                               jax.checkpoint_policies.everything_saveable)],
      # Attention's products over B, T, K, G, H (before: the backward's transposes).
      "grouped_attention": [lambda: _replaced(attention, "xla_attention", _grouped_attention)],
      # Each layer's slice of the stacked weights taken outside the checkpoint (before: the
      # slices kept for the backward pass as stacked residuals, a copy of the weights a call).
      "sliced_outside_checkpoint": [lambda: _replaced(trunk, "scan_layers",
                                                      _scan_layers_slicing_outside_checkpoint)],
      # Attention's softmax and products differentiated by JAX (before: recomputed whole under
      # the checkpoint, then differentiated; now FlashAttention's backward from the output).
      "differentiated_attention": [lambda: _replaced(attention, "softmax_attention",
                                                     attention.differentiated_softmax_attention)],
      # The layers keeping their projections' outputs but not attention's inputs (before: RoPE
      # and the heads-major transposes recomputed under the checkpoint for the backward pass).
      "attention_inputs_recomputed": [lambda: _replaced(
          trunk, "LAYER_SAVED_RESIDUALS", jax.checkpoint_policies.save_from_both_policies(
              jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
              jax.checkpoint_policies.save_only_these_names(
                  layers.PROJECTION_OUTPUT, attention.ATTENTION_OUTPUT,
                  attention.ATTENTION_ROW_STATISTICS)))],
      # LoRA merged into its targets' kernels before the layers (before: the frozen kernels'
      # gradients formed in the backward pass).
      "merged_lora": [lambda: _merged_lora(model)],
      # The step's programs compiled with YNNPACK given XLA:CPU's dots alone, reductions left to
      # XLA (XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-reduce, per program).
      "reductions_outside_ynnpack": [lambda: _replaced(jax, "jit", functools.partial(
          jax.jit, compiler_options=YNNPACK_DOTS_ONLY))],
      # LoRA's products each named, so each kept for the backward pass (before: x W and (x A) B
      # kept apart, where the backward pass reads their sum).
      "lora_products_named_apart": [lambda: _replaced(layers.Projection, "__call__",
                                                      _projection_naming_each_product)],
      # The weights' and attention's keys' and values' gradients as JAX writes them, dots that
      # contract their left operand's leading axis (before: XLA:CPU's own loops, not YNNPACK).
      "leading_contractions_in_place": [
          lambda: _replaced(layers, "matmul", functools.partial(attention.einsum, "RI,IO->RO")),
          lambda: _replaced(attention, "contract_leading", _contract_leading_in_place)],
      # Tried, not kept: the first layer outside the scan too (LoRA: the first layer's input
      # gradient skipped).
      "first_layer_outside_scan": [lambda: _replaced(trunk, "scan_layers",
                                                     _scan_layers_first_outside)],
      # Tried, not kept: full fine-tuning's weight gradients in YNNPACK's order, the rows
      # transposed first.
      "weight_grads_rows_transposed": [lambda: _replaced(
          attention, "contract_leading",
          functools.partial(_contract_leading_rows_transposed, attention.contract_leading))],
  }
  # The layers' residuals in the stacks JAX's scan makes and zeroes on every call (now: in a
  # workspace passed in and handed back, on one CPU device); RoPE's tables recomputed by the
  # backward pass (now: kept).
  variants["scan_residuals"] = [_without_residual_workspace]
  # Each block of queries sliced on its own (now: split in one op, whose gradient is a join).
  variants["query_blocks_sliced"] = [lambda: _replaced(attention, "_attention_by_query_blocks",
                                                       _query_blocks_sliced)]
  variants["rotary_tables_recomputed"] = [lambda: _replaced(layers, "apply_rope",
                                                            _rope_recomputing_tables)]
  # Attention's backward pass recomputing the probabilities queries-major, as the forward has
  # them, the row sums summed (before: the values' and keys' gradients contracted the rows of both
  # operands, so XLA:CPU transposed dO and q for them); and with the row sums as a product.
  variants["probabilities_queries_major"] = [lambda: _replaced(
      attention, "softmax_attention", _queries_major_softmax_attention(False))]
  variants["probabilities_queries_major_row_sums_product"] = [lambda: _replaced(
      attention, "softmax_attention", _queries_major_softmax_attention(True))]
  # The keys-major mask broadcast over the G query heads (before: joined G times, so that the
  # loops over the keys-major logits index it without dividing by T).
  variants["keys_major_mask_broadcast"] = [lambda: _replaced(attention, "_keys_major_mask",
                                                             _keys_major_mask_broadcast)]
  # Tried: attention's probabilities kept for the backward pass (not recomputed); and with the
  # softmax's row sums as a product.
  variants["probabilities_kept"] = _probabilities_kept(row_sums_as_product=False)
  variants["probabilities_kept_row_sums_product"] = _probabilities_kept(row_sums_as_product=True)
  variants["before"] = [context for name_ in ("einsum_projections", "keep_all_residuals",
                                              "grouped_attention") for context in variants[name_]]
  contexts = []
  for part in name.split("+"):
    if part not in variants:
      raise app.UsageError(f"--compare: {part!r} is none of {', '.join(variants)}")
    contexts.extend(variants[part])
  return contexts


def load(model_dir: str):
  """(model, tokenizer, mesh) as the trainer loads them."""
  from socialrm_jax.scoring import item_tokens
  from socialrm_jax.scoring import mesh as mesh_lib
  from socialrm_jax.training import trainable
  mesh = mesh_lib.make_mesh(None)
  model = trainable.load_base(model_dir, dtype=_DTYPE.value, mesh=mesh, seed=0, attention="xla")
  return model, item_tokens.load_tokenizer(model.tokenizer_path), mesh


def step_pairs(path: str) -> list[dict]:
  rows = [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line]
  count = _STEPS.value * _BATCH_SIZE.value
  if len(rows) < count:
    raise app.UsageError(f"--pairs holds {len(rows)} pairs; --steps needs {count}")
  return rows[:count]


def blocks_of(tokenizer, rows: list[dict]) -> list[list]:
  """Each step's blocks, packed as the trainer packs them on a CPU."""
  from socialrm_jax.orchestrators import train
  from socialrm_jax.scoring import item_tokens
  from socialrm_jax.training import pair_batches
  templater = item_tokens.Templater(tokenizer, is_causal=True, max_length=_MAX_LENGTH.value)
  encoded = pair_batches.encode_pairs(templater, [
      pair_batches.Pair(str(i), row["prompt"], row["chosen"], row["rejected"])
      for i, row in enumerate(rows)])
  layout = pair_batches.pair_packing(train.Settings().row_length, _MAX_LENGTH.value, "cpu", 1)
  size = _BATCH_SIZE.value
  return [pair_batches.pack_pairs(encoded[s:s + size], [0.0] * size, **layout)
          for s in range(0, len(encoded), size)]


class Programs:
  """One variant's jitted forward, value-and-gradient and update, compiled for every shape."""

  def __init__(self, name: str, model, mesh, steps: list[list]):
    import jax
    import jax.numpy as jnp
    from socialrm_jax.orchestrators import train
    from socialrm_jax.models import reward_model
    from socialrm_jax.training import loss as loss_lib
    from socialrm_jax.training import optimizer, trainable
    from socialrm_jax.training import train_step as train_step_lib
    self.name, self.mesh, self.jnp = name, mesh, jnp
    # socialrm-train's defaults (AdamW's betas and epsilon, clipping at 1, no accumulation).
    tx, _ = optimizer.OptimizerConfig.of(train.Settings(learning_rate=5e-5)).build(100)
    lora = _LORA_RANK.value > 0
    self.trained, self.frozen = trainable.split_trainable(model.params, lora)
    if lora:
      targets = trainable.lora_targets(model, train.DEFAULT_LORA_TARGETS)
      self.trained.update(trainable.init_lora(model, targets, _LORA_RANK.value, 0))
    self.no_sums = loss_lib.no_sums
    start = time.perf_counter()
    self.model = model
    with self.as_variant():
      self.step = train_step_lib.TrainStep(  # jitted under the variant (`jax.jit` replaced)
          model, tx, mesh, dtype=reward_model.model_dtype(_DTYPE.value),
          lora_scale=_LORA_ALPHA.value / _LORA_RANK.value if lora else 1.0)
      self.steps = [[self.step.put(block.arrays()) for block in blocks] for blocks in steps]
      self.opt_state = self.step.init(self.trained)
      for name_ in ("forward", "value and gradient", "update"):  # traced and compiled here
        self.run(name_)
    self.compile_seconds = time.perf_counter() - start

  @contextlib.contextmanager
  def as_variant(self):
    """The code as this variant has it (`_variant_contexts`), for tracing its programs."""
    with contextlib.ExitStack() as stack:
      for context in _variant_contexts(self.name, self.model):
        stack.enter_context(context())
      yield

  def run(self, program: str, blocks: list | None = None) -> None:
    """Runs `program` over every step's blocks (or over `blocks`), to completion."""
    import jax
    step = self.step
    with jax.set_mesh(self.mesh):
      if program == "forward":
        for arrays in blocks or [b for s in self.steps for b in s]:
          jax.block_until_ready(step.add_block_sums(self.no_sums(), self.trained, self.frozen,
                                                    arrays))
      elif program == "value and gradient":
        for blocks_ in [blocks] if blocks else self.steps:
          grads, sums = step.zeros(self.trained), self.no_sums()
          for arrays in blocks_:
            grads, sums = step.add_block(grads, sums, self.trained, self.frozen, arrays)
          jax.block_until_ready(grads)
      else:  # the update, on zero gradients (its cost does not depend on them)
        for _ in self.steps:
          trained = jax.tree.map(self.jnp.copy, self.trained)
          grads, sums = step.zeros(self.trained), self.no_sums()
          trained, self.opt_state, _ = step.update(trained, self.opt_state, grads, sums)
          jax.block_until_ready(trained)


PROGRAMS = ("forward", "value and gradient", "update")


def time_programs(programs: list[Programs], slots: int) -> dict:
  keys = [(p, name) for p in programs for name in PROGRAMS]
  totals = {key: [0.0, 0.0] for key in keys}
  kernel = {key: [0.0, 0] for key in keys}  # system CPU seconds, page faults
  for n in range(_PASSES.value):
    for program, name in keys if n % 2 == 0 else keys[::-1]:
      wall, cpu, (system, faults) = time.perf_counter(), cpu_seconds(), system_seconds_and_faults()
      program.run(name)
      totals[(program, name)][0] += time.perf_counter() - wall
      totals[(program, name)][1] += cpu_seconds() - cpu
      system_after, faults_after = system_seconds_and_faults()
      kernel[(program, name)][0] += system_after - system
      kernel[(program, name)][1] += faults_after - faults
    print(f"pass {n + 1}: " + ", ".join(
        f"{p.name} {name} {totals[(p, name)][1]:.1f}" for p, name in keys) + " CPU s so far",
        flush=True)
  print(f"\n{_PASSES.value} passes, {slots:,} token slots a pass; load average now "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
  print(f"{'variant':<28} {'program':<20} {'wall s':>8} {'CPU s':>8} {'CPU ms/1k slots':>15} "
        f"{'of it system':>12} {'page faults/1k slots':>20}")
  for program, name in keys:
    wall, cpu = totals[(program, name)]
    system, faults = kernel[(program, name)]
    print(f"{program.name:<28} {name:<20} {wall:>8.2f} {cpu:>8.2f} "
          f"{1e6 * cpu / slots / _PASSES.value:>15.1f} {1e6 * system / slots / _PASSES.value:>12.1f} "
          f"{1e3 * faults / slots / _PASSES.value:>20,.0f}")
  out = {}
  for program in programs:
    (fw, fc), (gw, gc) = totals[(program, "forward")], totals[(program, "value and gradient")]
    out[program.name] = {"wall": gw / fw, "cpu": gc / fc}
    print(f"{program.name}: value-and-gradient / forward {gw / fw:.2f}x wall, {gc / fc:.2f}x CPU "
          f"(the backward alone {(gw - fw) / fw:.2f}x, {(gc - fc) / fc:.2f}x); compiled in "
          f"{program.compile_seconds:.0f} s")
  if len(programs) > 1:
    first = totals[(programs[0], "value and gradient")][1]
    for program in programs[1:]:
      print(f"value and gradient, CPU s: {program.name} / {programs[0].name} = "
            f"{totals[(program, 'value and gradient')][1] / first:.3f}")
  return out


def profile_ops(program: Programs, count: int) -> None:
  """XLA's time per op of one block (the first of the most common row length), by thread."""
  import jax
  blocks = [b for s in program.steps for b in s]
  lengths = collections.Counter(b["input_ids"].shape[1] for b in blocks)
  block = next(b for b in blocks if b["input_ids"].shape[1] == lengths.most_common(1)[0][0])
  repeats = 3
  totals = {}
  for name in ("forward", "value and gradient"):
    program.run(name, [block])
    with tempfile.TemporaryDirectory() as trace_dir:
      with jax.profiler.trace(trace_dir):
        for _ in range(repeats):
          program.run(name, [block])
      profile = jax.profiler.ProfileData.from_file(
          glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0])
    per_op = collections.Counter()
    for plane in profile.planes:
      for line in plane.lines:
        if line.name.startswith("tf_XLA"):
          for op, ns in self_times(line.events).items():
            if "Execute" not in op and "Await" not in op:
              per_op[op] += ns / repeats / 1e6
    step = program.step
    if name == "forward":
      compiled, args = step.add_block_sums, (program.no_sums(), program.trained, program.frozen,
                                             block)
    else:
      compiled = step.accumulate if step.workspaces is None else step.accumulate_in_workspace
      args = (step.zeros(program.trained), program.no_sums(), program.trained, program.frozen,
              block)
      if step.workspaces is not None:
        args += (step.workspace(program.trained, program.frozen, block),)
    # Traced again as the variant, so that the text is the program the profile ran.
    with jax.set_mesh(program.mesh), program.as_variant():
      text = compiled.lower(*args).compile().as_text()
    source, shape, products = {}, {}, _product_ops(text)
    for hlo_line in text.splitlines():
      match = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (\S+) ", hlo_line)
      if match:
        shape[match.group(1)] = match.group(2)
        origin = re.search(r'op_name="([^"]*)"', hlo_line)
        if origin:
          source[match.group(1)] = origin.group(1)
    stacked = program.model.config.num_layers - 1  # the layers under the scan
    by_kind = collections.Counter()
    for op, ms in per_op.items():
      by_kind[op_kind(op, shape.get(op, ""), source.get(op, ""), products, stacked)] += ms
    totals[name] = by_kind
    print(f"\n{program.name}, {name}: one block {list(block['input_ids'].shape)}, XLA's time per "
          f"op summed over threads: {sum(per_op.values()):.1f} ms")
    for op, ms in per_op.most_common(count):
      origin = re.sub(r"jit\([^)]*\)/", "", source.get(op, "(no source: XLA's own)"))
      print(f"  {ms:7.1f} ms  {op:<28} {shape.get(op, '')[:34]:<34} {origin[-70:]}")
  forward, value_and_grad = totals["forward"], totals["value and gradient"]
  print(f"\n{program.name}: XLA's time per op of the block, by kind (ms)")
  print(f"  {'kind':<44} {'forward':>8} {'v&g':>8} {'ratio':>6}")
  for kind in OP_KINDS:
    ratio = (f"{value_and_grad[kind] / forward[kind]:5.2f}x" if forward[kind] else "")
    print(f"  {kind:<44} {forward[kind]:8.1f} {value_and_grad[kind]:8.1f} {ratio:>6}")
  all_forward, all_value_and_grad = sum(forward.values()), sum(value_and_grad.values())
  print(f"  {'all':<44} {all_forward:8.1f} {all_value_and_grad:8.1f} "
        f"{all_value_and_grad / all_forward:5.2f}x")
  without = all_value_and_grad - value_and_grad[OP_KINDS[1]]
  print(f"value and gradient / forward, XLA's time per op: {all_value_and_grad / all_forward:.2f}x "
        f"in all, {without / all_forward:.2f}x without the scan's stacked residuals")


def self_times(events) -> collections.Counter:
  """Each op's time on one thread less that of the ops run inside it: a `while` op's event spans
  the ops of its body when they run on its thread (on one core, a full fine-tuning forward's
  `while` held 102 of the block's 210 ms), and counted whole it would count them twice."""
  own, open_ = collections.Counter(), []  # open_: (end, name) of the events around this one
  for event in sorted(events, key=lambda e: (e.start_ns, -e.duration_ns)):
    while open_ and open_[-1][0] <= event.start_ns:
      open_.pop()
    if open_:
      own[open_[-1][1]] -= event.duration_ns
    own[event.name] += event.duration_ns
    open_.append((event.start_ns + event.duration_ns, event.name))
  return own


# What `profile_ops` sums the ops by.
OP_KINDS = ("products (dots and the fusions around one)",
            "the scan's stacked residuals: zeroed, written",
            "dynamic slices: a layer's weights, residuals",
            "the rest: norms, activations, softmax, adds")


def op_kind(op: str, shape: str, source: str, products: set[str], stacked: int) -> str:
  """Which of OP_KINDS the compiled op `op` (of output `shape`, HLO text; traced from `source`)
  is. The scan's stacked residuals are the buffers [stacked, ...] that JAX's scan over the layers
  fills for the backward pass: zeroed first (XLA:CPU's `wrapped_broadcast`), then written a layer
  at a time (dynamic-update-slice) or copied whole (the stacked weights are [stacked + 1, ...]).
  A dynamic slice copies a layer's weights (or residuals) out of their stack."""
  if op in products:
    return OP_KINDS[0]
  if re.match(rf"\w+\[{stacked},", shape):
    return OP_KINDS[1]
  if source.endswith("dynamic_slice"):
    return OP_KINDS[2]
  return OP_KINDS[3]


def _product_ops(hlo_text: str) -> set[str]:
  """The names of the compiled program's ops that compute a matrix product: dots, and fusions
  whose computation (or one it calls) holds one; XLA:CPU fuses elementwise ops and reductions
  into a product's fusion, so their time is counted with it."""
  calls, holds_dot, ops = collections.defaultdict(set), set(), {}
  computation = None
  for line in hlo_text.splitlines():
    header = re.match(r"(?:ENTRY )?%([\w.\-]+) .*\{$", line)
    if header:
      computation = header.group(1)
      continue
    match = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = .*? (\w[\w-]*)\(", line)
    if not match or computation is None:
      continue
    op, opcode = match.groups()
    called = set(re.findall(r"(?:calls|to_apply)=%([\w.\-]+)", line))
    calls[computation] |= called
    ops[op] = (opcode, called)
    if opcode in ("dot", "convolution"):
      holds_dot.add(computation)
  changed = True
  while changed:  # a computation holds a product if one it calls does
    changed = False
    for computation, called in calls.items():
      if computation not in holds_dot and called & holds_dot:
        holds_dot.add(computation)
        changed = True
  return {op for op, (opcode, called) in ops.items()
          if opcode in ("dot", "convolution") or (opcode == "fusion" and called & holds_dot)}


def torch_ratio(rows: list[dict], tokenizer_dir: str) -> None:
  """PyTorch's forward and forward + backward of TRL's loss on the steps' pairs, batched as TRL
  batches them (each step's chosen and rejected sequences, right-padded to the longest)."""
  import torch
  import transformers
  torch.set_num_threads(2)
  tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      _MODEL.value, num_labels=1, dtype=torch.float32)
  if model.config.pad_token_id is None:
    model.config.pad_token_id = tokenizer.pad_token_id
  batches = []
  for s in range(0, len(rows), _BATCH_SIZE.value):
    sequences = [tokenizer.apply_chat_template(
        row["prompt"] + [{"role": "assistant", "content": row[side]}], tokenize=True,
        return_dict=True)["input_ids"] for side in ("chosen", "rejected")
        for row in rows[s:s + _BATCH_SIZE.value]]
    batches.append(tokenizer.pad({"input_ids": sequences}, return_tensors="pt"))
  slots = sum(b["input_ids"].numel() for b in batches)

  def forward():
    with torch.no_grad():
      for batch in batches:
        model(**batch)

  def forward_backward():
    for batch in batches:
      model.zero_grad(set_to_none=True)
      rewards = model(**batch).logits[:, 0]
      chosen, rejected = rewards.chunk(2)
      (-torch.nn.functional.logsigmoid(chosen - rejected).mean()).backward()

  programs = {"forward": forward, "value and gradient": forward_backward}
  for run in programs.values():
    run()
  totals = {name: [0.0, 0.0] for name in programs}
  for n in range(_PASSES.value):
    for name in list(programs) if n % 2 == 0 else list(programs)[::-1]:
      wall, cpu = time.perf_counter(), cpu_seconds()
      programs[name]()
      totals[name][0] += time.perf_counter() - wall
      totals[name][1] += cpu_seconds() - cpu
  (fw, fc), (gw, gc) = totals["forward"], totals["value and gradient"]
  print(f"\nPyTorch {torch.__version__} ({torch.get_num_threads()} threads), TRL's batches: "
        f"{slots:,} token slots a pass")
  for name, (wall, cpu) in totals.items():
    print(f"  {name:<20} {wall:8.2f} wall s {cpu:8.2f} CPU s "
          f"{1e6 * cpu / slots / _PASSES.value:8.1f} CPU ms/1k slots")
  print(f"PyTorch: value-and-gradient / forward {gw / fw:.2f}x wall, {gc / fc:.2f}x CPU (the "
        f"backward alone {(gw - fw) / fw:.2f}x, {(gc - fc) / fc:.2f}x)")


def main(argv):
  del argv
  import jax
  model, tokenizer, mesh = load(_MODEL.value)
  rows = step_pairs(_PAIRS.value)
  steps = blocks_of(tokenizer, rows)
  slots = sum(b.input_ids.size for s in steps for b in s)
  print(f"{cpu_name()}, {os.cpu_count()} cores, allocator {allocator()}, jax {jax.__version__}; "
        f"{_DTYPE.value}, "
        + (f"LoRA r {_LORA_RANK.value}" if _LORA_RANK.value else "full fine-tuning")
        + f"; {len(steps)} steps of {_BATCH_SIZE.value} pairs: "
        f"{sum(len(s) for s in steps)} blocks "
        f"{dict(collections.Counter(str(list(b.input_ids.shape)) for s in steps for b in s))}, "
        f"{slots:,} token slots", flush=True)
  programs = []
  for name in _COMPARE.value:
    programs.append(Programs(name, model, mesh, steps))
    print(f"compiled {name} in {programs[-1].compile_seconds:.0f} s", flush=True)
    for key, buffers in (programs[-1].step.workspaces or {}).items():
      rows = dict(key)["input_ids"]
      print(f"  residual workspace of a {list(rows)} block: {len(buffers)} buffers, "
            f"{sum(b.nbytes for b in buffers) / 2**20:.1f} MiB", flush=True)
  time_programs(programs, slots)
  if _OPS.value:
    for program in programs:
      profile_ops(program, _OPS.value)
  if _TORCH.value:
    torch_ratio(rows, model.tokenizer_path)


if __name__ == "__main__":
  command.run_command("benchmarks.training.train_step_profile", main)
