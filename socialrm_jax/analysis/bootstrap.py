"""Percentile bootstrap over items, stratified, vectorised with numpy.

Every statistic this package reports with an interval is a function of sums of per-item values
(wins and pair counts, selections, ...) over a set of items. So each dataset's items are put in
strata (domain, subset, context condition and a dataset's own finer group, such as StereoSet's
target term), every stratum is
resampled with replacement to its own size `n_resamples` times, and the per-item values are
summed per stratum and resample: `sums[r, s, v]`, with row r = 0 holding the sums over the items
as they are (the point estimate) and rows 1.. the resamples. A statistic is then computed once on
all rows at the same time, and its 95% interval is the 2.5 and 97.5 percentiles of rows 1..

Why stratified: the benchmark's composition (how many items per subset, condition, term) is fixed
by design, so a resample keeps it; intervals of larger groups (a dataset, a domain) are computed
from the same resamples by adding strata. Resampling is over items, never pairs: an item's pairs
travel together. A resample's counts of each distinct per-item row are drawn as one multinomial
(see `_resampled_sums`) and multiplied into the rows, so a million pairs take seconds. The
generator is numpy's PCG64 seeded with (seed, dataset name): an interval never
depends on which other datasets were evaluated beside it.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Callable, Iterable, Mapping, NamedTuple

import numpy as np

N_RESAMPLES = 1000
SEED = 0
CI_PERCENTILES = (2.5, 97.5)


class Stratum(NamedTuple):
  domain: str
  subset: str
  context_condition: str
  group: str  # the dataset analysis's `stratum_group` ('' when it has none)


def generator(seed: int, name: str) -> np.random.Generator:
  """The generator for one dataset's resamples: the same (seed, name) gives the same draws."""
  return np.random.default_rng([seed, zlib.crc32(name.encode())])


def distinct_rows(values: np.ndarray, copies: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
  """The distinct rows of `values` [n, V], in lexicographic order, and how often each occurs
  (each row counting `copies` [n] times, once by default). -> ([U, V], [U] int64)

  Rows are numbered by mixed-radix codes of their per-column value codes, so the work is integer
  sorting, not row comparison."""
  code = np.zeros(values.shape[0], dtype=np.int64)
  radix = 1
  for column in values.T:
    distinct, inverse = np.unique(column, return_inverse=True)
    radix *= len(distinct)
    if radix >= 2**62:  # too many combinations to number: compare whole rows instead
      distinct_values, inverse = np.unique(values, axis=0, return_inverse=True)
      return distinct_values, np.bincount(inverse.reshape(-1), weights=copies,
                                          minlength=len(distinct_values)).astype(np.int64)
    code = code * len(distinct) + inverse.reshape(-1)
  _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
  return values[first], np.bincount(inverse.reshape(-1), weights=copies,
                                    minlength=first.size).astype(np.int64)


# Multinomial counts drawn at once in `_resampled_sums` (int64, then float64): 8 MiB each.
_COUNTS_BLOCK = 1 << 20


def _resampled_sums(distinct: np.ndarray, copies: np.ndarray, n_resamples: int,
                    rng: np.random.Generator) -> np.ndarray:
  """Sums over `n_resamples` resamples of n = sum(copies) rows, of which `distinct` [U, V] are
  distinct, row u occurring copies[u] times. # [n_resamples, V]

  Drawing n rows with replacement from them is drawing multinomial counts over the U distinct
  rows with probabilities c_u / n: the same distribution, at a cost of U instead of n per
  resample. Per-item values here are mostly counts and outcomes in {0, 1/2, 1}, so U stays
  small however many items there are; continuous values (the counterfactual swaps' reward
  changes) make U the items, so the counts are drawn a block of resamples at a time, at most
  `_COUNTS_BLOCK` of them at once (the same draws as all at once: the generator makes them row by
  row)."""
  n = int(copies.sum())
  block = max(1, _COUNTS_BLOCK // max(1, distinct.shape[0]))
  out = np.empty((n_resamples, distinct.shape[1]))
  for start in range(0, n_resamples, block):
    size = min(block, n_resamples - start)
    counts = rng.multinomial(n, copies / n, size=size)                 # [size, U]
    out[start:start + size] = counts.astype(np.float64) @ distinct
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


Columns = Mapping[str, np.ndarray]  # a per-item value by name, each # [n]


def stratified_sums(columns: Columns, strata: Columns, n_resamples: int,
                    rng: np.random.Generator) -> StratifiedSums:
  """Resamples items within their stratum and sums each column per stratum and resample.

  `strata` gives each `Stratum` field as an array [N] of str (a field left out is '')."""
  return stratified_sums_in_chunks([(columns, strata)], n_resamples, rng)


def stratified_sums_in_chunks(chunks: Iterable[tuple[Columns, Columns]], n_resamples: int,
                              rng: np.random.Generator) -> StratifiedSums:
  """`stratified_sums` of the items of all `chunks` ((columns, strata) of some items each, the
  same columns in every chunk), made a chunk at a time: what is kept between chunks is each
  stratum's distinct rows and their counts, so the items' columns of one chunk are all that
  exist at once. The strata come in order of their first item, their distinct rows in
  lexicographic order, as if all items were one chunk: the same resamples."""
  names: tuple[str, ...] | None = None
  found: dict[tuple[str, ...], list[tuple[np.ndarray, np.ndarray]]] = {}
  for columns, strata in chunks:
    names = tuple(columns) if names is None else names
    values = np.stack([np.asarray(columns[c], dtype=np.float64) for c in names], axis=1)  # [n, V]
    n = values.shape[0]
    code: dict[tuple[str, ...], int] = {}
    fields = [strata.get(f, [""] * n) for f in Stratum._fields]
    stratum_of_item = np.fromiter((code.setdefault(tuple(map(str, k)), len(code))
                                   for k in zip(*fields)), dtype=np.int64, count=n)      # [n]
    order = np.argsort(stratum_of_item, kind="stable")
    bounds = np.searchsorted(stratum_of_item[order], np.arange(len(code) + 1))
    for key, s in code.items():
      rows = found.setdefault(key, [])
      rows.append(distinct_rows(values[order[bounds[s]:bounds[s + 1]]]))                 # [n_s, V]
      if len(rows) > 1:  # merged as they come, so a stratum keeps one set of distinct rows
        rows[:] = [distinct_rows(np.concatenate([r[0] for r in rows]),
                                 np.concatenate([r[1] for r in rows]))]
  if names is None:
    raise ValueError("stratified_sums_in_chunks needs at least one chunk")
  table = np.empty((1 + n_resamples, len(found), len(names)))
  for s, ((distinct, copies),) in enumerate(found.values()):
    table[0, s] = copies.astype(np.float64) @ distinct
    table[1:, s] = _resampled_sums(distinct, copies, n_resamples, rng)
  return StratifiedSums(strata=tuple(Stratum(*k) for k in found), columns=names, table=table)
