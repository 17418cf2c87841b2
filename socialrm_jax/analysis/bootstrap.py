"""Percentile bootstrap over items, stratified, vectorised with numpy.

Every statistic this package reports with an interval is a function of sums of per-item values
(wins and pair counts, selections, ...) over a set of items. So each dataset's items are put in
strata (domain, subset, context condition and, for StereoSet, the target term), every stratum is
resampled with replacement to its own size `n_resamples` times, and the per-item values are
summed per stratum and resample: `sums[r, s, v]`, with row r = 0 holding the sums over the items
as they are (the point estimate) and rows 1.. the resamples. A statistic is then computed once on
all rows at the same time, and its 95% interval is the 2.5 and 97.5 percentiles of rows 1..

Why stratified: the benchmark's composition (how many items per subset, condition, term) is fixed
by design, so a resample keeps it; intervals of larger groups (a dataset, a domain) are computed
from the same resamples by adding strata. Resampling is over items, never pairs: an item's pairs
travel together. A resample's counts of each item are drawn as indices and bin-counted, then
multiplied into the per-item values (one matrix product per stratum), so a million pairs take
seconds. The generator is numpy's PCG64 seeded with (seed, dataset name): an interval never
depends on which other datasets were evaluated beside it.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Callable, Mapping, NamedTuple

import numpy as np

N_RESAMPLES = 1000
SEED = 0
CI_PERCENTILES = (2.5, 97.5)
# Bounds the index matrix drawn at once (resamples x stratum size), about 32 MB of int64.
_MAX_DRAWS = 1 << 22


class Stratum(NamedTuple):
  domain: str
  subset: str
  context_condition: str
  target: str


def generator(seed: int, name: str) -> np.random.Generator:
  """The generator for one dataset's resamples: the same (seed, name) gives the same draws."""
  return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _resampled_sums(values: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
  """Sums of `values` [n, V] over `n_resamples` resamples of its rows. # [n_resamples, V]"""
  n = values.shape[0]
  out = np.empty((n_resamples, values.shape[1]))
  chunk = max(1, _MAX_DRAWS // n)
  for start in range(0, n_resamples, chunk):
    b = min(chunk, n_resamples - start)
    draws = rng.integers(0, n, size=(b, n))                             # [b, n]
    draws += n * np.arange(b)[:, None]
    counts = np.bincount(draws.ravel(), minlength=b * n).reshape(b, n)  # [b, n]
    out[start:start + b] = counts.astype(np.float64) @ values
  return out


@dataclasses.dataclass(frozen=True)
class StratifiedSums:
  """Per-stratum sums of named per-item values: row 0 the data, rows 1.. the resamples."""
  strata: tuple[Stratum, ...]
  columns: tuple[str, ...]
  table: np.ndarray  # [1 + n_resamples, S, V]

  def total(self, column: str, where: Callable[[Stratum], bool] | None = None) -> np.ndarray:
    """The sum of `column` over the strata `where` accepts (all by default). # [1 + B]"""
    keep = np.asarray([where is None or bool(where(s)) for s in self.strata], dtype=bool)
    return self.table[:, keep, self.columns.index(column)].sum(axis=1)

  def grouped(self, column: str, field: str,
              where: Callable[[Stratum], bool] | None = None) -> tuple[list[str], np.ndarray]:
    """Sums of `column` per distinct value of a stratum field. -> (values, # [1 + B, G])"""
    keep = [where is None or bool(where(s)) for s in self.strata]
    groups = list(dict.fromkeys(getattr(s, field) for s, k in zip(self.strata, keep) if k))
    code = {g: i for i, g in enumerate(groups)}
    membership = np.zeros((len(self.strata), len(groups)))                # [S, G]
    for i, (s, k) in enumerate(zip(self.strata, keep)):
      if k:
        membership[i, code[getattr(s, field)]] = 1.0
    return groups, self.table[:, :, self.columns.index(column)] @ membership

  def values(self, field: str) -> list[str]:
    """The distinct values of one stratum field, in first-seen order."""
    return list(dict.fromkeys(getattr(s, field) for s in self.strata))


def stratified_sums(columns: Mapping[str, np.ndarray], strata: list[Stratum],
                    n_resamples: int, rng: np.random.Generator) -> StratifiedSums:
  """Resamples items within their stratum and sums each column per stratum and resample."""
  names = tuple(columns)
  values = np.stack([np.asarray(columns[c], dtype=np.float64) for c in names], axis=1)  # [N, V]
  keys = list(dict.fromkeys(strata))
  code = {s: i for i, s in enumerate(keys)}
  stratum_of_item = np.asarray([code[s] for s in strata], dtype=np.int64)              # [N]
  order = np.argsort(stratum_of_item, kind="stable")
  bounds = np.searchsorted(stratum_of_item[order], np.arange(len(keys) + 1))
  table = np.empty((1 + n_resamples, len(keys), len(names)))
  for s in range(len(keys)):
    members = values[order[bounds[s]:bounds[s + 1]]]                                    # [n, V]
    table[0, s] = members.sum(axis=0)
    table[1:, s] = _resampled_sums(members, n_resamples, rng)
  return StratifiedSums(strata=tuple(keys), columns=names, table=table)
