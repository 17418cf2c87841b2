"""Calibration of the reward margin as a preference probability (docs/spec.md sec. 5).

p = sigmoid((r_chosen - r_rejected) / T) is the Bradley-Terry probability that the chosen
response is preferred. Every gold pair's label is "chosen", so ECE is measured on the top label:
confidence max(p, 1 - p), correct when p > 1/2 (1/2 on a tie), 15 equal-width bins on [0, 1],
ECE = sum over bins of (share of pairs) * |accuracy - mean confidence|.

The temperature T is fitted on the pairs of one half of the items and ECE is reported on the
other half, before (T = 1) and after. The halves come from a hash of `item_id` (CRC-32, low bit),
so they do not depend on row order or on the other items. T = exp(log_t) minimises the mean
Bradley-Terry loss softplus(-margin / T) over log_t in [-LOG_T_BOUND, LOG_T_BOUND]
(`scipy.optimize.minimize_scalar`, bounded: Brent's method, deterministic, so there is no seed to
set). The bound is there because when every fit pair is won the loss keeps falling as T -> 0.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from scipy import optimize

from socialrm_jax.analysis.resampling.estimates import Missing

N_BINS = 15
LOG_T_BOUND = 10.0
# The fit stops when log_t is known to within this (T to a relative 1e-6).
LOG_T_TOLERANCE = 1e-6


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


def bradley_terry_loss(log_t: float, margin: np.ndarray) -> float:
  """The mean of softplus(-margin / T) with T = exp(log_t), over margins [P] (float64)."""
  return float(np.mean(np.logaddexp(0.0, -margin / np.exp(log_t))))


def fit_temperature(margin: np.ndarray) -> float:
  """The temperature minimising the Bradley-Terry loss of `margin` [P]; 1 when every margin is 0
  (the loss is then ln 2 at every T)."""
  # Sorted, so that the loss's float sums, and the fit, do not depend on the pairs' order.
  margin = np.sort(np.asarray(margin, dtype=np.float64))
  if not margin.any():
    return 1.0
  fit = optimize.minimize_scalar(bradley_terry_loss, bounds=(-LOG_T_BOUND, LOG_T_BOUND),
                                 args=(margin,), method="bounded",
                                 options={"xatol": LOG_T_TOLERANCE})
  if not fit.success:  # Brent's method on a bounded interval stops only on its iteration cap
    raise RuntimeError(f"the temperature fit did not converge: {fit.message}")
  return float(np.exp(fit.x))


def summary(fit: np.ndarray, report: np.ndarray) -> dict[str, Any]:
  """`ece_before`, `ece_after`, `temperature` from the margins of the gold pairs of the items
  that fit the temperature [F] and of the others [E] (`pairs.fit_half`)."""
  node: dict[str, Any] = {"n_bins": N_BINS, "n_fit_pairs": int(fit.size),
                          "n_eval_pairs": int(report.size)}
  if fit.size == 0 or report.size == 0:
    reason = "needs gold pairs in both hash halves of the items (too few items)"
    node.update(ece_before=Missing(reason), ece_after=Missing(reason), temperature=Missing(reason))
    return node
  temperature = fit_temperature(fit)
  report = np.sort(report)  # the per-bin float sums in one order, whatever the pairs' order
  node["temperature"] = temperature
  node["ece_before"] = expected_calibration_error(report)
  node["ece_after"] = expected_calibration_error(report, temperature)
  return node
