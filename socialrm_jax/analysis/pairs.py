"""Joining scores to items and pairs: rewards per candidate, pair outcomes, selections.

Choices SPEC leaves open, written down here:
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
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from socialrm_jax import tables
from socialrm_jax.analysis.scores import Scores, object_array
from socialrm_jax.errors import InputError


@dataclasses.dataclass(frozen=True)
class Scored:
  """Scored items and their pairs as arrays; N items, K the most candidates of any item, P pairs.
  No texts: `evidence` reads the few it shows from the items table again."""
  item_id: np.ndarray              # [N] object
  dataset: np.ndarray              # [N] object
  domain: np.ndarray               # [N] object
  subset: np.ndarray               # [N] object
  context_condition: np.ndarray    # [N] object ('' when null)
  template: np.ndarray             # [N] object ('' when null)
  group: np.ndarray                # [N] object: the plug-in's stratum group ('' when none)
  facts: np.ndarray                # [N] object: the plug-in's item facts ('' when none)
  roles: np.ndarray                # [N, K] object ('' past an item's candidates)
  desirability: np.ndarray         # [N, K] int8 (0 past an item's candidates)
  valid: np.ndarray                # [N, K] bool: the item has this candidate
  rewards: np.ndarray              # [N, K] float64 (-inf past an item's candidates)
  selection: np.ndarray            # [N, K] float64, rows sum to 1 (tied maxima share)
  candidate_length: np.ndarray     # [N, K] int64 characters
  pair_item: np.ndarray            # [P] int64 index into items
  pair_chosen: np.ndarray          # [P] int64 candidate index
  pair_rejected: np.ndarray        # [P] int64 candidate index
  pair_source: np.ndarray          # [P] object: gold | directional | control
  pair_outcome: np.ndarray         # [P] float64 in {0, 1/2, 1}
  coverage: dict[str, Any]

  @property
  def reward_margin(self) -> np.ndarray:
    """r(chosen) - r(rejected) per pair. # [P]"""
    return (self.rewards[self.pair_item, self.pair_chosen]
            - self.rewards[self.pair_item, self.pair_rejected])


def pair_outcome(chosen_reward: np.ndarray, rejected_reward: np.ndarray) -> np.ndarray:
  """1 when the chosen reward is higher, 1/2 on a tie, 0 otherwise."""
  return (chosen_reward > rejected_reward) + 0.5 * (chosen_reward == rejected_reward)


def selection_weights(rewards: np.ndarray, valid: np.ndarray) -> np.ndarray:
  """Each item's argmax as weights over candidates; tied maxima share the item's weight."""
  masked = np.where(valid, rewards, -np.inf)                        # [N, K]
  top = masked == masked.max(axis=1, keepdims=True)                 # [N, K]
  top &= valid
  return top / top.sum(axis=1, keepdims=True)


def lookup(index: dict[str, int], queries: Sequence[str]) -> np.ndarray:
  """Position of each query in `index`, -1 when absent. # [Q]"""
  return np.fromiter((index.get(q, -1) for q in queries), dtype=np.int64, count=len(queries))


def _coverage(dataset: np.ndarray, scored: np.ndarray) -> dict[str, Any]:
  per_dataset: dict[str, dict[str, Any]] = {}
  for name in dict.fromkeys(dataset):
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
      or not isinstance(roles, list) or len(roles) != len(candidates)):
    raise InputError("candidates must be a list of texts and roles a list as long", path, number)
  if not isinstance(row.get("desirability"), list):
    raise InputError("desirability must be a list of integers", path, number)
  _integers(row["desirability"], "desirability", path, number)
  if "item_id" not in row:
    raise InputError("the row has no item_id", path, number)
  return row


# What a dataset's plug-in reads of an items-table row, kept per item instead of the row: (its
# stratum group, its item facts); `hooks.Options.item_fields` asks each item's plug-in.
ItemFields = Callable[[Mapping[str, Any]], tuple[str, str]]


def no_fields(row: Mapping[str, Any]) -> tuple[str, str]:
  """The fields of an item whose plug-in reads nothing more of its row."""
  del row
  return "", ""


@dataclasses.dataclass(frozen=True)
class ItemTable:
  """The items table as the metrics keep it: one array per column they read, no texts, so a row
  lives only as long as its batch (`tables.BATCH_ROWS`). N items, K the most candidates (>= 2).
  Strings repeated across items (dataset, roles, ...) are one object each."""
  item_id: np.ndarray             # [N] object
  dataset: np.ndarray             # [N] object
  domain: np.ndarray              # [N] object ('' when null, as the next four)
  subset: np.ndarray              # [N] object
  context_condition: np.ndarray   # [N] object
  template: np.ndarray            # [N] object
  group: np.ndarray               # [N] object
  facts: np.ndarray               # [N] object
  n_candidates: np.ndarray        # [N] int64
  roles: np.ndarray               # [N, K] object ('' past an item's candidates)
  desirability: np.ndarray        # [N, K] int8 (0 past an item's candidates)
  candidate_length: np.ndarray    # [N, K] int64 characters (0 past an item's candidates)
  index: dict[Any, int]           # item id -> position


@dataclasses.dataclass(frozen=True)
class PairTable:
  """The pairs table as the join reads it: P pairs, their items as positions in an `ItemTable`."""
  item: np.ndarray       # [P] int64
  chosen: np.ndarray     # [P] int64 candidate index
  rejected: np.ndarray   # [P] int64 candidate index
  source: np.ndarray     # [P] object: gold | directional | control


ITEM_TEXTS = ("dataset", "domain", "subset", "context_condition", "template")
# The [N] columns an `ItemTable` and a `Scored` share.
ITEM_SCALARS = ("item_id", *ITEM_TEXTS, "group", "facts")
# The [N, K] columns: (fill past an item's candidates, dtype).
PADDED = {"roles": ("", object), "desirability": (0, np.int8), "candidate_length": (0, np.int64)}


def _padded(rows: Sequence[Sequence], k: int, fill, dtype) -> np.ndarray:
  """Rows of up to k values as one array [len(rows), k], `fill` past each row's end."""
  out = np.full((len(rows), k), fill, dtype=dtype)
  lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
  for length in np.unique(lengths):  # rows of one length convert in one call
    same = np.flatnonzero(lengths == length)
    if length:
      block = np.empty((same.size, length), dtype=dtype)
      block[:] = [rows[i] for i in same]
      out[same, :length] = block
  return out


class _ItemColumns:
  """Builds an `ItemTable` from rows added one at a time: the [N, K] columns are made into arrays
  a batch at a time, so that a row's lists go with its batch."""

  def __init__(self, fields: ItemFields):
    self.fields = fields
    self.index: dict[Any, int] = {}
    self.strings: dict[str, str] = {}  # one object per distinct string
    self.scalars: dict[str, list] = {name: [] for name in ITEM_SCALARS}
    self.batch: dict[str, list] = {name: [] for name in PADDED}
    self.blocks: dict[str, list[np.ndarray]] = {name: [] for name in PADDED}
    self.lengths: list[np.ndarray] = []  # each batch's candidate counts

  def _intern(self, value: Any) -> Any:
    return self.strings.setdefault(value, value) if isinstance(value, str) else value

  def add(self, row: Mapping[str, Any], path=None, number: int | None = None) -> None:
    checked_item(row, path, number)
    item_id = row["item_id"]
    if item_id in self.index:
      raise InputError(f"item_id {item_id!r} appears twice in the items table", path, number)
    self.index[item_id] = len(self.index)
    self.scalars["item_id"].append(item_id)
    for name in ITEM_TEXTS:
      self.scalars[name].append(self._intern(row.get(name) or ""))
    for name, value in zip(("group", "facts"), self.fields(row)):
      self.scalars[name].append(self._intern(value))
    self.batch["roles"].append([self._intern(r) for r in row["roles"]])
    self.batch["desirability"].append(row["desirability"])
    self.batch["candidate_length"].append([len(c) for c in row["candidates"]])
    if len(self.batch["roles"]) == tables.BATCH_ROWS:
      self._flush()

  def _flush(self) -> None:
    rows = self.batch["roles"]
    if rows:
      self.lengths.append(np.fromiter((len(r) for r in rows), np.int64, len(rows)))
      k = int(self.lengths[-1].max())
      for name, (fill, dtype) in PADDED.items():
        self.blocks[name].append(_padded(self.batch[name], k, fill, dtype))
        self.batch[name] = []

  def finish(self) -> ItemTable:
    self._flush()
    k = max([2, *(b.shape[1] for b in self.blocks["roles"])])
    n_candidates = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
    padded = {}
    for name, (fill, dtype) in PADDED.items():
      padded[name] = np.full((n_candidates.size, k), fill, dtype)
      start = 0
      for block in self.blocks.pop(name):
        padded[name][start:start + len(block), :block.shape[1]] = block
        start += len(block)
    return ItemTable(**{name: object_array(values)
                        for name, values in self.scalars.items()},
                     n_candidates=n_candidates, index=self.index, **padded)


def _pair_block(rows: Sequence[Mapping[str, Any]], items: ItemTable, path,
                first_number: int) -> tuple[np.ndarray, ...]:
  """A batch of pairs-table rows (numbered from `first_number`) as (item, chosen, rejected,
  source) arrays, checked: integers for indices, a known item, candidates in range."""
  for number, row in enumerate(rows, start=first_number):
    _integers((row.get("chosen_index"), row.get("rejected_index")),
              "chosen_index and rejected_index", path, number)
  item = lookup(items.index, [row.get("item_id") for row in rows])
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
  source = object_array([row.get("label_source") for row in rows])
  return item, chosen, rejected, source


def _pair_table(blocks: list[tuple[np.ndarray, ...]]) -> PairTable:
  if not blocks:
    empty = np.zeros(0, np.int64)
    return PairTable(empty, empty, empty, np.zeros(0, object))
  item, chosen, rejected, source = (np.concatenate(c) for c in zip(*blocks))
  strings: dict[str, str] = {}
  source[:] = [strings.setdefault(s, s) if isinstance(s, str) else s for s in source]
  return PairTable(item, chosen, rejected, source)


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
  return _pair_table([_pair_block(batch, items, None, first) for first, batch in _batches(rows)])


def read_items(path, fields: ItemFields) -> ItemTable:
  """The items table at `path`, read in batches (`tables.iter_rows`), each row checked."""
  columns = _ItemColumns(fields)
  for part in tables.table_files(path, "items"):
    for number, row in enumerate(tables.iter_rows(part, "items"), start=1):
      columns.add(row, part, number)
  tables.release_unused_memory()
  return columns.finish()


def read_pairs(path, items: ItemTable) -> PairTable:
  """The pairs table at `path`, read in batches, checked against `items`."""
  out = _pair_table([_pair_block(batch, items, part, first)
                     for part in tables.table_files(path, "pairs")
                     for first, batch in _batches(tables.iter_rows(part, "pairs"))])
  tables.release_unused_memory()
  return out


def _reward_matrix(items: ItemTable, scores: Scores) -> np.ndarray:
  """Rewards [N, K], NaN where unscored."""
  item = lookup(items.index, scores.item_id)
  unknown = np.flatnonzero(item < 0)
  if unknown.size:
    raise InputError(
        f"{unknown.size} score rows name items that are not in the items table (first: "
        f"{scores.item_id[unknown[0]]!r}); score the same conversion you evaluate", scores.path)
  n_candidates = items.n_candidates
  out_of_range = np.flatnonzero((scores.candidate < 0) | (scores.candidate >= n_candidates[item]))
  if out_of_range.size:
    i = out_of_range[0]
    raise InputError(f"candidate {scores.candidate[i]} is out of range for item "
                     f"{scores.item_id[i]!r} ({n_candidates[item[i]]} candidates)", scores.path)
  n, k = items.roles.shape
  flat = item * k + scores.candidate
  times_scored = np.bincount(flat, minlength=n * k)
  if flat.size and times_scored.max() > 1:
    repeated = int(np.argmax(times_scored > 1))
    raise InputError(f"item {items.item_id[repeated // k]!r} candidate {repeated % k} is scored "
                     "more than once", scores.path)
  rewards = np.full(n * k, np.nan)
  rewards[flat] = scores.reward
  return rewards.reshape(n, k)


def join(items: ItemTable | Sequence[Mapping[str, Any]],
         pairs: PairTable | Sequence[Mapping[str, Any]], scores: Scores,
         allow_missing: bool = False, fields: ItemFields | None = None) -> Scored:
  """Joins one scores set to the items and pairs tables: `ItemTable` and `PairTable`, or their
  rows, the items' then with their plug-ins' `fields` (`hooks.Options.item_fields`)."""
  if not isinstance(items, ItemTable):
    if fields is None:
      raise ValueError("items given as rows need their plug-ins' fields (Options.item_fields), "
                       "or pairs.no_fields where no plug-in reads its rows")
    items = item_table(items, fields)
  if not isinstance(pairs, PairTable):
    pairs = pair_table(pairs, items)
  rewards = _reward_matrix(items, scores)
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
        "compute on the scored items only", scores.path)
  pair_item, chosen, rejected, source = pairs.item, pairs.chosen, pairs.rejected, pairs.source
  keep: slice | np.ndarray = slice(None)  # all scored: the items' arrays as views, not copies
  if not coverage["complete"]:
    keep = np.flatnonzero(scored)
    new_index = np.full(scored.size, -1, dtype=np.int64)
    new_index[keep] = np.arange(keep.size)
    in_scored = new_index[pair_item] >= 0
    pair_item = new_index[pair_item][in_scored]
    chosen, rejected, source = chosen[in_scored], rejected[in_scored], source[in_scored]
  coverage["pairs"] = int(pairs.item.size)
  coverage["scored_pairs"] = int(pair_item.size)
  valid, rewards = valid[keep], np.where(valid, rewards, -np.inf)[keep]
  return Scored(
      **{name: getattr(items, name)[keep] for name in (*ITEM_SCALARS, *PADDED)},
      valid=valid, rewards=rewards, selection=selection_weights(rewards, valid),
      pair_item=pair_item, pair_chosen=chosen, pair_rejected=rejected, pair_source=source,
      pair_outcome=pair_outcome(rewards[pair_item, chosen], rewards[pair_item, rejected]),
      coverage=coverage)
