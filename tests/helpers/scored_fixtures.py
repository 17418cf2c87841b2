"""`analysis.tables.pairs.Scored` built by hand from a few items, for the tests of the metric
that read it (bias, best_of_n, distribution) without writing tables; the same items as table rows
joined to their scores (`joined`); resampled sums written by hand (`sums_of`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from socialrm_jax.analysis.resampling import bootstrap
from socialrm_jax.analysis.tables.categorical import Categorical, Coder
from socialrm_jax.analysis.tables.pairs import ItemFields, Scored, join, no_fields
from socialrm_jax.analysis.tables.reward_tables import Scores


def categorical(values: Sequence[Any]) -> Categorical:
  coder = Coder()
  return coder.finish([coder.codes(list(values))])


def scored(items: Sequence[dict[str, Any]]) -> Scored:
  """Items given as dicts of `roles`, `desirability`, `rewards` (one entry per candidate) and,
  optionally, `dataset`, `subset`, `context_condition`, `facts`; no pairs. Candidates past an
  item's own are padded as `Scored` pads them ('' role, 0 desirability, -inf reward)."""
  n, k = len(items), max(len(item["roles"]) for item in items)

  def padded(key, fill):
    return [list(item[key]) + [fill] * (k - len(item[key])) for item in items]

  def column(key, default=""):
    return categorical([item.get(key, default) for item in items])

  valid = np.array([[j < len(item["roles"]) for j in range(k)] for item in items])
  return Scored(
      item=np.arange(n, dtype=np.int32), fit_half=np.zeros(n, bool),
      ids=lambda positions: [f"i{p}" for p in positions], dataset=column("dataset", "d"),
      domain=column("domain", "bias"), subset=column("subset"),
      context_condition=column("context_condition"), template=column("template"),
      group=column("group"), facts=column("facts"), roles=categorical(padded("roles", "")),
      desirability=np.array(padded("desirability", 0), dtype=np.int8), valid=valid,
      rewards=np.array(padded("rewards", -np.inf), dtype=np.float64),
      candidate_length=np.zeros((n, k), np.int32), pair_item=np.zeros(0, np.int32),
      pair_chosen=np.zeros(0, np.int8), pair_rejected=np.zeros(0, np.int8),
      pair_source=categorical([]), coverage={})


def tables_of(items: Sequence[dict[str, Any]]) -> tuple[list[dict], list[dict], Scores]:
  """Items-table rows, pairs-table rows and their `Scores`, from items given as dicts of `id`,
  `candidates` (texts), `roles`, `desirability`, `rewards`, `pairs` ([(chosen, rejected,
  label_source)]) and, optionally, `dataset`, `domain`, `subset`, `context_condition`, `template`,
  `prompt`, `attributes`."""
  item_rows, pair_rows, ids, candidates, rewards = [], [], [], [], []
  for item in items:
    row = {"item_id": item["id"], "dataset": item.get("dataset", "d"),
           "domain": item.get("domain", "bias"), "subset": item.get("subset", "s"),
           "context_condition": item.get("context_condition"), "template": item.get("template"),
           "prompt": item.get("prompt", [{"role": "user", "content": "q"}]),
           "candidates": list(item["candidates"]), "roles": list(item["roles"]),
           "desirability": list(item["desirability"]), "attributes": item.get("attributes", {})}
    item_rows.append(row)
    pair_rows += [{"pair_id": f"{item['id']}:{c}>{r}", "item_id": item["id"],
                   "dataset": row["dataset"], "domain": row["domain"], "subset": row["subset"],
                   "label_source": source, "chosen_index": c, "rejected_index": r,
                   "chosen_role": row["roles"][c], "rejected_role": row["roles"][r]}
                  for c, r, source in item["pairs"]]
    ids += [item["id"]] * len(item["rewards"])
    candidates += list(range(len(item["rewards"])))
    rewards += list(item["rewards"])
  return item_rows, pair_rows, Scores.of(ids, candidates, rewards, "scores")


def joined(items: Sequence[dict[str, Any]], fields: ItemFields = no_fields) -> Scored:
  """`tables_of(items)` joined (`pairs.join`), with the dataset analyses' `fields`."""
  return join(*tables_of(items), fields=fields)


def sums_of(strata: Sequence[bootstrap.Stratum], columns: Sequence[str],
            rows: Any) -> bootstrap.StratifiedSums:
  """Resampled sums written by hand: `rows` [1 + B, S, V] (row 0 the data) in `columns` order,
  over cells `strata`, each drawn once."""
  rows = np.asarray(rows, dtype=np.float64)
  return bootstrap.StratifiedSums(tuple(strata), tuple(columns), rows, np.ones(rows.shape[:2]))


def templated(*groups: tuple[str, Sequence[bool]],
              dataset: str = "mine") -> tuple[list[dict], list[dict], Scores]:
  """`tables_of` items of one dataset, a group of items per prompt template given as (template,
  [whether each item's chosen response wins its one gold pair])."""
  return tables_of([
      {"id": f"{dataset}/{i}@{template}", "dataset": dataset, "domain": "general",
       "subset": "all", "template": template, "candidates": ["good", f"bad{i}"],
       "roles": ["chosen", "rejected"], "desirability": [1, -1],
       "rewards": [1.0, 0.0] if win else [0.0, 1.0], "pairs": [(0, 1, "gold")]}
      for template, wins in groups for i, win in enumerate(wins)])
