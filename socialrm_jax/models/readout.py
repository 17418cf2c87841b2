"""The model's outputs where a scorer reads them: hidden states gathered at readout positions,
then the head.

One function serves the scoring engine's packed batches (`scoring/step.py`) and
`RewardModel.__call__` / `token_logprobs` on padded batches: the head runs only on the gathered
positions [B, S], never on [B, T], and the LM head's logits are made `LOGLIK_BLOCK` readouts at a
time, so a 128k-token vocabulary never needs [B, S, V] logits at once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from socialrm_jax.models import attention

# Readouts whose LM-head logits are made at once (memory: LOGLIK_BLOCK x vocab floats).
LOGLIK_BLOCK = 1024
# A readout slot with this target is empty (packing pads rows' slots with it): no logits are made
# for a block of empty slots, and its log-probability is 0.
EMPTY_TARGET = -1


def target_log_probs(module, hidden, targets, block: int = LOGLIK_BLOCK):
  """log p(target | hidden) through the LM head: [B, S, D], [B, S] -> [B, S].

  The [readouts, vocab] logits are made about `block` readouts at a time (lax.map), so a
  128k-token vocabulary never needs [B, S, V] at once. Blocks run slot-major (slots s..s+k of
  every row): rows fill their slots from the front, so the empty slots (`EMPTY_TARGET`) gather in
  the last blocks, which are skipped. A row length's slots are sized for its longest possible
  response; the LM head costs only the readouts a batch really has. Rows stay whole in every
  block, so rows split over devices stay split.
  """
  b, s, d = hidden.shape
  slots = max(1, min(block // b, s))  # [slots, B] readouts a block
  pad = -s % slots
  by_slot = jnp.pad(jnp.swapaxes(hidden, 0, 1), ((0, pad), (0, 0), (0, 0)))  # [S', B, D]
  by_slot_targets = jnp.pad(targets.T, ((0, pad), (0, 0)), constant_values=EMPTY_TARGET)

  def log_probs(h, t):  # [slots, B, D], [slots, B] -> [slots, B]
    logits = module.head(h).astype(jnp.float32)  # [slots, B, V]
    picked = jnp.take_along_axis(logits, jnp.maximum(t, 0)[..., None], axis=-1)[..., 0]
    return jnp.where(t >= 0, picked - jax.nn.logsumexp(logits, axis=-1), 0.0)

  def one_block(args):
    h, t = args
    return jax.lax.cond(jnp.any(t >= 0), log_probs, lambda h, t: jnp.zeros(t.shape, jnp.float32),
                        h, t)

  out = jax.lax.map(one_block, (by_slot.reshape(-1, slots, b, d),
                                by_slot_targets.reshape(-1, slots, b)))  # [S'/slots, slots, B]
  return out.reshape(-1, b)[:s].T


def readouts(module, input_ids: jax.Array, positions: jax.Array, layout: attention.Layout,
             token_type_ids: jax.Array | None, readout_index: jax.Array,
             readout_target: jax.Array, readout: str) -> jax.Array:
  """[B, T] tokens under `layout` -> the head at the readout positions [B, S]: rewards
  [B, S, L] ("score"; a trunk-only model's hidden states [B, S, D]) or log p(target) [B, S]
  ("loglik")."""
  token_types = None if layout.is_causal else token_type_ids
  hidden = module(input_ids, positions, layout, token_types)  # [B, T, D]
  picked = jnp.take_along_axis(hidden, readout_index[..., None], axis=1)  # [B, S, D]
  if readout == "score":
    return module.head(picked).astype(jnp.float32)  # [B, S, L]
  return target_log_probs(module, picked, readout_target)  # [B, S]
