"""Calibration of the reward margin as a preference probability (docs/spec.md sec. 5).

p = sigmoid((r_chosen - r_rejected) / T) is the Bradley-Terry probability that the chosen
response is preferred. Every gold pair's label is "chosen", so ECE is measured on the top label:
confidence max(p, 1 - p), correct when p > 1/2 (1/2 on a tie), 15 equal-width bins on [0, 1],
ECE = sum over bins of (share of pairs) * |accuracy - mean confidence|.

The temperature T is fitted on the pairs of one half of the items and ECE is reported on the
other half, before (T = 1) and after. The halves come from a hash of `item_id` (CRC-32, low bit),
so they do not depend on row order or on the other items. T = exp(log_t) minimises the mean
Bradley-Terry loss softplus(-margin / T) by full-batch Adam (optax), starting from T = 1, for a
fixed number of steps: deterministic, so there is no seed to set. log_t is clipped to
[-LOG_T_BOUND, LOG_T_BOUND], because when every fit pair is won the loss keeps falling as T -> 0.
"""

from __future__ import annotations

import zlib
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from socialrm_jax.analysis.estimates import Missing

N_BINS = 15
FIT_STEPS = 300
LEARNING_RATE = 0.05
LOG_T_BOUND = 10.0


def fit_half(item_ids: Sequence[str]) -> np.ndarray:
  """True for items whose pairs fit the temperature (the rest report ECE). # [N] bool"""
  out = np.empty(len(item_ids), dtype=bool)
  for start in range(0, len(item_ids), 1 << 16):  # a chunk of the ids as Python strings at once
    out[start:start + (1 << 16)] = [zlib.crc32(i.encode()) & 1 == 0
                                    for i in item_ids[start:start + (1 << 16)]]
  return out


def expected_calibration_error(margin: np.ndarray, temperature: float = 1.0,
                               n_bins: int = N_BINS, chunk: int = 1 << 16) -> float:
  """Top-label ECE of sigmoid(margin / temperature) against 'chosen is preferred'; the per-bin
  sums are taken `chunk` pairs at a time (a million pairs' temporaries would be ~50 MB)."""
  gap = np.zeros(n_bins)
  for start in range(0, margin.size, chunk):
    part = np.asarray(margin[start:start + chunk], dtype=np.float64)
    p = 1.0 / (1.0 + np.exp(-part / temperature))                                     # [c]
    confidence = np.maximum(p, 1.0 - p)
    correct = (p > 0.5) + 0.5 * (p == 0.5)
    bins = np.minimum((confidence * n_bins).astype(np.int64), n_bins - 1)
    gap += (np.bincount(bins, weights=correct, minlength=n_bins)
            - np.bincount(bins, weights=confidence, minlength=n_bins))
  return float(np.abs(gap).sum() / margin.size)


def bradley_terry_loss(log_t: jax.Array, margin: jax.Array, weight: jax.Array) -> jax.Array:
  """The mean of softplus(-margin / T) with T = exp(log_t), over margins [P] with weights [P]."""
  return jnp.sum(weight * jax.nn.softplus(-margin / jnp.exp(log_t))) / jnp.sum(weight)


def loss_gradient(log_t: jax.Array, margin: jax.Array, weight: jax.Array) -> jax.Array:
  """d `bradley_terry_loss` / d log_t, written out: softplus' = sigmoid and d(-m / T)/d log T =
  m / T. One fused pass over the margins, where autodiff keeps the forward pass's [P] arrays
  for the backward one (tens of MB at a million pairs)."""
  t = jnp.exp(log_t)
  return jnp.sum(weight * jax.nn.sigmoid(-margin / t) * (margin / t)) / jnp.sum(weight)


@jax.jit
def _fit_log_temperature(margin: jax.Array, n: jax.Array) -> jax.Array:
  """log T for the first `n` of margins [P] (the rest is padding, of weight 0)."""
  optimizer = optax.adam(LEARNING_RATE)
  weight = (jnp.arange(margin.size) < n).astype(margin.dtype)                      # [P]

  def step(state, _):
    log_t, opt_state = state
    grad = loss_gradient(log_t, margin, weight)
    updates, opt_state = optimizer.update(grad, opt_state)
    log_t = jnp.clip(optax.apply_updates(log_t, updates), -LOG_T_BOUND, LOG_T_BOUND)
    return (log_t, opt_state), None

  log_t = jnp.zeros((), margin.dtype)
  (log_t, _), _ = jax.lax.scan(step, (log_t, optimizer.init(log_t)), None, length=FIT_STEPS)
  return log_t


def fit_temperature(margin: np.ndarray) -> float:
  """The temperature minimising the Bradley-Terry loss of `margin` [P]."""
  # Padded to a power of two so that different pair counts reuse one compilation.
  size = 1 << max(int(margin.size - 1).bit_length(), 4)
  padded = np.zeros(size, np.float32)
  padded[:margin.size] = margin
  return float(np.exp(_fit_log_temperature(jnp.asarray(padded), np.int32(margin.size))))


def summary(fit: np.ndarray, report: np.ndarray) -> dict[str, Any]:
  """`ece_before`, `ece_after`, `temperature` from the margins of the gold pairs of the items
  that fit the temperature [F] and of the others [E] (`fit_half`)."""
  node: dict[str, Any] = {"n_bins": N_BINS, "n_fit_pairs": int(fit.size),
                          "n_eval_pairs": int(report.size)}
  if fit.size == 0 or report.size == 0:
    reason = "needs gold pairs in both hash halves of the items (too few items)"
    node.update(ece_before=Missing(reason), ece_after=Missing(reason), temperature=Missing(reason))
    return node
  temperature = fit_temperature(fit)
  node["temperature"] = temperature
  node["ece_before"] = expected_calibration_error(report)
  node["ece_after"] = expected_calibration_error(report, temperature)
  return node
