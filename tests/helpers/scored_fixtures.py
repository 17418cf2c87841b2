"""`analysis.tables.pairs.Scored` built by hand from a few items, for the tests of the metric
that read it (bias, best_of_n, distribution) without writing tables."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from socialrm_jax.analysis.tables.categorical import Categorical, Coder
from socialrm_jax.analysis.tables.pairs import Scored


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
