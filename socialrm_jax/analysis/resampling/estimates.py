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
import functools
import warnings
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import numpy as np
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from socialrm_jax.analysis.resampling.bootstrap import CI_LEVEL, CI_PERCENTILES


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


# The fewest resampling units (items; StereoSet's target terms) a statistic gets an interval from:
# with fewer, its resamples take a handful of values and no percentile interval holds its 95%
# (orchestrators/interval_coverage.py). Its value is still reported.
MIN_INTERVAL_UNITS = 10


@functools.lru_cache(maxsize=4096)  # a metrics run asks for few distinct counts, many times
def percentile_levels(units: float | None, level: float = CI_LEVEL) -> tuple[float, float]:
  """The percentiles of the resamples that bound a `level` interval of a statistic of `units`
  resampling units: the expanded percentile interval (Hesterberg 2015, "What teachers should
  know about the bootstrap", The American Statistician 69(4)), which widens the percentile
  interval to make up for a small sample's too-narrow bootstrap distribution: each tail holds
  Phi(-sqrt(n / (n - 1)) t_{(1 + level) / 2, n - 1}) in place of (1 - level) / 2, so at 95% the
  levels tend to 2.5 and 97.5 as n grows (0.86 / 99.14 at 10 units, 2.31 / 97.69 at 100, 2.48 /
  97.52 at 1,000). None: the plain percentiles."""
  if units is None:
    if level == CI_LEVEL:
      return CI_PERCENTILES
    tail = 100 * (1 - level) / 2
    return tail, 100 - tail
  n = max(float(units), 2.0)
  z = np.sqrt(n / (n - 1)) * stats.t.ppf((1 + level) / 2, n - 1)
  tail = 100 * float(stats.norm.sf(z))
  return tail, 100 - tail


def intervals(rows: np.ndarray, units: float | None = None, level: float = CI_LEVEL,
              share: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The point estimates (row 0) and `level` intervals (`percentile_levels` of `units`) of the
  resamples (rows 1..) of statistics `rows` [..., 1 + B] at once, resamples where a statistic is
  undefined left out; NaN where nothing is defined, and where there are fewer than
  `MIN_INTERVAL_UNITS` units. A `share` (a mean of per-unit values in [0, 1]: an accuracy, a
  rate) at 0 or at 1 reaches the exact bound of its units (`share_edges`).
  -> (estimate, low, high), each # [...]"""
  rows = np.asarray(rows, dtype=np.float64)
  nothing = np.full(rows.shape[:-1], np.nan)
  if rows.shape[-1] < 2 or (units is not None and units < MIN_INTERVAL_UNITS):
    return rows[..., 0], nothing, nothing.copy()
  levels = percentile_levels(units, level)
  resamples = rows[..., 1:].reshape(-1, rows.shape[-1] - 1)                   # [M, B]
  finite = np.isfinite(resamples).all(axis=-1)                                 # [M]
  low, high = np.empty((2, finite.size))
  # numpy's percentile where every resample is defined (fast), nanpercentile on the others.
  low[finite], high[finite] = np.percentile(resamples[finite], levels, axis=-1)
  if not finite.all():
    partial = resamples[~finite]
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN slice has no interval: NaN
      low[~finite], high[~finite] = np.nanpercentile(
          np.where(np.isfinite(partial), partial, np.nan), levels, axis=-1)
  shape = rows.shape[:-1]
  low, high = low.reshape(shape), high.reshape(shape)
  if share and units is not None:
    low, high = share_edges(rows[..., 0], low, high, units, level)
  return rows[..., 0], low, high


def share_edges(estimate: np.ndarray, low: np.ndarray, high: np.ndarray, units: float,
                level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray]:
  """A share's interval where its estimate is 0 (or 1): every unit scored 0, so every resample
  is 0 too and the percentiles give [0, 0], which misses any true share above 0 (a BBQ category's
  10 disambiguated items with a true unknown rate of 0.13 show 0 of 10 a quarter of the time:
  orchestrators/interval_coverage.py measured 85% coverage). There the far end is the exact
  (Clopper-Pearson) bound of 0 of n units (statsmodels' `proportion_confint`, method "beta"):
  1 - ((1 - level) / 2) ** (1 / n). -> (low, high)"""
  if not np.any((estimate == 0) | (estimate == 1)):  # most statistics: no bound to compute
    return low, high
  n = max(int(round(units)), 1)
  _, upper_at_zero = proportion_confint(0, n, alpha=1 - level, method="beta")
  return (np.where(estimate == 1, np.minimum(low, 1 - upper_at_zero), low),
          np.where(estimate == 0, np.maximum(high, upper_at_zero), high))


# A statistic's own interval rule, where the percentiles of its resamples do not hold their level
# (StereoSet's icat): given how its parts' rows are shaped (the identity for a metrics run; the
# coverage benchmark's replicates) and the level, its bounds. -> (low, high)
Bounds = Callable[[Callable[[np.ndarray], np.ndarray], float], tuple[np.ndarray, np.ndarray]]


def too_few(units: float) -> str:
  return (f"an interval needs at least {MIN_INTERVAL_UNITS} resampling units (items; StereoSet: "
          f"target terms), and this value has {units:g}")


def _unshaped(rows: np.ndarray) -> np.ndarray:
  return rows


class Kept(NamedTuple):
  """A statistic as `put` wrote it: its node, its name, its value on the data and on every
  resample, the resampling units behind it, its own interval rule if it has one, and whether it
  is a share (`intervals`)."""
  node: dict
  name: str
  rows: np.ndarray  # [1 + B]
  units: float | None
  bounds: Bounds | None = None
  share: bool = False

  def intervals(self, shape: Callable[[np.ndarray], np.ndarray] = _unshaped,
                level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, low, high) of the statistic as the metrics report them, its rows (and its
    parts') passed through `shape` first (# [..., 1 + B])."""
    estimate, low, high = intervals(shape(self.rows), self.units, level, self.share)
    if self.bounds is not None and not (self.units is not None and
                                        self.units < MIN_INTERVAL_UNITS):
      low, high = self.bounds(shape, level)
    return estimate, low, high


def difference_intervals(a: Kept, b: Kept, shape: Callable[[np.ndarray], np.ndarray] = _unshaped
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(estimate, low, high) of a - b, two models' same statistic over the same resamples (the
  paired comparison): the percentiles of the resampled differences, with a's units; for a
  statistic with its own interval rule (`Bounds`: StereoSet's icat), the ends of the two models'
  intervals at half the error each (Bonferroni: [low_a - high_b, high_a - low_b] holds the
  difference whenever both hold their values, so with 95% at least), since the percentiles of
  its differences do not hold their level either (icat's kink at ss = 1/2 biases a model at the
  null: orchestrators/interval_coverage.py measured 89% at 100 times the bundled items)."""
  if a.bounds is None and b.bounds is None:
    return intervals(shape(a.rows - b.rows), a.units)
  level = 1 - (1 - CI_LEVEL) / 2
  estimate_a, low_a, high_a = a.intervals(shape, level)
  estimate_b, low_b, high_b = b.intervals(shape, level)
  return estimate_a - estimate_b, low_a - high_b, high_a - low_b


def interval(rows: np.ndarray, reason: str, units: float | None = None,
             bounds: Bounds | None = None,
             share: bool = False) -> tuple[float | Missing, list[float] | Missing]:
  """The point estimate (row 0) and the 95% interval of rows 1.. (`Kept.intervals`)."""
  return kept_interval(Kept({}, "", np.asarray(rows, dtype=np.float64), units, bounds, share),
                       reason)


def kept_interval(kept: Kept, reason: str) -> tuple[float | Missing, list[float] | Missing]:
  """`interval` of a kept statistic."""
  _, low, high = kept.intervals()
  return reported(kept.rows[0], low, high, kept.units, reason)


def difference_interval(a: Kept, b: Kept, reason: str
                        ) -> tuple[float | Missing, list[float] | Missing]:
  """The difference a - b and its 95% interval (`difference_intervals`), as `interval` gives
  them."""
  _, low, high = difference_intervals(a, b)
  return reported(a.rows[0] - b.rows[0], low, high, a.units, reason)


def reported(estimate: float, low: float, high: float, units: float | None, reason: str
             ) -> tuple[float | Missing, list[float] | Missing]:
  """A statistic's value and interval as metrics.json writes them: `Missing` where it is not
  defined, rests on too few units, or has no finite interval."""
  value = point(estimate, reason)
  if isinstance(value, Missing):
    return value, Missing(reason)
  if units is not None and units < MIN_INTERVAL_UNITS:
    return value, Missing(too_few(units))
  if not (np.isfinite(low) and np.isfinite(high)):
    return value, Missing(reason)
  return value, [float(low), float(high)]


# Where `put` also keeps the statistics it writes, inside `keeping_rows`.
_kept: contextvars.ContextVar[list | None] = contextvars.ContextVar("kept_rows", default=None)


def put(node: dict[str, Any], name: str, rows: np.ndarray, reason: str,
        units: float | None = None, ci_name: str | None = None,
        bounds: Bounds | None = None, share: bool = False) -> None:
  """Writes `name` and its interval (`<name>_ci95`, or `ci_name`) into `node`. `units`: how many
  resampling units (items, or the clusters a dataset draws whole) the statistic rests on, which
  sets the interval's percentiles (`percentile_levels`) and whether it has one at all; every
  metric of this package says, and an analysis that does not gets the plain percentiles.
  `bounds`: the statistic's own interval rule, where it needs one (`Bounds`). `share`: the
  statistic is a mean of per-unit values in [0, 1] (accuracies, rates), whose interval reaches
  the exact bound at 0 or 1 (`share_edges`)."""
  kept = _kept.get()
  rows = np.asarray(rows, dtype=np.float64)
  units = None if units is None else float(units)
  this = Kept(node, name, rows, units, bounds, share)
  if kept is not None:
    kept.append(this)
  node[name], node[ci_name or f"{name}_ci95"] = kept_interval(this, reason)


def node_paths(tree: Any, path: str) -> dict[int, str]:
  """{id(node): its dotted path} of every dict in `tree`, itself at `path`."""
  out: dict[int, str] = {}
  if isinstance(tree, dict):
    out[id(tree)] = path
    for key, value in tree.items():
      out.update(node_paths(value, f"{path}.{key}"))
  return out


def kept_by_path(kept: list[Kept], roots: Mapping[str, Any]) -> dict[str, Kept]:
  """The statistics `put` wrote into the trees `roots` ({dotted path: a tree, or a list of trees
  that will share that path, as a dataset's generic and own nodes do}), by their metrics.json
  path (`datasets.bbq.bias_score_ambiguous`)."""
  paths: dict[int, str] = {}
  for path, trees in roots.items():
    for tree in trees if isinstance(trees, list) else [trees]:
      paths.update(node_paths(tree, path))
  return {f"{paths[id(k.node)]}.{k.name}": k for k in kept if id(k.node) in paths}


@contextlib.contextmanager
def keeping_rows() -> Iterator[list[Kept]]:
  """Within it, every `put` also keeps what it wrote (`Kept`): each statistic's value on the data
  and on every resample, before they become a value and an interval. Every metric with an
  interval, ours and each dataset analysis's, passes through `put`, so a paired comparison of two
  models (`compare`) and the verdicts (`verdicts`) reuse every summary as it is."""
  kept: list[Kept] = []
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
