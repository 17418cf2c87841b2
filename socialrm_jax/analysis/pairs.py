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


def _reward_matrix(items: Sequence[dict], scores: Scores) -> tuple[np.ndarray, np.ndarray]:
  """Rewards [N, K] (NaN where unscored) and the number of candidates per item [N]."""
  index = {row["item_id"]: i for i, row in enumerate(items)}
  if len(index) != len(items):
    seen: set[str] = set()
    duplicate = next(row["item_id"] for row in items if row["item_id"] in seen or seen.add(row["item_id"]))
    raise InputError(f"item_id {duplicate!r} appears twice in the items table")
  n_candidates = np.asarray([len(row["candidates"]) for row in items], dtype=np.int64)
  item = np.asarray([index.get(i, -1) for i in scores.item_id], dtype=np.int64)
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
  if np.unique(flat).size != flat.size:
    values, counts = np.unique(flat, return_counts=True)
    repeated = values[counts > 1][0]
    raise InputError(f"item {items[repeated // k]['item_id']!r} candidate {repeated % k} is "
                     "scored more than once", scores.path)
  rewards = np.full(len(items) * k, np.nan)
  rewards[flat] = scores.reward
  return rewards.reshape(len(items), k), n_candidates


def _coverage(items: Sequence[dict], scored: np.ndarray) -> dict[str, Any]:
  per_dataset: dict[str, dict[str, int]] = {}
  for row, ok in zip(items, scored):
    counts = per_dataset.setdefault(row["dataset"], {"items": 0, "scored_items": 0})
    counts["items"] += 1
    counts["scored_items"] += int(ok)
  for counts in per_dataset.values():
    counts["share"] = counts["scored_items"] / counts["items"]
  return {"complete": bool(scored.all()), "items": len(items), "scored_items": int(scored.sum()),
          "datasets": per_dataset}


def _padded(rows: Sequence[Sequence], k: int, fill, dtype) -> np.ndarray:
  out = np.full((len(rows), k), fill, dtype=dtype)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def join(items: Sequence[dict], pairs: Sequence[dict], scores: Scores,
         allow_missing: bool = False) -> Scored:
  """Joins one scores set to the items and pairs tables."""
  rewards, n_candidates = _reward_matrix(items, scores)
  k = rewards.shape[1]
  valid = np.arange(k)[None, :] < n_candidates[:, None]             # [N, K]
  scored = ~np.any(np.isnan(rewards) & valid, axis=1)                # [N]
  coverage = _coverage(items, scored)
  if not coverage["complete"]:
    lacking = ", ".join(f"{name} {c['items'] - c['scored_items']} of {c['items']}"
                        for name, c in coverage["datasets"].items()
                        if c["scored_items"] < c["items"])
    if not allow_missing:
      raise InputError(
          f"scores are missing for {coverage['items'] - coverage['scored_items']} of "
          f"{coverage['items']} items ({lacking}); score them, or pass --allow_missing to "
          "compute on the scored items only", scores.path)
  keep = np.flatnonzero(scored)
  kept_items = [items[i] for i in keep]
  new_index = np.full(len(items), -1, dtype=np.int64)
  new_index[keep] = np.arange(keep.size)
  rewards = np.where(valid, rewards, -np.inf)[keep]
  valid = valid[keep]

  item_index = {row["item_id"]: i for i, row in enumerate(items)}
  pair_item, chosen, rejected, source = [], [], [], []
  for number, row in enumerate(pairs, start=1):
    i = item_index.get(row["item_id"])
    if i is None:
      raise InputError(f"pair {row.get('pair_id')!r} names item {row['item_id']!r}, which is not "
                       "in the items table", None, number)
    if not (0 <= row["chosen_index"] < n_candidates[i] and 0 <= row["rejected_index"] < n_candidates[i]):
      raise InputError(f"pair {row.get('pair_id')!r} has a candidate index out of range", None, number)
    if new_index[i] < 0:
      continue
    pair_item.append(new_index[i])
    chosen.append(row["chosen_index"])
    rejected.append(row["rejected_index"])
    source.append(row["label_source"])
  pair_item = np.asarray(pair_item, dtype=np.int64)
  chosen = np.asarray(chosen, dtype=np.int64)
  rejected = np.asarray(rejected, dtype=np.int64)
  coverage["pairs"] = len(pairs)
  coverage["scored_pairs"] = int(pair_item.size)

  def column(name: str) -> np.ndarray:
    return np.asarray([row.get(name) or "" for row in kept_items], dtype=object)

  return Scored(
      items=kept_items, dataset=column("dataset"), domain=column("domain"),
      subset=column("subset"), context_condition=column("context_condition"),
      roles=_padded([row["roles"] for row in kept_items], k, "", object),
      desirability=_padded([row["desirability"] for row in kept_items], k, 0, np.int8),
      valid=valid, rewards=rewards, selection=selection_weights(rewards, valid),
      candidate_length=_padded([[len(c) for c in row["candidates"]] for row in kept_items], k, 0,
                               np.int64),
      pair_item=pair_item, pair_chosen=chosen, pair_rejected=rejected,
      pair_source=np.asarray(source, dtype=object),
      pair_outcome=pair_outcome(rewards[pair_item, chosen], rewards[pair_item, rejected]),
      coverage=coverage)
