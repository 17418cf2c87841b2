"""Joining scores to items and pairs: rewards per candidate, pair outcomes, selections.

Choices docs/spec.md leaves open, written down here:
- A pair's outcome is 1 when r(chosen) > r(rejected), 1/2 when they are equal (exact float
  equality of the stored rewards), 0 otherwise; every rate is a mean of outcomes, so ties count 1/2.
- An item's selection is its argmax reward. When m candidates share the top reward each counts 1/m
  (the expected value of a uniform tie-break), the same rule as the 1/2 for tied pairs, so that a
  model that cannot tell candidates apart shows no position preference (argmax's first index would
  always pick candidate 0).
- An item counts as scored only when every one of its candidates has a reward. Unscored items are
  an error unless `allow_missing`, which drops them with their pairs and records the coverage.
- Scores for an item id that is not in the items table, a candidate index out of range or a
  repeated (item, candidate) are errors: they mean the scores belong to another conversion.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import zlib
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from socialrm_jax.base import tables
from socialrm_jax.analysis.tables import item_ids
from socialrm_jax.analysis.tables.item_ids import IdArray
from socialrm_jax.analysis.tables.categorical import Categorical, Coder, smallest_code_dtype
from socialrm_jax.analysis.tables.reward_tables import Scores
from socialrm_jax.base.errors import InputError


def fit_half(item_ids: Sequence[str]) -> np.ndarray:
  """True for items whose pairs fit the temperature, from a hash of the id (the rest report ECE:
  `metrics.calibration`). # [N] bool"""
  out = np.empty(len(item_ids), dtype=bool)
  for start in range(0, len(item_ids), 1 << 16):  # a chunk of the ids as Python strings at once
    out[start:start + (1 << 16)] = [zlib.crc32(i.encode()) & 1 == 0
                                    for i in item_ids[start:start + (1 << 16)]]
  return out


@dataclasses.dataclass(frozen=True)
class Scored:
  """Scored items and their pairs as arrays; N items, K the most candidates of any item, P pairs,
  in item order (an item's in their order in the pairs table). No texts: `evidence` reads the
  few it shows from the items table again. Columns of a few distinct strings are `Categorical`s
  (a code an item)."""
  item: np.ndarray                 # [N] int32 position in the items table
  fit_half: np.ndarray             # [N] bool: the item's gold pairs fit the temperature
  ids: IdsAt                       # the ids of items by their positions in the items table
  dataset: Categorical             # [N]
  domain: Categorical              # [N]
  subset: Categorical              # [N]
  context_condition: Categorical   # [N] ('' when null)
  template: Categorical            # [N] ('' when null)
  group: Categorical               # [N] its dataset analysis's stratum group ('' when none)
  facts: Categorical               # [N] its dataset analysis's item facts ('' when none)
  roles: Categorical               # [N, K] ('' past an item's candidates)
  desirability: np.ndarray         # [N, K] int8 (0 past an item's candidates)
  valid: np.ndarray                # [N, K] bool: the item has this candidate
  rewards: np.ndarray              # [N, K] float64 (-inf past an item's candidates)
  candidate_length: np.ndarray     # [N, K] characters (the narrowest integer type)
  pair_item: np.ndarray            # [P] int32 index into items
  pair_chosen: np.ndarray          # [P] candidate index (int8 below 128 candidates)
  pair_rejected: np.ndarray        # [P] candidate index (as pair_chosen)
  pair_source: Categorical         # [P] gold | directional | control
  coverage: dict[str, Any]

  @property
  def n_items(self) -> int:
    return self.item.size

  def ids_of(self, index: np.ndarray) -> list[str]:
    """The ids of items `index` [n] (read when asked: no id is kept here)."""
    return self.ids(self.item[index])

  def selection(self, index: np.ndarray) -> np.ndarray:
    """The selections of items `index` (`selection_weights`), made when asked: an [N, K] float
    array less to keep. # [n, K], rows sum to 1"""
    return selection_weights(self.rewards[index], self.valid[index])

  def _pair_rewards(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    item = self.pair_item[pairs]
    return (self.rewards[item, self.pair_chosen[pairs]],
            self.rewards[item, self.pair_rejected[pairs]])

  def reward_margin(self, pairs: np.ndarray, dtype=np.float64) -> np.ndarray:
    """r(chosen) - r(rejected) of pairs `pairs` (indices, or a [P] mask; `pair_chunks`), kept
    as `dtype`. # [p]"""
    out = np.empty(int(pairs.sum()) if pairs.dtype == bool else len(pairs), dtype)
    start = 0
    for part in pair_chunks(pairs):
      chosen, rejected = self._pair_rewards(part)
      out[start:start + part.size] = chosen - rejected
      start += part.size
    return out

  def outcome(self, pairs: np.ndarray) -> np.ndarray:
    """`pair_outcome` of pairs `pairs` (indices or a [P] mask), from the rewards: 1, 1/2, 0.
    # [p]"""
    return pair_outcome(*self._pair_rewards(pairs))

  def pairs_of(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of items `index` [n], each item's in table order, and each pair's item as a
    place in `index`: found by binary search, the pairs being in item order.
    -> (pairs # [p], places # [p])"""
    first = np.searchsorted(self.pair_item, index, side="left")                # [n]
    counts = np.searchsorted(self.pair_item, index, side="right") - first      # [n]
    places = np.repeat(np.arange(index.size), counts)                          # [p]
    within = np.arange(places.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return first[places] + within, places


# Items or pairs a step takes at a time where its temporaries grow with them (per-item values,
# softmaxes, gathered rewards): so the metrics' memory does not grow with a dataset.
CHUNK = 1 << 16


def item_chunks(index: np.ndarray) -> Iterator[np.ndarray]:
  """Items `index` [n] in runs of `CHUNK` (one, empty, when there are none)."""
  for start in range(0, max(index.size, 1), CHUNK):
    yield index[start:start + CHUNK]


def pair_chunks(pairs: np.ndarray) -> Iterator[np.ndarray]:
  """Pairs given as indices or as a [P] bool mask, as index arrays of at most `CHUNK` pairs, in
  order."""
  for start in range(0, pairs.size, CHUNK):
    part = pairs[start:start + CHUNK]
    yield start + np.flatnonzero(part) if pairs.dtype == bool else part


def pair_outcome(chosen_reward: np.ndarray, rejected_reward: np.ndarray) -> np.ndarray:
  """1 when the chosen reward is higher, 1/2 on a tie, 0 otherwise."""
  return (chosen_reward > rejected_reward) + 0.5 * (chosen_reward == rejected_reward)


def selection_weights(rewards: np.ndarray, valid: np.ndarray) -> np.ndarray:
  """Each item's argmax as weights over candidates; tied maxima share the item's weight."""
  masked = np.where(valid, rewards, -np.inf)                        # [N, K]
  top = masked == masked.max(axis=1, keepdims=True)                 # [N, K]
  top &= valid
  return top / top.sum(axis=1, keepdims=True)


def _coverage(dataset: Categorical, scored: np.ndarray) -> dict[str, Any]:
  per_dataset: dict[str, dict[str, Any]] = {}
  for name in dataset.distinct():
    mine = dataset == name
    items, scored_items = int(mine.sum()), int((mine & scored).sum())
    per_dataset[name] = {"items": items, "scored_items": scored_items,
                         "share": scored_items / items}
  return {"complete": bool(scored.all()), "items": int(scored.size),
          "scored_items": int(scored.sum()), "datasets": per_dataset}


def _integers(values: Any, name: str, path, number: int | None) -> None:
  """A JSON table may hold anything where an integer belongs (NaN, infinity, "1", 1.5): an error
  naming the table and the row, before numpy turns it into a number or fails without one."""
  for value in values:
    if isinstance(value, bool) or not isinstance(value, int):
      raise InputError(f"{name} must be integers, not {value!r:.40}", path, number)


def checked_item(row: Mapping[str, Any], path=None, number: int | None = None) -> Mapping[str, Any]:
  """An items-table row, checked where the metrics need lists and integers; `path` and `number`
  (1-based) name the row in an error."""
  candidates, roles = row.get("candidates"), row.get("roles")
  if (not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates)
      or not isinstance(roles, list) or len(roles) != len(candidates)
      or not all(isinstance(r, str) for r in roles)):
    raise InputError("candidates must be a list of texts and roles a list of texts as long",
                     path, number)
  if not isinstance(row.get("desirability"), list) or len(row["desirability"]) != len(roles):
    raise InputError("desirability must be a list of integers, one per candidate", path, number)
  _integers(row["desirability"], "desirability", path, number)
  if "item_id" not in row:
    raise InputError("the row has no item_id", path, number)
  if not item_ids.is_id(row["item_id"]):
    raise InputError(f"item_id must be a text, not {row['item_id']!r:.40}", path, number)
  return row


# The ids of items by their positions in the items table: `ItemTable.ids_at`, or `ids_reader`,
# which reads them from the table's file when asked, so that no id need stay in memory.
IdsAt = Callable[[np.ndarray], list[str]]


def ids_reader(path) -> IdsAt:
  """`IdsAt` for the items table at `path`: one pass over its item_id column a call."""
  def ids_at(positions: np.ndarray) -> list[str]:
    positions = np.asarray(positions, dtype=np.int64)
    order = np.argsort(positions, kind="stable")
    out: list[str] = [""] * positions.size
    k = 0
    for position, row in enumerate(tables.iter_rows(path, "items", ("item_id",))):
      while k < positions.size and positions[order[k]] == position:
        out[order[k]] = row["item_id"]
        k += 1
      if k == positions.size:
        break
    return out
  return ids_at


# What a dataset's analysis reads of an items-table row, kept per item instead of the row: (its
# stratum group, its item facts); `dataset_analysis.Options.item_fields` asks each item's dataset
# analysis.
ItemFields = Callable[[Mapping[str, Any]], tuple[str, str]]


def no_fields(row: Mapping[str, Any]) -> tuple[str, str]:
  """The fields of an item whose dataset analysis reads nothing more of its row."""
  del row
  return "", ""


@dataclasses.dataclass(frozen=True)
class ItemTable:
  """The items table as the metrics keep it: one array per column they read, no texts, so a row
  lives only as long as its batch (`tables.BATCH_ROWS`). N items, K the most candidates (>= 2).
  Columns of a few distinct strings (dataset, roles, ...) are `Categorical`s; the ids an
  `IdArray`, found by `positions`."""
  item_id: IdArray                # [N]
  id_index: item_ids.IdIndex      # finds ids in item_id
  fit_half: np.ndarray            # [N] bool (`fit_half`)
  dataset: Categorical            # [N]
  domain: Categorical             # [N] ('' when null, as the next four)
  subset: Categorical             # [N]
  context_condition: Categorical  # [N]
  template: Categorical           # [N]
  group: Categorical              # [N]
  facts: Categorical              # [N]
  n_candidates: np.ndarray        # [N] int32
  roles: Categorical              # [N, K] ('' past an item's candidates)
  desirability: np.ndarray        # [N, K] int8 (0 past an item's candidates)
  candidate_length: np.ndarray    # [N, K] characters (0 past an item's candidates; `_narrowest`)

  def positions(self, ids: Any) -> np.ndarray:
    """Where each id is in the table, -1 when absent. # [Q] int64"""
    return self.id_index.positions(ids)

  def ids_at(self, positions: np.ndarray) -> list[str]:
    """The ids of the items at `positions` (`IdsAt`)."""
    return self.item_id[np.asarray(positions, dtype=np.int64)].tolist()


@dataclasses.dataclass(frozen=True)
class PairTable:
  """The pairs table as the join reads it: P pairs, their items as positions in an `ItemTable`,
  in item order (an item's in their order in the table), as `Scored` keeps them."""
  item: np.ndarray       # [P] int32
  chosen: np.ndarray     # [P] candidate index (the narrowest integer type that holds them)
  rejected: np.ndarray   # [P] candidate index (as chosen)
  source: Categorical    # [P] gold | directional | control


ITEM_TEXTS = ("dataset", "domain", "subset", "context_condition", "template")
# The [N] `Categorical` columns an `ItemTable` and a `Scored` share.
CATEGORICALS = (*ITEM_TEXTS, "group", "facts")
# The [N, K] columns (0 past an item's candidates: for roles, the code of '').
PADDED = ("roles", "desirability", "candidate_length")
# The columns of the items table the metrics read, the dataset analyses' hooks included
# (`ItemFields`): not the prompts, which a row needs only while it is shown (`evidence`).
ITEM_COLUMNS = ("item_id", "dataset", "domain", "subset", "context_condition", "template",
                "candidates", "roles", "desirability", "attributes")
# The columns of the pairs table the join reads.
PAIR_COLUMNS = ("pair_id", "item_id", "chosen_index", "rejected_index", "label_source")


def _padded(values: np.ndarray, lengths: np.ndarray, k: int, dtype) -> np.ndarray:
  """Rows of `lengths` [n] values each, `values` one after the other, as one array [n, k], 0
  past each row's end."""
  out = np.zeros((lengths.size, k), dtype=dtype)
  starts = np.cumsum(lengths) - lengths
  row = np.repeat(np.arange(lengths.size), lengths)                      # [sum(lengths)]
  out[row, np.arange(row.size) - starts[row]] = values
  return out


def _narrowest(lengths: np.ndarray) -> np.ndarray:
  """Lengths (>= 0) in the narrowest integer type that holds them: the differences of two fit
  it too, which is all `confounds` computes with them."""
  return lengths.astype(smallest_code_dtype(int(lengths.max(initial=0)) + 1))


class _ItemColumns:
  """Builds an `ItemTable` from rows added one at a time, a batch of rows (`tables.BATCH_ROWS`)
  made into arrays at a time, so that a row's lists go with its batch: ids as an `IdArray`,
  text columns as `Categorical` codes."""

  def __init__(self, fields: ItemFields):
    self.fields = fields
    self.coders = {name: Coder() for name in (*CATEGORICALS, "roles")}
    self.coders["roles"].codes([""])  # code 0, the padding past an item's candidates
    self.batch: list[tuple] = []
    self.blocks: dict[str, list] = {
        name: [] for name in ("item_id", "n_candidates", *CATEGORICALS, *PADDED)}
    self.files: list[tuple[int, Any]] = []  # (position of a file's first row, the file)
    self.size = 0

  def add(self, row: Mapping[str, Any], path=None, number: int | None = None) -> None:
    checked_item(row, path, number)
    if number == 1 or not self.files:
      self.files.append((self.size, path))
    self.size += 1
    texts = []
    for name in ITEM_TEXTS:
      value = row.get(name) or ""
      if not isinstance(value, str):
        raise InputError(f"{name} must be a text, not {value!r:.40}", path, number)
      texts.append(value)
    self.batch.append((row["item_id"], *texts, *self.fields(row), row["roles"],
                       row["desirability"], [len(c) for c in row["candidates"]]))
    if len(self.batch) == tables.BATCH_ROWS:
      self._flush()

  def _where(self, position: int) -> tuple[Any, int]:
    """(file, 1-based row) of the row at `position` in the table."""
    start, path = next((s, p) for s, p in reversed(self.files) if s <= position)
    return path, position - start + 1

  def _flush(self) -> None:
    if not self.batch:
      return
    columns = list(zip(*self.batch))
    first = self.size - len(self.batch)
    self.batch = []
    ids, texts = columns[0], columns[1:1 + len(CATEGORICALS)]
    roles, desirability, lengths = columns[1 + len(CATEGORICALS):]
    n_candidates = np.fromiter(map(len, roles), np.int32, len(roles))                 # [b]
    k = int(n_candidates.max())
    flat = np.fromiter(itertools.chain.from_iterable(desirability), np.int64,
                       int(n_candidates.sum()))
    if flat.size and (flat.min() < -128 or flat.max() > 127):
      bad = int(np.repeat(np.arange(n_candidates.size), n_candidates)[
          np.flatnonzero((flat < -128) | (flat > 127))[0]])
      raise InputError(f"desirability {desirability[bad]} is out of range", *self._where(
          first + bad))
    self.blocks["item_id"].append(IdArray.of(ids))
    self.blocks["n_candidates"].append(n_candidates)
    for name, values in zip(CATEGORICALS, texts):
      self.blocks[name].append(self.coders[name].codes(list(values)))
    self.blocks["roles"].append(_padded(self.coders["roles"].codes(
        list(itertools.chain.from_iterable(roles))), n_candidates, k, np.int32))
    self.blocks["desirability"].append(_padded(flat, n_candidates, k, np.int8))
    self.blocks["candidate_length"].append(_padded(np.fromiter(
        itertools.chain.from_iterable(lengths), np.int32, flat.size), n_candidates, k, np.int32))

  def _refuse_repeated_ids(self, index: item_ids.IdIndex) -> None:
    """A repeated id is an error naming the file and row of its second occurrence (the first
    in table order that repeats an earlier one)."""
    position = index.first_repeat()
    if position is not None:
      raise InputError(f"item_id {str(index.ids[position])!r} appears twice in the items table",
                       *self._where(position))

  def finish(self) -> ItemTable:
    self._flush()
    blocks = self.blocks
    n_candidates = np.concatenate(blocks["n_candidates"] or [np.zeros(0, np.int32)])
    item_id = IdArray.concatenate(blocks.pop("item_id"))
    id_index = item_ids.IdIndex.of(item_id)
    self._refuse_repeated_ids(id_index)
    k = max([2, *(b.shape[1] for b in blocks["roles"])])
    padded = {}
    for name in PADDED:
      dtype = blocks[name][0].dtype if blocks[name] else np.int32
      padded[name] = np.zeros((n_candidates.size, k), dtype)
      start = 0
      for block in blocks.pop(name):
        padded[name][start:start + len(block), :block.shape[1]] = block
        start += len(block)
    roles = self.coders["roles"].finish([padded.pop("roles")])
    return ItemTable(item_id=item_id, id_index=id_index, fit_half=fit_half(item_id),
                     **{name: self.coders[name].finish(blocks[name]) for name in CATEGORICALS},
                     n_candidates=n_candidates, roles=roles,
                     desirability=padded["desirability"].astype(np.int8),
                     candidate_length=_narrowest(padded["candidate_length"]))


def _pair_block(rows: Sequence[Mapping[str, Any]], items: ItemTable, path, first_number: int,
                coder: Coder) -> tuple[np.ndarray, ...]:
  """A batch of pairs-table rows (numbered from `first_number`) as (item, chosen, rejected,
  source codes of `coder`) arrays, checked: integers for indices, a known item, candidates in
  range."""
  for number, row in enumerate(rows, start=first_number):
    _integers((row.get("chosen_index"), row.get("rejected_index")),
              "chosen_index and rejected_index", path, number)
  ids = [row.get("item_id") for row in rows]
  text = np.fromiter(map(item_ids.is_id, ids), bool, len(ids))
  item = np.where(text, items.positions([i if t else "" for i, t in zip(ids, text)]), -1)
  if (item < 0).any():
    j = int(np.flatnonzero(item < 0)[0])
    raise InputError(f"pair {rows[j].get('pair_id')!r} names item {rows[j].get('item_id')!r}, "
                     "which is not in the items table", path, first_number + j)
  chosen = np.fromiter((row["chosen_index"] for row in rows), np.int64, len(rows))
  rejected = np.fromiter((row["rejected_index"] for row in rows), np.int64, len(rows))
  limit = items.n_candidates[item]
  bad = (chosen < 0) | (chosen >= limit) | (rejected < 0) | (rejected >= limit)
  if bad.any():
    j = int(np.flatnonzero(bad)[0])
    raise InputError(f"pair {rows[j].get('pair_id')!r} has a candidate index out of range",
                     path, first_number + j)
  sources = [row.get("label_source") for row in rows]
  bad = [j for j, label in enumerate(sources) if label is not None and not isinstance(label, str)]
  if bad:
    raise InputError(f"label_source must be a text, not {sources[bad[0]]!r:.40}", path,
                     first_number + bad[0])
  source = coder.codes(sources)
  return item.astype(np.int32), chosen.astype(np.int32), rejected.astype(np.int32), source


def _pair_table(blocks: list[tuple[np.ndarray, ...]], coder: Coder) -> PairTable:
  if not blocks:
    empty = np.zeros(0, np.int32)
    return PairTable(empty, empty, empty, coder.finish([]))
  item, chosen, rejected, source = (np.concatenate(c) for c in zip(*blocks))
  if np.any(item[1:] < item[:-1]):  # put in item order once, for every join
    order = np.argsort(item, kind="stable")
    item, chosen, rejected, source = item[order], chosen[order], rejected[order], source[order]
  index = smallest_code_dtype(int(max(chosen.max(), rejected.max())) + 1)  # few candidates
  return PairTable(item, chosen.astype(index), rejected.astype(index), coder.finish([source]))


def _batches(rows: Iterable[Mapping[str, Any]]) -> Iterable[tuple[int, list]]:
  """(number of the first row, rows) per `tables.BATCH_ROWS` rows."""
  batch: list = []
  first = 1
  for row in rows:
    batch.append(row)
    if len(batch) == tables.BATCH_ROWS:
      yield first, batch
      first, batch = first + len(batch), []
  if batch:
    yield first, batch


def item_table(rows: Iterable[Mapping[str, Any]], fields: ItemFields) -> ItemTable:
  """Items-table rows (in memory) as an `ItemTable`."""
  columns = _ItemColumns(fields)
  for number, row in enumerate(rows, start=1):
    columns.add(row, None, number)
  return columns.finish()


def pair_table(rows: Sequence[Mapping[str, Any]], items: ItemTable) -> PairTable:
  """Pairs-table rows (in memory; whole or only the join's columns) as a `PairTable`."""
  coder = Coder()
  return _pair_table([_pair_block(batch, items, None, first, coder)
                      for first, batch in _batches(rows)], coder)


def read_items(path, fields: ItemFields) -> ItemTable:
  """The items table at `path`, read in batches (`tables.iter_rows`), each row checked."""
  columns = _ItemColumns(fields)
  for part in tables.table_files(path, "items"):
    for number, row in enumerate(tables.iter_rows(part, "items", ITEM_COLUMNS), start=1):
      columns.add(row, part, number)
  table = columns.finish()
  tables.release_unused_memory()
  return table


def read_pairs(path, items: ItemTable) -> PairTable:
  """The pairs table at `path`, read in batches (only the columns the join reads), checked
  against `items`."""
  coder = Coder()
  out = _pair_table([_pair_block(batch, items, part, first, coder)
                     for part in tables.table_files(path, "pairs")
                     for first, batch in _batches(tables.iter_rows(part, "pairs",
                                                                   PAIR_COLUMNS))], coder)
  tables.release_unused_memory()
  return out


def _add_rewards(rewards: np.ndarray, items: ItemTable, scores: Scores) -> None:
  """Puts one part of a scores set into `rewards` [N * K] (NaN where unscored so far), checked:
  known items, candidates in range, no (item, candidate) scored twice."""
  item = items.positions(scores.names)[scores.item]                         # [R]
  unknown = np.flatnonzero(item < 0)
  if unknown.size:
    raise InputError(
        f"{unknown.size} score rows name items that are not in the items table (first: "
        f"{scores.row_id(unknown[0])!r}); score the same conversion you evaluate", scores.path,
        scores.row_number(int(unknown[0])))
  n_candidates = items.n_candidates
  out_of_range = np.flatnonzero((scores.candidate < 0) | (scores.candidate >= n_candidates[item]))
  if out_of_range.size:
    i = out_of_range[0]
    raise InputError(f"candidate {scores.candidate[i]} is out of range for item "
                     f"{scores.row_id(i)!r} ({n_candidates[item[i]]} candidates)", scores.path,
                     scores.row_number(int(i)))
  k = items.roles.shape[1]
  flat = item * k + scores.candidate                                        # [R]
  del item
  ordered = np.sort(flat)
  twice = np.flatnonzero(ordered[1:] == ordered[:-1])
  again = ordered[twice] if twice.size else flat[~np.isnan(rewards[flat])]  # in part, or before
  if again.size:
    repeated = int(again[0])
    raise InputError(f"item {str(items.item_id[repeated // k])!r} candidate {repeated % k} is "
                     "scored more than once", scores.path)
  rewards[flat] = scores.reward


def _reward_matrix(items: ItemTable, parts: Iterable[Scores]) -> tuple[np.ndarray, str]:
  """Rewards [N, K], NaN where unscored, from a scores set's parts, and the set's path."""
  n, k = items.roles.shape
  rewards = np.full(n * k, np.nan)
  paths = []
  for part in parts:
    _add_rewards(rewards, items, part)
    paths.append(part.path)
  path = os.path.commonpath(paths) if len(set(paths)) > 1 else (paths or [""])[0]
  return rewards.reshape(n, k), path


def join(items: ItemTable | Sequence[Mapping[str, Any]],
         pairs: PairTable | Sequence[Mapping[str, Any]], scores: Scores | Iterable[Scores],
         allow_missing: bool = False, fields: ItemFields | None = None,
         ids: IdsAt | None = None) -> Scored:
  """Joins one scores set to the items and pairs tables: `ItemTable` and `PairTable`, or their
  rows, the items' then with their dataset analyses' `fields`
  (`dataset_analysis.Options.item_fields`). The scores are `Scores`, or a set's parts
  (`reward_tables.score_parts`), read one at a time. `ids`: where the scored items find their ids
  later (`IdsAt`; the items table's own by default)."""
  if not isinstance(items, ItemTable):
    if fields is None:
      raise ValueError("items given as rows need their dataset analyses' fields "
                       "(Options.item_fields), or pairs.no_fields where no dataset analysis "
                       "reads its rows")
    items = item_table(items, fields)
  if not isinstance(pairs, PairTable):
    pairs = pair_table(pairs, items)
  rewards, path = _reward_matrix(items, [scores] if isinstance(scores, Scores) else scores)
  k = rewards.shape[1]
  valid = np.arange(k)[None, :] < items.n_candidates[:, None]       # [N, K]
  scored = ~np.any(np.isnan(rewards) & valid, axis=1)                # [N]
  coverage = _coverage(items.dataset, scored)
  if not coverage["complete"] and not allow_missing:
    lacking = ", ".join(f"{name} {c['items'] - c['scored_items']} of {c['items']}"
                        for name, c in coverage["datasets"].items()
                        if c["scored_items"] < c["items"])
    raise InputError(
        f"scores are missing for {coverage['items'] - coverage['scored_items']} of "
        f"{coverage['items']} items ({lacking}); score them, or pass --allow_missing to "
        "compute on the scored items only", path)
  pair_item, chosen, rejected, source = pairs.item, pairs.chosen, pairs.rejected, pairs.source
  keep: slice | np.ndarray = slice(None)  # all scored: the items' arrays as views, not copies
  if not coverage["complete"]:  # (renumbering the kept items keeps the pairs in item order)
    keep = np.flatnonzero(scored)
    new_index = np.full(scored.size, -1, dtype=np.int32)
    new_index[keep] = np.arange(keep.size)
    in_scored = new_index[pair_item] >= 0
    pair_item = new_index[pair_item][in_scored]
    chosen, rejected, source = chosen[in_scored], rejected[in_scored], source[in_scored]
  coverage["pairs"] = int(pairs.item.size)
  coverage["scored_pairs"] = int(pair_item.size)
  rewards[~valid] = -np.inf
  valid, rewards = valid[keep], rewards[keep]
  return Scored(
      item=np.arange(scored.size, dtype=np.int32)[keep], fit_half=items.fit_half[keep],
      ids=items.ids_at if ids is None else ids,
      **{name: getattr(items, name)[keep] for name in (*CATEGORICALS, *PADDED)},
      valid=valid, rewards=rewards,
      pair_item=pair_item, pair_chosen=chosen, pair_rejected=rejected, pair_source=source,
      coverage=coverage)
