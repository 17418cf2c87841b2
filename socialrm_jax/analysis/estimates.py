"""Turning resampled statistics into reported values, and values that cannot be computed.

A statistic arrives as an array over rows (row 0 the data, rows 1.. bootstrap resamples, see
`bootstrap`). A row where it is undefined (a ratio with nothing to count) holds NaN: such
resamples are left out of the percentiles. When row 0 is NaN the value is `Missing(reason)`,
which `finalize` writes as JSON null and records under `null_reasons` so the report can say why.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any, Iterator

import numpy as np

from socialrm_jax.analysis.bootstrap import CI_PERCENTILES


@dataclasses.dataclass(frozen=True)
class Missing:
  """A value that cannot be computed, and why."""
  reason: str


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
  """numerator / denominator, NaN where the denominator is 0."""
  numerator = np.asarray(numerator, dtype=np.float64)
  denominator = np.asarray(denominator, dtype=np.float64)
  out = np.full(np.broadcast(numerator, denominator).shape, np.nan)
  np.divide(numerator, denominator, out=out, where=denominator != 0)
  return out


def point(value: float, reason: str) -> float | Missing:
  value = float(value)
  return value if np.isfinite(value) else Missing(reason)


def interval(rows: np.ndarray, reason: str) -> tuple[float | Missing, list[float] | Missing]:
  """The point estimate (row 0) and the 95% percentile interval of rows 1.."""
  estimate = point(rows[0], reason)
  resamples = rows[1:][np.isfinite(rows[1:])]
  if isinstance(estimate, Missing) or resamples.size == 0:
    return estimate, Missing(reason)
  low, high = np.percentile(resamples, CI_PERCENTILES)
  return estimate, [float(low), float(high)]


# Where `put` also keeps the rows it turns into values, inside `keeping_rows`.
_kept: contextvars.ContextVar[list | None] = contextvars.ContextVar("kept_rows", default=None)


def put(node: dict[str, Any], name: str, rows: np.ndarray, reason: str,
        ci_name: str | None = None) -> None:
  """Writes `name` and its interval (`<name>_ci95`, or `ci_name`) into `node`."""
  kept = _kept.get()
  if kept is not None:
    kept.append((node, name, np.asarray(rows, dtype=np.float64)))
  node[name], node[ci_name or f"{name}_ci95"] = interval(rows, reason)


@contextlib.contextmanager
def keeping_rows() -> Iterator[list[tuple[dict, str, np.ndarray]]]:
  """Within it, every `put` also keeps (node, name, rows): each statistic's value on the data and
  on every resample, before they become a value and an interval. Every metric with an interval,
  ours and each dataset analysis's, passes through `put`, so a paired comparison of two models
  (`compare`) reuses every summary as it is."""
  kept: list[tuple[dict, str, np.ndarray]] = []
  token = _kept.set(kept)
  try:
    yield kept
  finally:
    _kept.reset(token)


def finalize(tree: Any, path: str = "", reasons: dict[str, str] | None = None) -> Any:
  """Replaces every `Missing` in `tree` by None and collects `{dotted.path: reason}`."""
  if reasons is None:
    reasons = {}
  if isinstance(tree, Missing):
    reasons[path] = tree.reason
    return None
  if isinstance(tree, dict):
    return {k: finalize(v, f"{path}.{k}" if path else str(k), reasons) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [finalize(v, f"{path}[{i}]", reasons) for i, v in enumerate(tree)]
  if isinstance(tree, np.generic):
    return tree.item()
  return tree
