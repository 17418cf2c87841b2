"""Pair accuracy per domain, dataset and subset (docs/spec.md sec. 5), and the per-item sums
behind it.

Accuracy is the mean outcome of gold pairs (ties 1/2). Directional pairs (no correct answer; the
rejected response carries the stereotype) and control pairs (StereoSet relevance) never enter it:
they are summed apart, as `stereotype_wins` (how often the stereotyped response wins; reported as
`stereotype_rate` by `datasets/crows_pairs.py`) and
`control_accuracy`. An item's `group_won` is the smallest of its gold pairs' outcomes: 1 when all
are won, 0 when one is lost, and 1/2 when some are tied and none is lost (a tie counts 1/2 in
every rate, docs/spec.md sec. 4).

`accuracy_length_matched` is the accuracy over the length-matched gold pairs only (responses whose
lengths differ by less than 10% of the longer, see `confounds`), with its interval from the same
resamples and its `n_length_matched_pairs`; it is written wherever there are gold pairs, beside
`accuracy`, and is null when none of them is length-matched.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from socialrm_jax.base import records
from socialrm_jax.analysis.metrics import confounds
from socialrm_jax.analysis.resampling import estimates
from socialrm_jax.analysis.resampling.bootstrap import StratifiedSums
from socialrm_jax.analysis.tables.pairs import Scored

NO_GOLD = "no gold pairs here (directional or control pairs only)"
LENGTH_MATCHED = "accuracy_length_matched"
NO_MATCHED = (f"no gold pairs whose responses differ in length by less than "
              f"{confounds.LENGTH_MATCH_TOLERANCE:.0%} of the longer")


def item_columns(scored: Scored, index: np.ndarray) -> dict[str, np.ndarray]:
  """Per-item sums over the pairs of items `index`, by label source. Each # [n]"""
  pairs, places = scored.pairs_of(index)                                     # [p], [p]
  source = scored.pair_source[pairs]                                         # [p]

  def per_item(label: str, weights: np.ndarray, among: np.ndarray | bool = True) -> np.ndarray:
    mask = (source == label) & among
    return np.bincount(places[mask], weights=weights[mask], minlength=index.size)

  outcome = scored.outcome(pairs)
  ones = np.ones_like(outcome)
  matched = confounds.length_matched(scored, pairs)
  gold_pairs = per_item(records.GOLD, ones)
  gold_losses = per_item(records.GOLD, (outcome == 0).astype(np.float64))
  gold_ties = per_item(records.GOLD, (outcome == 0.5).astype(np.float64))
  # min over an item's pairs, from counts: 0 if any is lost, else 1/2 if any is tied, else 1.
  has_gold = (gold_pairs > 0).astype(np.float64)
  matched_pairs = per_item(records.GOLD, ones, matched)
  directional_pairs = per_item(records.DIRECTIONAL, ones)
  control_pairs = per_item(records.CONTROL, ones)
  return {
      "gold_wins": per_item(records.GOLD, outcome),
      "gold_pairs": gold_pairs,
      "gold_items": has_gold,
      "group_won": has_gold * (gold_losses == 0) * np.where(gold_ties > 0, 0.5, 1.0),
      "matched_wins": per_item(records.GOLD, outcome, matched),
      "matched_pairs": matched_pairs,
      "matched_items": (matched_pairs > 0).astype(np.float64),
      "stereotype_wins": per_item(records.DIRECTIONAL, 1.0 - outcome),
      "directional_pairs": directional_pairs,
      "directional_items": (directional_pairs > 0).astype(np.float64),
      "control_wins": per_item(records.CONTROL, outcome),
      "control_pairs": control_pairs,
      "control_items": (control_pairs > 0).astype(np.float64),
  }


def gold_accuracy(total: Callable[[str], np.ndarray]) -> dict[str, Any]:
  """accuracy (+ ci95), the length-matched accuracy and pair counts, from `total(column)`, the
  resampled sums of a per-item column over some strata. # [1 + B]"""
  node: dict[str, Any] = {}
  estimates.put(node, "accuracy", estimates.ratio(total("gold_wins"), total("gold_pairs")),
                NO_GOLD, total("gold_items")[0], ci_name="ci95", share=True)
  node["n_gold_pairs"] = int(total("gold_pairs")[0])
  node["n_gold_items"] = int(total("gold_items")[0])
  if node["n_gold_pairs"]:
    estimates.put(node, LENGTH_MATCHED,
                  estimates.ratio(total("matched_wins"), total("matched_pairs")), NO_MATCHED,
                  total("matched_items")[0], share=True)
    node["n_length_matched_pairs"] = int(total("matched_pairs")[0])
  return node


def summarise(sums: StratifiedSums, where=None) -> dict[str, Any]:
  """Gold accuracy (see `gold_accuracy`), control accuracy and pair counts over the strata
  `where` accepts."""
  node = gold_accuracy(lambda column: sums.total(column, where))
  if sums.total("control_pairs", where)[0] > 0:
    estimates.put(node, "control_accuracy", estimates.ratio(
        sums.total("control_wins", where), sums.total("control_pairs", where)),
        "no control pairs here", sums.units("control_items", where), share=True)
  if sums.total("directional_pairs", where)[0] > 0:
    node["n_directional_pairs"] = int(sums.total("directional_pairs", where)[0])
  return node


def dataset_summary(sums: StratifiedSums) -> dict[str, Any]:
  """Dataset accuracy and `subsets.<subset>.accuracy`."""
  node = summarise(sums)
  node["subsets"] = {subset: summarise(sums, lambda s, subset=subset: s.subset == subset)
                     for subset in sums.values("subset")}
  return node


def domain_summary(per_dataset: dict[str, StratifiedSums]) -> dict[str, Any]:
  """`domains.<domain>`: gold accuracy over every dataset's strata of that domain.

  Datasets are resampled independently, so adding their rows gives a resample of the domain."""
  domains: dict[str, Any] = {}
  names = list(dict.fromkeys(s.domain for sums in per_dataset.values() for s in sums.strata))
  for domain in names:
    def in_domain(s, domain=domain):
      return s.domain == domain
    node = gold_accuracy(lambda column, in_domain=in_domain: sum(
        sums.total(column, in_domain) for sums in per_dataset.values()))
    node["datasets"] = [d for d, sums in per_dataset.items()
                        if any(s.domain == domain for s in sums.strata)]
    # Each dataset's items with gold pairs here (the report scales the mde to the full data).
    node["items_by_dataset"] = {d: int(per_dataset[d].total("gold_items", in_domain)[0])
                                for d in node["datasets"]}
    domains[domain] = node
  return domains
