"""The model's outputs where a scorer reads them: hidden states gathered at readout positions,
then the head.

One function serves the scoring engine's packed batches (`scoring/step.py`) and
`RewardModel.__call__` / `token_logprobs` on padded batches: the head runs only on the gathered
positions [B, S], never on [B, T], and the LM head's logits are made `LOGLIK_BLOCK` readouts at a
time, so a 128k-token vocabulary never needs [B, S, V] logits at once.

The vocabulary scan's rows (`scoring/vocab_rows.py`: one prompt, then many one-token answers as
branches) read "vocab_loglik": the first answer token of every branch is predicted from the same
position, the prompt's last, so the row's log-softmax there is made once ([B, V]) and each branch's
first token is looked up in it; only the tokens after it go through the LM head one readout each.
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
# "vocab_loglik": a readout at this index reads its target from the row's first-token distribution
# (at the row's `first_token_index`), not from a hidden state of its own.
FROM_FIRST_TOKEN_DISTRIBUTION = -1
READOUTS = ("score", "loglik", "vocab_loglik")
# [B] inputs a readout reads besides the batch's tokens and slots: `readouts`' keyword arguments,
# which a scorer's batches carry for that readout only.
ROW_INPUTS = {"vocab_loglik": ("first_token_index",)}


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


def first_token_log_probs(module, first_hidden, readout_index, readout_target):
  """"vocab_loglik"'s first-token readouts: log p(target) from each row's one distribution.
  first_hidden [B, 1, D] (the hidden state at the row's prompt end), readout_index and
  readout_target [B, S] -> [B, S] (0 where a slot reads elsewhere)."""
  log_dist = jax.nn.log_softmax(module.head(first_hidden).astype(jnp.float32), axis=-1)[:, 0]  # [B, V]
  picked = jnp.take_along_axis(log_dist, jnp.maximum(readout_target, 0), axis=1)  # [B, S]
  return jnp.where(readout_index == FROM_FIRST_TOKEN_DISTRIBUTION, picked, 0.0)


def readouts(module, input_ids: jax.Array, positions: jax.Array, layout: attention.Layout,
             token_type_ids: jax.Array | None, readout_index: jax.Array,
             readout_target: jax.Array, readout: str,
             first_token_index: jax.Array | None = None,
             gate_index: jax.Array | None = None) -> jax.Array:
  """[B, T] tokens under `layout` -> the head at the readout positions [B, S]: rewards
  [B, S, L] ("score"; a trunk-only model's hidden states [B, S, D]) or log p(target) [B, S]
  ("loglik"; "vocab_loglik", where slots at `FROM_FIRST_TOKEN_DISTRIBUTION` read the row's
  distribution at `first_token_index` [B]). `gate_index` [B, S]: where a gated reward head
  (ArmoRM, QRM) reads each slot's gate, a prompt position of the slot's own sequence; only such
  heads are given one, so other heads' programs hold no second gather."""
  if readout not in READOUTS:
    raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
  token_types = None if layout.is_causal else token_type_ids
  slots = readout_index.shape[1]
  # Only the hidden states read are computed to the end (a decoder's last layer then runs its
  # queries and MLP at these tokens alone): the readouts' own tokens, then the gates', then the
  # row's first-token distribution.
  wanted = [jnp.maximum(readout_index, 0)]  # [B, S]
  if readout == "score" and gate_index is not None:
    wanted.append(gate_index)  # [B, S]
  if readout == "vocab_loglik":
    wanted.append(first_token_index[:, None])  # [B, 1]
  hidden = module(input_ids, positions, layout, token_types,
                  output_index=jnp.concatenate(wanted, axis=1))  # [B, S (+ S or 1), D]
  picked = hidden[:, :slots]  # [B, S, D]
  if readout == "score" and gate_index is not None:
    return module.head(picked, hidden[:, slots:]).astype(jnp.float32)  # [B, S, L]
  if readout == "score":
    return module.head(picked).astype(jnp.float32)  # [B, S, L]
  if readout == "loglik":
    return target_log_probs(module, picked, readout_target)  # [B, S]
  shared = readout_index == FROM_FIRST_TOKEN_DISTRIBUTION
  # The shared slots sit after every row's own ones (packing), so their blocks are skipped here.
  own_log_probs = target_log_probs(module, picked,
                                   jnp.where(shared, EMPTY_TARGET, readout_target))  # [B, S]
  first = first_token_log_probs(module, hidden[:, slots:], readout_index, readout_target)
  return jnp.where(shared, first, own_log_probs)  # [B, S]
