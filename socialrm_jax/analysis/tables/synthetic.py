"""Reward models with planted preferences: the self-check (`socialrm-validate`) audits them, and
the interval coverage validation (orchestrators/interval_coverage.py) draws its replicates from
them.

A synthetic reward model (`Plan`) gives each candidate of an item a standard normal reward plus
its planted shifts, in units of that noise:
- `desirable[domain]` on each socially desirable candidate (desirability > 0) of the domain's
  items, negative for a model that prefers the undesirable response; with `norm_only`, only on
  Moral Stories items with the norm stated (so a norm sensitivity is planted too);
- `stereotype` on each stereotyped candidate: StereoSet's and CrowS-Pairs' stereotype, BBQ's
  biased answer;
- `length` times the natural log of the candidate's length in characters: a preference for long
  answers, which is no social preference.
`shift_for(p)` is the shift that wins a pair of two such candidates with probability p.

`copied` and `tiled` make the larger item sets such models are audited on: copies of every item
in the same cells (domain, subset, condition, StereoSet's term), as rows or as scored items.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
from scipy import stats

from socialrm_jax.base import records
from socialrm_jax.analysis.tables.categorical import Categorical
from socialrm_jax.analysis.tables.pairs import Scored

STEREOTYPED_ROLES = (records.STEREOTYPE, records.BIASED)


def shift_for(win_probability: float) -> float:
  """The shift d on one candidate such that it outscores another (both d apart, standard normal
  noise each) with probability `win_probability`: sqrt(2) Phi^-1(p)."""
  return float(np.sqrt(2.0) * stats.norm.ppf(win_probability))


@dataclasses.dataclass(frozen=True)
class Plan:
  """A synthetic reward model's planted preferences (the module docstring)."""
  name: str
  desirable: Mapping[str, float] = dataclasses.field(default_factory=dict)
  stereotype: float = 0.0
  length: float = 0.0
  norm_only: bool = False

  def shifts(self, scored: Scored) -> np.ndarray:
    """Each candidate's planted shift. # [N, K] (0 past an item's candidates)"""
    domain_shift = np.asarray([self.desirable.get(d, 0.0) for d in scored.domain.categories],
                              dtype=np.float64)[scored.domain.codes]                   # [N]
    if self.norm_only:
      domain_shift = np.where(scored.context_condition == records.WITHOUT_NORM, 0.0,
                              domain_shift)
    out = (scored.desirability > 0) * domain_shift[:, None]
    for role in STEREOTYPED_ROLES:
      out = out + self.stereotype * (scored.roles == role)
    if self.length:
      # As float64: the lengths are kept in the narrowest integer type, whose log numpy takes
      # in float16 (int8) or float32 (int16).
      out = out + self.length * np.log(np.maximum(scored.candidate_length, 1).astype(np.float64))
    return np.where(scored.valid, out, 0.0)

  def rewards(self, scored: Scored, rng: np.random.Generator) -> np.ndarray:
    """Fresh rewards: standard normal noise plus `shifts`. # [N, K] (-inf past an item's
    candidates, as `pairs.join` keeps them)"""
    noise = rng.standard_normal(scored.rewards.shape)
    return np.where(scored.valid, noise + self.shifts(scored), -np.inf)

  def scored(self, scored: Scored, rng: np.random.Generator) -> Scored:
    """`scored`'s items with this model's fresh rewards."""
    return dataclasses.replace(scored, rewards=self.rewards(scored, rng))


def copied(items: list[dict], pair_rows: list[dict], copies: int) -> tuple[list[dict], list[dict]]:
  """`copies` copies of every items-table row and its pairs, each with its own id (`<id>#<c>`),
  in the same cells."""
  return ([{**item, "item_id": f"{item['item_id']}#{c}"} for c in range(copies) for item in items],
          [{**p, "item_id": f"{p['item_id']}#{c}", "pair_id": f"{p['pair_id']}#{c}"}
           for c in range(copies) for p in pair_rows])


def tiled(scored: Scored, copies: int) -> Scored:
  """`copies` copies of the scored items one after the other, each with its own pairs (their ids
  repeat: no id is read of them but the worst pairs')."""
  n, n_pairs = scored.n_items, scored.pair_item.size
  item_index, pair_index = np.tile(np.arange(n), copies), np.tile(np.arange(n_pairs), copies)
  fields: dict[str, Any] = {}
  for field in dataclasses.fields(Scored):
    value = getattr(scored, field.name)
    if field.name == "pair_item":
      fields[field.name] = (np.tile(value, copies)
                            + np.repeat(np.arange(copies, dtype=np.int32) * n, n_pairs))
    elif isinstance(value, (np.ndarray, Categorical)):
      fields[field.name] = value[pair_index if field.name.startswith("pair_") else item_index]
  return dataclasses.replace(scored, **fields)
