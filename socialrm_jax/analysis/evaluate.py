"""All of SPEC sec. 5 for one scores set: the `metrics.json` tree.

Layout (names from SPEC): `domains.<domain>.{accuracy, ci95}`, `datasets.<dataset>.{accuracy,
ci95, subsets.<subset>.accuracy, <dataset metric>, <dataset metric>_ci95}`, BBQ per category at
`datasets.bbq.categories.<category>`, StereoSet per type at `datasets.stereoset.subsets.<type>`,
then `calibration`, `length_confound`, `coverage`, and `null_reasons` ({dotted path: why} for
every null). Which module computes what: `accuracy` (pairs), `bias` (bbq), `stereotypes`
(crows_pairs, stereoset), `safety` (xstest), `ethics`, `moral_stories`, `distribution`,
`calibration`, `confounds`; `bootstrap` explains the intervals.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from socialrm_jax.analysis import (accuracy, bias, bootstrap, calibration, confounds, distribution,
                                   estimates, ethics, moral_stories, safety, stereotypes)
from socialrm_jax.analysis.pairs import Scored, join
from socialrm_jax.analysis.scores import Scores


@dataclasses.dataclass(frozen=True)
class Options:
  n_resamples: int = bootstrap.N_RESAMPLES
  seed: int = bootstrap.SEED
  min_group_items: int = distribution.MIN_GROUP_ITEMS
  allow_missing: bool = False


def merge(into: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
  """Merges nested dicts: `subsets` from several modules end up side by side."""
  for key, value in update.items():
    if isinstance(value, dict) and isinstance(into.get(key), dict):
      merge(into[key], value)
    else:
      into[key] = value
  return into


def _strata(scored: Scored, index: np.ndarray, by_target: bool) -> dict[str, np.ndarray]:
  fields = {"domain": scored.domain[index], "subset": scored.subset[index],
            "context_condition": scored.context_condition[index]}
  if by_target:
    fields["target"] = np.asarray([str((scored.items[i].get("attributes") or {}).get("target", ""))
                                   for i in index])
  return fields


def dataset_metrics(scored: Scored, name: str, index: np.ndarray, generic: dict[str, np.ndarray],
                    options: Options) -> tuple[dict[str, Any], bootstrap.StratifiedSums]:
  """`datasets.<name>` and the resampled sums behind it (the domains reuse them)."""
  columns = {k: v[index] for k, v in generic.items()}
  if name == "bbq":
    columns.update(bias.item_columns(scored, index))
  sums = bootstrap.stratified_sums(columns, _strata(scored, index, by_target=name == "stereoset"),
                                   options.n_resamples, bootstrap.generator(options.seed, name))
  node = accuracy.dataset_summary(sums)
  if name == "bbq":
    merge(node, bias.dataset_summary(sums))
    merge(node, distribution.bbq_group_rates(scored, index, options.min_group_items))
  elif name == "crows_pairs":
    merge(node, stereotypes.stereotype_rate(sums))
  elif name == "stereoset":
    merge(node, stereotypes.stereoset_scores(sums))
  elif name == "xstest":
    merge(node, safety.summary(sums))
  elif name == "ethics":
    ethics.summary(sums, node)
  elif name == "moral_stories":
    merge(node, moral_stories.summary(sums))
  merge(node, distribution.dataset_summary(scored, index))
  gold = np.flatnonzero((scored.pair_source == "gold") & np.isin(scored.pair_item, index))
  node["length_confound"] = confounds.length_rates(scored, gold)
  node["n_items"] = int(index.size)
  return node, sums


def metrics_from_scored(scored: Scored, options: Options = Options()) -> dict[str, Any]:
  generic = accuracy.item_columns(scored)
  datasets: dict[str, Any] = {}
  sums: dict[str, bootstrap.StratifiedSums] = {}
  for name in dict.fromkeys(scored.dataset):
    index = np.flatnonzero(scored.dataset == name)
    datasets[name], sums[name] = dataset_metrics(scored, name, index, generic, options)
  gold = np.flatnonzero(scored.pair_source == "gold")
  item_ids = [row["item_id"] for row in scored.items]
  fits = calibration.fit_half(item_ids)[scored.pair_item[gold]]
  tree = {
      "n_resamples": options.n_resamples,
      "seed": options.seed,
      "domains": accuracy.domain_summary(sums),
      "datasets": datasets,
      "calibration": calibration.summary(scored.reward_margin[gold], fits),
      "length_confound": confounds.length_rates(scored, gold),
      "coverage": scored.coverage,
  }
  reasons: dict[str, str] = {}
  tree = estimates.finalize(tree, reasons=reasons)
  tree["null_reasons"] = reasons
  return tree


def compute_metrics(items: Sequence[dict], pairs: Sequence[dict], scores: Scores,
                    options: Options = Options()) -> dict[str, Any]:
  """metrics.json for one scores set over the items and pairs tables."""
  return metrics_from_scored(join(items, pairs, scores, options.allow_missing), options)
