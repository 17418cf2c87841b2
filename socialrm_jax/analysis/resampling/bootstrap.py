"""Percentile bootstrap over resampling units (items, or a dataset's clusters), stratified,
vectorised with numpy.

Every statistic this package reports with an interval is a function of sums of per-item values
(wins and pair counts, selections, ...) over a set of items. So each dataset's items are put in
cells (`Stratum`: domain, subset, context condition and a dataset's own finer group, such as
StereoSet's target term), the items are resampled `n_resamples` times (see below), and the
per-item values are summed per cell and resample: `sums[r, s, v]`, with row r = 0 holding the
sums over the items as they are (the point estimate) and rows 1.. the resamples. A statistic is
then computed once on all rows at the same time, and its 95% interval comes from the percentiles
of rows 1.. (`estimates.intervals`: widened where the statistic rests on few resampling units).

How the items are drawn (`design`), as orchestrators/interval_coverage.py measured it on the
datasets' own item structures (docs/interval_coverage.md):
- Items are drawn with replacement within strata, so a resample keeps the benchmark's
  composition (how many items per subset and condition). A stratum is a cell with at least
  `MIN_STRATUM_ITEMS` items; smaller cells are pooled with their neighbours (the cells that share
  their domain, subset and condition, then their domain and subset, then their domain, then the
  whole dataset) until the pool has that many, and an item drawn from a pool adds to its own cell.
  A cell of one item resampled alone would always draw itself: it would add no variance, and an
  interval over many such cells would be far too narrow.
- A dataset whose analysis draws its groups whole
  (`dataset_analysis.DatasetAnalysis.cluster_groups`: StereoSet's target terms) has its groups
  resampled as clusters: each resample draws as many groups as there are, with replacement, within
  the fields that no group spans, and a group drawn k times counts k times, with all its items. A
  statistic that averages over groups weighs each by its draws (`StratifiedSums.group_weights`).
Intervals of larger groups (a dataset, a domain) are computed from the same resamples by adding
cells. Resampling is over items, never pairs: an item's pairs travel together. A resample's
counts of each distinct per-item row of a stratum are drawn as one multinomial (see
`_draw_items`) and multiplied into the rows, so a million pairs take seconds. The generator is
numpy's PCG64 seeded with (seed, dataset name): an interval never depends on which other
datasets were evaluated beside it.

The same code draws many replicate data sets at once (a leading axis of R replicates of the same
items' values, `resampled_sums_batched`): orchestrators/interval_coverage.py measures the intervals'
coverage that way, with the design the metrics use.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

N_RESAMPLES = 1000
SEED = 0
CI_LEVEL = 0.95
CI_PERCENTILES = (2.5, 97.5)  # the plain percentile interval's (estimates.percentile_levels)
# The fewest items a stratum is resampled with (smaller cells are pooled, see the docstring).
MIN_STRATUM_ITEMS = 30


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


@dataclasses.dataclass(frozen=True)
class CellRows:
  """One cell's items as distinct rows of per-item values, for R replicates of the same items
  (R = 1 for a metrics run): replicate r has the rows `distinct[r, u]`, row u occurring
  `copies[r, u]` times (0 past the replicate's own distinct rows)."""
  distinct: np.ndarray  # [R, U, V]
  copies: np.ndarray    # [R, U] int64; each replicate's copies sum to `items`

  @property
  def items(self) -> int:
    return int(self.copies[0].sum())

  @staticmethod
  def of_replicates(values: np.ndarray) -> "CellRows":
    """The distinct rows of each replicate's items: values # [R, n, V]."""
    n_replicates, n, n_columns = values.shape
    tagged = np.concatenate([np.repeat(np.arange(n_replicates, dtype=np.float64), n)[:, None],
                             values.reshape(-1, n_columns)], axis=1)       # [R * n, 1 + V]
    rows, copies = distinct_rows(tagged)     # sorted by replicate first (its column leads)
    replicate = rows[:, 0].astype(np.int64)
    width = int(np.bincount(replicate, minlength=n_replicates).max())
    place = np.arange(replicate.size) - np.searchsorted(replicate, replicate)
    distinct = np.zeros((n_replicates, width, n_columns))
    padded = np.zeros((n_replicates, width), dtype=np.int64)
    distinct[replicate, place] = rows[:, 1:]
    padded[replicate, place] = copies
    return CellRows(distinct, padded)

  def sums(self) -> np.ndarray:
    """The sums over the items as they are, a replicate at a time as one vector-matrix product
    (the same additions in the same order whatever R is: a point estimate never moves). # [R, V]"""
    return np.stack([c.astype(np.float64) @ d for c, d in zip(self.copies, self.distinct)])


@dataclasses.dataclass(frozen=True)
class Pool:
  """Cells resampled together: by items (`clusters` None), or as whole groups, `clusters` listing
  each group's cells."""
  cells: tuple[int, ...]
  clusters: tuple[tuple[int, ...], ...] | None = None


# Fields of a cell kept as a pool widens, coarsest last: pooling drops them from the right.
_POOL_LEVELS = (4, 3, 2, 1, 0)


def design(cells: Sequence[Stratum], items: Sequence[int], clustered: bool = False,
           min_stratum_items: int = MIN_STRATUM_ITEMS) -> list[Pool]:
  """How one dataset's cells are resampled (the module docstring): pools of cells, each drawn by
  items, or, for a dataset whose groups are clusters (`clustered`), by whole groups within the
  fields no group spans (cells without a group are drawn by items, pooled as any cell).
  `items[s]`: how many items cell s holds."""
  pools: list[Pool] = []
  by_items = [s for s, cell in enumerate(cells) if not (clustered and cell.group)]
  if clustered and len(by_items) < len(cells):
    pools += _cluster_pools(cells, [s for s in range(len(cells)) if s not in set(by_items)])
  pools += _item_pools(cells, items, by_items, min_stratum_items)
  return pools


def _cluster_pools(cells: Sequence[Stratum], members: list[int]) -> list[Pool]:
  """Groups drawn whole, within the fields (domain, subset, condition) that no group spans; all
  together where one of those would hold a single group."""
  group_cells: dict[str, list[int]] = {}
  for s in members:
    group_cells.setdefault(cells[s].group, []).append(s)
  kept = [f for f in range(3) if all(len({cells[s][f] for s in group}) == 1
                                     for group in group_cells.values())]
  pools: dict[tuple[str, ...], list[tuple[int, ...]]] = {}
  for group in group_cells.values():
    pools.setdefault(tuple(cells[group[0]][f] for f in kept), []).append(tuple(group))
  if any(len(clusters) < 2 for clusters in pools.values()):  # one group drawn alone: no variance
    pools = {(): [c for clusters in pools.values() for c in clusters]}
  return [Pool(tuple(s for group in clusters for s in group), tuple(clusters))
          for clusters in pools.values()]


def _item_pools(cells: Sequence[Stratum], items: Sequence[int], members: list[int],
                min_stratum_items: int) -> list[Pool]:
  """Cells pooled, level by level, until each pool has `min_stratum_items` items; what is left
  after the last level (fewer items than that in the whole dataset's remaining cells) joins the
  pool whose cells share the most leading fields with it (the smallest such pool)."""
  pools: list[list[int]] = []
  left = list(members)
  for level in _POOL_LEVELS:
    found: dict[tuple[str, ...], list[int]] = {}
    for s in left:
      found.setdefault(tuple(cells[s][:level]), []).append(s)
    left = []
    for group in found.values():
      if sum(items[s] for s in group) >= min_stratum_items:
        pools.append(group)
      else:
        left += group
  if left and pools:
    def shared(pool: list[int]) -> int:
      same = [a == b for a, b in zip(cells[pool[0]], cells[left[0]])]
      return same.index(False) if False in same else len(same)
    nearest = max(range(len(pools)), key=lambda p: (shared(pools[p]),
                                                    -sum(items[s] for s in pools[p])))
    pools[nearest] = pools[nearest] + left
  elif left:
    pools.append(left)
  return [Pool(tuple(sorted(pool))) for pool in pools]


@dataclasses.dataclass(frozen=True)
class StratifiedSums:
  """Per-cell sums of named per-item values: row 0 the data, rows 1.. the resamples; `draws`,
  how many times each cell's group was drawn (1 for cells drawn by items, and in row 0).
  Columns that are 0 for every item (`zero`: a dataset's gold-pair columns where it has none)
  are not stored: their sums are 0 in every row. `clustered`: the cells with a group were drawn
  as whole groups (`design`)."""
  strata: tuple[Stratum, ...]
  columns: tuple[str, ...]
  table: np.ndarray  # [1 + n_resamples, S, V]
  draws: np.ndarray  # [1 + n_resamples, S]
  zero: tuple[str, ...] = ()
  clustered: bool = False

  def units(self, items: str, where: Callable[[Stratum], bool] | None = None) -> float:
    """The resampling units under the cells `where` accepts that hold items of column `items`
    (a count per item): the items, except that where groups are drawn whole each group with such
    items is one unit (StereoSet's control accuracy rests on its terms, not its sentences)."""
    by_items, groups = 0.0, set()
    for stratum, count in zip(self.strata, self._rows(items)[0]):
      if count > 0 and (where is None or where(stratum)):
        if self.clustered and stratum.group:
          groups.add(stratum.group)
        else:
          by_items += float(count)
    return by_items + len(groups)

  def _rows(self, column: str) -> np.ndarray:
    """One column's sums. # [1 + B, S]"""
    if column in self.zero:
      return np.zeros(self.table.shape[:2])
    return self.table[:, :, self.columns.index(column)]

  def total(self, column: str, where: Callable[[Stratum], bool] | None = None) -> np.ndarray:
    """The sum of `column` over the cells `where` accepts (all by default). # [1 + B]"""
    rows = self._rows(column)                                              # [1 + B, S]
    if where is None:
      return rows.sum(axis=1)
    keep = np.fromiter((bool(where(s)) for s in self.strata), dtype=bool, count=len(self.strata))
    return rows[:, keep].sum(axis=1)

  def _membership(self, field: str, where) -> tuple[list[str], np.ndarray]:
    """The distinct values of a cell field among the cells `where` accepts (first-seen order), and
    which cell holds which. -> (values, # [S, G] of 0 and 1)"""
    keep = [where is None or bool(where(s)) for s in self.strata]
    groups = list(dict.fromkeys(getattr(s, field) for s, k in zip(self.strata, keep) if k))
    code = {g: i for i, g in enumerate(groups)}
    membership = np.zeros((len(self.strata), len(groups)))                # [S, G]
    for i, (s, k) in enumerate(zip(self.strata, keep)):
      if k:
        membership[i, code[getattr(s, field)]] = 1.0
    return groups, membership

  def grouped(self, column: str, field: str,
              where: Callable[[Stratum], bool] | None = None) -> tuple[list[str], np.ndarray]:
    """Sums of `column` per distinct value of a cell field. -> (values, # [1 + B, G])"""
    groups, membership = self._membership(field, where)
    return groups, self._rows(column) @ membership

  def group_weights(self, field: str,
                    where: Callable[[Stratum], bool] | None = None) -> np.ndarray:
    """How many times each value of a cell field was drawn, for a mean over them: its cells'
    draws over their count (1 in row 0, and always where cells are drawn by items); in the order
    of `grouped`. # [1 + B, G]"""
    _, membership = self._membership(field, where)
    drawn = self.draws @ membership
    return drawn / drawn[0]

  def values(self, field: str) -> list[str]:
    """The distinct values of one cell field, in first-seen order."""
    return list(dict.fromkeys(getattr(s, field) for s in self.strata))


Columns = Mapping[str, np.ndarray]  # a per-item value by name, each # [n]


def stratified_sums(columns: Columns, strata: Columns, n_resamples: int,
                    rng: np.random.Generator, clustered: bool = False) -> StratifiedSums:
  """Resamples items (`design`) and sums each column per cell and resample.

  `strata` gives each `Stratum` field as an array [N] of str (a field left out is '')."""
  return stratified_sums_in_chunks([(columns, strata)], n_resamples, rng, clustered)


def cells_of(strata: Columns, n: int) -> tuple[list[tuple[str, ...]], np.ndarray]:
  """The distinct cells of n items, in order of their first item, and each item's cell.
  -> (cells, # [n] int64)"""
  code: dict[tuple[str, ...], int] = {}
  fields = [strata.get(f, [""] * n) for f in Stratum._fields]
  cell_of_item = np.fromiter((code.setdefault(tuple(map(str, k)), len(code))
                              for k in zip(*fields)), dtype=np.int64, count=n)      # [n]
  return list(code), cell_of_item


def stratified_sums_in_chunks(chunks: Iterable[tuple[Columns, Columns]], n_resamples: int,
                              rng: np.random.Generator,
                              clustered: bool = False) -> StratifiedSums:
  """`stratified_sums` of the items of all `chunks` ((columns, strata) of some items each, the
  same columns in every chunk), made a chunk at a time: what is kept between chunks is each
  cell's distinct rows and their counts, so the items' columns of one chunk are all that
  exist at once. The cells come in order of their first item, their distinct rows in
  lexicographic order, as if all items were one chunk: the same resamples."""
  names: tuple[str, ...] | None = None
  found: dict[tuple[str, ...], list[tuple[np.ndarray, np.ndarray]]] = {}
  for columns, strata in chunks:
    names = tuple(columns) if names is None else names
    values = np.stack([np.asarray(columns[c], dtype=np.float64) for c in names], axis=1)  # [n, V]
    cells, cell_of_item = cells_of(strata, values.shape[0])
    order = np.argsort(cell_of_item, kind="stable")
    bounds = np.searchsorted(cell_of_item[order], np.arange(len(cells) + 1))
    for s, key in enumerate(cells):
      rows = found.setdefault(key, [])
      rows.append(distinct_rows(values[order[bounds[s]:bounds[s + 1]]]))                 # [n_s, V]
      if len(rows) > 1:  # merged as they come, so a cell keeps one set of distinct rows
        rows[:] = [distinct_rows(np.concatenate([r[0] for r in rows]),
                                 np.concatenate([r[1] for r in rows]))]
  if names is None:
    raise ValueError("stratified_sums_in_chunks needs at least one chunk")
  rows = [CellRows(distinct[None], copies[None]) for ((distinct, copies),) in found.values()]
  strata = tuple(Stratum(*k) for k in found)
  rows, kept, zero = _without_zero_columns(rows, names)
  table, draws = resample(strata, rows, n_resamples, rng, clustered)
  return StratifiedSums(strata=strata, columns=kept, table=table[0], draws=draws[0], zero=zero,
                        clustered=clustered)


def _without_zero_columns(rows: Sequence[CellRows], names: Sequence[str]
                          ) -> tuple[list[CellRows], tuple[str, ...], tuple[str, ...]]:
  """The cells' rows without the columns that are 0 for every item, and the names of the kept
  and of the dropped columns."""
  nonzero = np.zeros(len(names), dtype=bool)
  for cell in rows:
    nonzero |= (cell.distinct != 0).any(axis=(0, 1))
  if nonzero.all():
    return list(rows), tuple(names), ()
  return ([CellRows(cell.distinct[:, :, nonzero], cell.copies) for cell in rows],
          tuple(n for n, k in zip(names, nonzero) if k),
          tuple(n for n, k in zip(names, nonzero) if not k))


def resampled_sums_batched(columns: Columns, strata: Columns, n_resamples: int,
                           rng: np.random.Generator, clustered: bool = False,
                           min_stratum_items: int = MIN_STRATUM_ITEMS) -> StratifiedSums:
  """The resampled sums of R replicate data sets of the same n items at once, each drawn as a
  metrics run draws one (`design`): `columns` each # [R, n]; `strata` the items' cell fields
  (as `stratified_sums`). The sums' rows are the replicates' one after the other: replicate r's
  data and resamples are rows r (1 + B) .. (r + 1) (1 + B) - 1."""
  names = tuple(columns)
  values = np.stack([np.asarray(columns[c], dtype=np.float64) for c in names], axis=2)
  n_replicates, n, _ = values.shape
  cells, cell_of_item = cells_of(strata, n)
  rows = [CellRows.of_replicates(values[:, cell_of_item == s]) for s in range(len(cells))]
  rows, kept, zero = _without_zero_columns(rows, names)
  strata_tuple = tuple(Stratum(*k) for k in cells)
  table, draws = resample(strata_tuple, rows, n_resamples, rng, clustered, min_stratum_items)
  flat = n_replicates * (1 + n_resamples)
  return StratifiedSums(strata_tuple, kept, table.reshape(flat, len(cells), len(kept)),
                        draws.reshape(flat, len(cells)), zero, clustered)


# Multinomial counts drawn at once in `_draw_items` (int64, then float64): 8 MiB each.
_COUNTS_BLOCK = 1 << 20


def resample(cells: Sequence[Stratum], rows: Sequence[CellRows], n_resamples: int,
             rng: np.random.Generator, clustered: bool = False,
             min_stratum_items: int = MIN_STRATUM_ITEMS) -> tuple[np.ndarray, np.ndarray]:
  """The sums of each cell's values (`rows`, R replicates each) over the data and over
  `n_resamples` resamples drawn by `design`. -> (table # [R, 1 + B, S, V], draws # [R, 1 + B, S])

  The table is kept column-major ([V, R, 1 + B, S] in memory, returned as a view in the order
  above): a statistic reads one column of every row and cell at a time (`total`, `grouped`),
  which is then one contiguous block, and a caller can merge the replicates' rows into one axis
  without a copy."""
  n_replicates, _, n_columns = rows[0].distinct.shape
  by_column = np.empty((n_columns, n_replicates, 1 + n_resamples, len(cells)))
  draws = np.ones((n_replicates, 1 + n_resamples, len(cells)))
  for s, cell in enumerate(rows):
    by_column[:, :, 0, s] = cell.sums().T
  for pool in design(cells, [r.items for r in rows], clustered, min_stratum_items):
    if pool.clusters is None:
      _draw_items(pool, rows, n_resamples, rng, by_column)
    else:
      _draw_clusters(pool, n_resamples, rng, by_column, draws)
  return np.moveaxis(by_column, 0, -1), draws


def _draw_items(pool: Pool, rows: Sequence[CellRows], n_resamples: int,
                rng: np.random.Generator, by_column: np.ndarray) -> None:
  """Resamples of the pool's n items into `by_column[:, :, 1:, cells]` ([V, R, 1 + B, S]).

  Drawing n items with replacement from the pool is drawing multinomial counts over its U
  distinct rows (per replicate) with probabilities c_u / n: the same distribution, at a cost of U
  instead of n per resample. Per-item values here are mostly counts and outcomes in {0, 1/2, 1},
  so U stays small however many items there are; continuous values (the counterfactual swaps'
  reward changes) make U the items, so the counts are drawn a block of resamples at a time, at
  most `_COUNTS_BLOCK` of them at once (the same draws as all at once: the generator makes them
  row by row)."""
  parts = [rows[s] for s in pool.cells]
  distinct = np.concatenate([p.distinct for p in parts], axis=1)            # [R, U, V]
  copies = np.concatenate([p.copies for p in parts], axis=1)                # [R, U]
  bounds = np.cumsum([0] + [p.copies.shape[1] for p in parts])
  n = int(copies[0].sum())
  n_replicates, width, _ = distinct.shape
  block = max(1, _COUNTS_BLOCK // max(1, width * n_replicates))
  for start in range(0, n_resamples, block):
    size = min(block, n_resamples - start)
    counts = rng.multinomial(n, copies / n, size=(size, n_replicates)).astype(np.float64)
    for k, s in enumerate(pool.cells):
      part = slice(bounds[k], bounds[k + 1])
      by_column[:, :, 1 + start:1 + start + size, s] = np.einsum(
          "bru,ruv->vrb", counts[:, :, part], distinct[:, part])


def _draw_clusters(pool: Pool, n_resamples: int, rng: np.random.Generator,
                   by_column: np.ndarray, draws: np.ndarray) -> None:
  """Resamples of the pool's groups, drawn whole: as many draws as groups, with replacement; a
  group's cells' sums are their data's times its draws. Into `by_column[:, :, 1:, cells]` and
  `draws[:, 1:, cells]`."""
  n_clusters = len(pool.clusters)
  n_replicates = draws.shape[0]
  counts = rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters),
                           size=(n_resamples, n_replicates)).astype(np.float64)    # [B, R, T]
  cells = np.asarray([s for cluster in pool.clusters for s in cluster])           # [S']
  cluster_of = np.repeat(np.arange(n_clusters), [len(c) for c in pool.clusters])   # [S']
  order = np.argsort(cells)
  cells, cluster_of = cells[order], cluster_of[order]
  if cells[-1] - cells[0] + 1 == cells.size:  # the usual case: a slice, not a fancy index (slow)
    cells = slice(int(cells[0]), int(cells[-1]) + 1)
  per_cell = np.moveaxis(counts[:, :, cluster_of], 0, 1)                         # [R, B, S']
  draws[:, 1:, cells] = per_cell
  by_column[:, :, 1:, cells] = per_cell[None] * by_column[:, :, :1, cells]
