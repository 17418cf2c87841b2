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
from typing import Any, Sequence

import numpy as np

from socialrm_jax import tables
from socialrm_jax.analysis.scores import Scores
from socialrm_jax.errors import InputError


@dataclasses.dataclass(frozen=True)
class Scored:
  """Scored items and their pairs as arrays; N items, K the most candidates of any item, P pairs."""
  items: list[dict[str, Any]]      # the scored items' rows
  dataset: np.ndarray              # [N] object
  domain: np.ndarray               # [N] object
  subset: np.ndarray               # [N] object
  context_condition: np.ndarray    # [N] object ('' when null)
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


def _reward_matrix(item_ids: list[str], index: dict[str, int], n_candidates: np.ndarray,
                   scores: Scores) -> np.ndarray:
  """Rewards [N, K], NaN where unscored."""
  if len(index) != len(item_ids):
    seen: set[str] = set()
    repeated = next(i for i in item_ids if i in seen or seen.add(i))
    raise InputError(f"item_id {repeated!r} appears twice in the items table")
  item = lookup(index, scores.item_id)
  unknown = np.flatnonzero(item < 0)
  if unknown.size:
    raise InputError(
        f"{unknown.size} score rows name items that are not in the items table (first: "
        f"{scores.item_id[unknown[0]]!r}); score the same conversion you evaluate", scores.path)
  out_of_range = np.flatnonzero((scores.candidate < 0) | (scores.candidate >= n_candidates[item]))
  if out_of_range.size:
    i = out_of_range[0]
    raise InputError(f"candidate {scores.candidate[i]} is out of range for item "
                     f"{scores.item_id[i]!r} ({n_candidates[item[i]]} candidates)", scores.path)
  k = int(n_candidates.max(initial=2))
  flat = item * k + scores.candidate
  times_scored = np.bincount(flat, minlength=len(item_ids) * k)
  if flat.size and times_scored.max() > 1:
    repeated = int(np.argmax(times_scored > 1))
    raise InputError(f"item {item_ids[repeated // k]!r} candidate {repeated % k} is scored more "
                     "than once", scores.path)
  rewards = np.full(len(item_ids) * k, np.nan)
  rewards[flat] = scores.reward
  return rewards.reshape(len(item_ids), k)


def _coverage(dataset: np.ndarray, scored: np.ndarray) -> dict[str, Any]:
  per_dataset: dict[str, dict[str, Any]] = {}
  for name in dict.fromkeys(dataset):
    mine = dataset == name
    items, scored_items = int(mine.sum()), int((mine & scored).sum())
    per_dataset[name] = {"items": items, "scored_items": scored_items,
                         "share": scored_items / items}
  return {"complete": bool(scored.all()), "items": int(scored.size),
          "scored_items": int(scored.sum()), "datasets": per_dataset}


# The pairs-table columns the join reads; the rest (the prompt and both texts again) is not kept.
PAIR_COLUMNS = ("pair_id", "item_id", "chosen_index", "rejected_index", "label_source")


def _integers(values: Any, name: str, path, number: int | None) -> None:
  """A JSON table may hold anything where an integer belongs (NaN, infinity, "1", 1.5): an error
  naming the table and the row, before numpy turns it into a number or fails without one."""
  for value in values:
    if isinstance(value, bool) or not isinstance(value, int):
      raise InputError(f"{name} must be integers, not {value!r:.40}", path, number)


def checked_item(row: dict[str, Any], path=None, number: int | None = None) -> dict[str, Any]:
  """An items-table row, checked where the metrics need lists and integers; `path` and `number`
  (1-based) name the row in an error."""
  candidates, roles = row.get("candidates"), row.get("roles")
  if (not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates)
      or not isinstance(roles, list) or len(roles) != len(candidates)):
    raise InputError("candidates must be a list of texts and roles a list as long", path, number)
  if not isinstance(row.get("desirability"), list):
    raise InputError("desirability must be a list of integers", path, number)
  _integers(row["desirability"], "desirability", path, number)
  return row


def slim_pair(row: dict[str, Any], path=None, number: int | None = None) -> dict[str, Any]:
  """A pairs-table row as the join reads it (`PAIR_COLUMNS`), its indices checked."""
  _integers((row.get("chosen_index"), row.get("rejected_index")),
            "chosen_index and rejected_index", path, number)
  return {k: row.get(k) for k in PAIR_COLUMNS}


def read_rows(path, prefix: str) -> list[dict[str, Any]]:
  """Table `prefix` (items or pairs) at `path`, read in batches (`tables.iter_rows`): items
  checked (`checked_item`), pairs checked and kept without their texts (`slim_pair`)."""
  keep = checked_item if prefix == "items" else slim_pair
  return [keep(row, part, number) for part in tables.table_files(path, prefix)
          for number, row in enumerate(tables.iter_rows(part, prefix), start=1)]


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


def join(items: Sequence[dict], pairs: Sequence[dict], scores: Scores,
         allow_missing: bool = False) -> Scored:
  """Joins one scores set to the items and pairs tables (pairs' rows whole or `slim_pair`)."""
  item_ids = [row["item_id"] for row in items]
  index = {item_id: i for i, item_id in enumerate(item_ids)}
  n_candidates = np.asarray([len(row["candidates"]) for row in items], dtype=np.int64)
  rewards = _reward_matrix(item_ids, index, n_candidates, scores)
  k = rewards.shape[1]
  valid = np.arange(k)[None, :] < n_candidates[:, None]             # [N, K]
  scored = ~np.any(np.isnan(rewards) & valid, axis=1)                # [N]
  dataset = np.asarray([row["dataset"] for row in items], dtype=object)
  coverage = _coverage(dataset, scored)
  if not coverage["complete"] and not allow_missing:
    lacking = ", ".join(f"{name} {c['items'] - c['scored_items']} of {c['items']}"
                        for name, c in coverage["datasets"].items()
                        if c["scored_items"] < c["items"])
    raise InputError(
        f"scores are missing for {coverage['items'] - coverage['scored_items']} of "
        f"{coverage['items']} items ({lacking}); score them, or pass --allow_missing to "
        "compute on the scored items only", scores.path)
  keep = np.flatnonzero(scored)
  kept_items = [items[i] for i in keep]
  new_index = np.full(len(items), -1, dtype=np.int64)
  new_index[keep] = np.arange(keep.size)
  rewards = np.where(valid, rewards, -np.inf)[keep]

  pair_item = lookup(index, [row["item_id"] for row in pairs])
  chosen = np.asarray([row["chosen_index"] for row in pairs], dtype=np.int64)
  rejected = np.asarray([row["rejected_index"] for row in pairs], dtype=np.int64)
  source = np.asarray([row["label_source"] for row in pairs], dtype=object)
  if (pair_item < 0).any():
    number = int(np.flatnonzero(pair_item < 0)[0])
    raise InputError(f"pair {pairs[number].get('pair_id')!r} names item "
                     f"{pairs[number]['item_id']!r}, which is not in the items table",
                     None, number + 1)
  limit = n_candidates[pair_item]
  bad = (chosen < 0) | (chosen >= limit) | (rejected < 0) | (rejected >= limit)
  if bad.any():
    number = int(np.flatnonzero(bad)[0])
    raise InputError(f"pair {pairs[number].get('pair_id')!r} has a candidate index out of range",
                     None, number + 1)
  in_scored = new_index[pair_item] >= 0
  pair_item = new_index[pair_item][in_scored]
  chosen, rejected = chosen[in_scored], rejected[in_scored]
  coverage["pairs"] = len(pairs)
  coverage["scored_pairs"] = int(pair_item.size)

  def column(name: str) -> np.ndarray:
    return np.asarray([row.get(name) or "" for row in kept_items], dtype=object)

  valid = valid[keep]
  return Scored(
      items=kept_items, dataset=dataset[keep], domain=column("domain"),
      subset=column("subset"), context_condition=column("context_condition"),
      roles=_padded([row["roles"] for row in kept_items], k, "", object),
      desirability=_padded([row["desirability"] for row in kept_items], k, 0, np.int8),
      valid=valid, rewards=rewards, selection=selection_weights(rewards, valid),
      candidate_length=_padded([[len(c) for c in row["candidates"]] for row in kept_items], k, 0,
                               np.int64),
      pair_item=pair_item, pair_chosen=chosen, pair_rejected=rejected,
      pair_source=source[in_scored],
      pair_outcome=pair_outcome(rewards[pair_item, chosen], rewards[pair_item, rejected]),
      coverage=coverage)
