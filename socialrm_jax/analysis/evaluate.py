"""All of docs/spec.md sec. 5 for one scores set: the `metrics.json` tree.

Layout (names from docs/spec.md): `domains.<domain>.{accuracy, ci95}`,
`datasets.<dataset>.{accuracy, ci95, subsets.<subset>.accuracy, <dataset metric>, <dataset
metric>_ci95}`, BBQ per category at `datasets.bbq.categories.<category>`, StereoSet per type at
`datasets.stereoset.subsets.<type>`, then `calibration`, `length_confound`, `coverage`, and
`null_reasons` ({dotted path: why} for every null). The generic part of each `datasets.<name>`
(accuracy, distribution bias, length) is computed here for every dataset; what a dataset adds comes
from its analysis's metric hook (`dataset_analysis.DatasetAnalysis`, found by the dataset's name in
`socialrm_jax.analysis.datasets`), which computes it in that module (`datasets/bbq.py`,
`datasets/stereoset.py`, ...). `bootstrap` explains the intervals.

When the items of one dataset come from several prompt templates (`--templates=all`), these
metrics use its primary template's items only, so no source row counts twice: its default
template (`<dataset>.default`) when its items include one, else the template of its first item
in the table (the converter writes the templates in the order they were chosen). metrics.json
then names them in `primary_templates` (`coverage` still counts every item of the table);
`template_spread` compares the templates.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from socialrm_jax.base import records, settings, tables, templates
from socialrm_jax.analysis.metrics import accuracy, calibration, confounds, distribution, verdicts
from socialrm_jax.analysis.resampling import bootstrap, estimates
from socialrm_jax.analysis.tables import evidence
from socialrm_jax.analysis.tables.categorical import Categorical
from socialrm_jax.analysis.dataset_analysis import (DatasetAnalysis, DatasetView, Options,
                                                   for_dataset)
from socialrm_jax.analysis.tables.pairs import Scored, item_chunks, join
from socialrm_jax.analysis.tables.reward_tables import Scores



@dataclasses.dataclass(frozen=True)
class MetricsOptions:
  """The metrics' settings a user sets: socialrm-metrics' flags and the audit's `config.metrics`
  (as `Options`, `options()`)."""
  n_resamples: int = settings.field(Options.n_resamples, "Bootstrap resamples per interval.")
  seed: int = settings.field(Options.seed, "Bootstrap seed.")
  allow_missing: bool = settings.field(Options.allow_missing, "Compute on the scored items when "
                                       "some items have no scores (recorded under `coverage`).")
  delta: float = settings.field(Options.delta, "The smallest preference (distance from the null "
                                "value) a verdict of no preference must have had 80% power to "
                                "find (docs/metrics.md#verdicts).")

  def options(self) -> Options:
    return Options(n_resamples=self.n_resamples, seed=self.seed, allow_missing=self.allow_missing,
                   delta=self.delta)

def merge(into: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
  """Merges nested dicts: `subsets` from several modules end up side by side."""
  for key, value in update.items():
    if isinstance(value, dict) and isinstance(into.get(key), dict):
      merge(into[key], value)
    else:
      into[key] = value
  return into


def strata(scored: Scored, index: np.ndarray,
           analysis: DatasetAnalysis) -> dict[str, np.ndarray]:
  """The bootstrap strata of items `index`: domain, subset and context condition, and the
  dataset's group (`Scored.group`) when it has a `stratum_group`. Each # [n] strings"""
  fields = {"domain": scored.domain[index], "subset": scored.subset[index],
            "context_condition": scored.context_condition[index]}
  if analysis.stratum_group is not None:
    fields["group"] = scored.group[index]
  return {name: column.strings() for name, column in fields.items()}


def dataset_columns(scored: Scored, analysis: DatasetAnalysis,
                    index: np.ndarray) -> dict[str, np.ndarray]:
  """The per-item values of items `index`: the generic ones (`accuracy.item_columns`) and their
  dataset's own. Each # [n]"""
  columns = accuracy.item_columns(scored, index)
  if analysis.item_columns is not None:
    columns.update(analysis.item_columns(scored, index))
  return columns


def resampled_sums(scored: Scored, analysis: DatasetAnalysis, index: np.ndarray, options: Options,
                   name: str) -> bootstrap.StratifiedSums:
  """The resampled sums of the per-item values of a dataset's items `index`, made a chunk of
  items at a time (`pairs.item_chunks`, `bootstrap.stratified_sums_in_chunks`)."""
  return bootstrap.stratified_sums_in_chunks(
      ((dataset_columns(scored, analysis, chunk), strata(scored, chunk, analysis))
       for chunk in item_chunks(index)),
      options.n_resamples, bootstrap.generator(options.seed, name), analysis.cluster_groups)


def summaries(scored: Scored, analysis: DatasetAnalysis, index: np.ndarray,
              sums: bootstrap.StratifiedSums,
              options: Options) -> tuple[dict[str, Any], dict[str, Any]]:
  """The statistics of a dataset's resampled sums: accuracy's node and the dataset's own."""
  own = (analysis.summary(DatasetView(scored, index, sums, options))
         if analysis.summary is not None else {})
  return accuracy.dataset_summary(sums), own


def dataset_metrics(scored: Scored, name: str, index: np.ndarray, options: Options
                    ) -> tuple[dict[str, Any], bootstrap.StratifiedSums,
                               dict[str, estimates.Kept]]:
  """`datasets.<name>`, the resampled sums behind it (the domains reuse them) and its statistics
  by metrics.json path (for the verdicts)."""
  analysis = for_dataset(name)
  sums = resampled_sums(scored, analysis, index, options, name)
  with estimates.keeping_rows() as kept:
    node, own = summaries(scored, analysis, index, sums, options)
  statistics = estimates.kept_by_path(kept, {f"datasets.{name}": [node, own]})
  merge(node, own)
  merge(node, distribution.dataset_summary(scored, index))
  mine = np.zeros(scored.n_items, dtype=bool)
  mine[index] = True
  gold = (scored.pair_source == records.GOLD) & mine[scored.pair_item]           # [P]
  node["length_confound"] = confounds.length_rates(scored, gold)
  node["n_items"] = int(index.size)
  node["worst_pairs"] = evidence.worst_pairs(scored, index)
  # A dataset's temporaries, freed: given back, for glibc keeps most of them otherwise.
  tables.release_unused_memory()
  return node, sums, statistics


def restrict(scored: Scored, keep: np.ndarray) -> Scored:
  """The scored items where `keep` [N] bool is set, with their pairs. (`Scored`'s `pair_*` arrays
  are per pair, its other arrays per item.)"""
  new_index = np.full(keep.size, -1, dtype=np.int32)
  new_index[keep] = np.arange(int(keep.sum()))
  kept_pairs = keep[scored.pair_item]                                  # [P] bool
  fields = {}
  for field in dataclasses.fields(Scored):
    value = getattr(scored, field.name)
    if field.name == "pair_item":
      fields[field.name] = new_index[value[kept_pairs]]
    elif isinstance(value, (np.ndarray, Categorical)):
      fields[field.name] = value[kept_pairs if field.name.startswith("pair_") else keep]
  return dataclasses.replace(scored, **fields)


def templates_by_dataset(scored: Scored) -> dict[str, list[str]]:
  """Each dataset's templates, its primary one first (see the module's docstring), then in the
  order of their first items."""
  # The first item of each (dataset, template), in table order: their strings, not every item's.
  combined = (scored.dataset.codes.astype(np.int64) * len(scored.template.categories)
              + scored.template.codes)                                               # [N]
  first = np.sort(np.unique(combined, return_index=True)[1])
  return templates.by_dataset(zip(scored.dataset[first], scored.template[first]))


def primary_template_items(scored: Scored) -> Scored:
  """The items the main metrics count: each dataset's primary template's, when its items come
  from several, so no source row counts twice (`scored` itself when none does)."""
  by_dataset = templates_by_dataset(scored)
  if all(len(names) == 1 for names in by_dataset.values()):
    return scored
  keep = np.zeros(scored.n_items, dtype=bool)
  for name, names in by_dataset.items():
    keep |= (scored.dataset == name) & (scored.template == names[0])
  return restrict(scored, keep)


def metrics_from_scored(scored: Scored, options: Options) -> dict[str, Any]:
  by_dataset = templates_by_dataset(scored)
  primary = {name: names[0] for name, names in by_dataset.items()}
  several = any(len(names) > 1 for names in by_dataset.values())
  scored = primary_template_items(scored)
  datasets: dict[str, Any] = {}
  sums: dict[str, bootstrap.StratifiedSums] = {}
  statistics: dict[str, estimates.Kept] = {}
  for name in scored.dataset.distinct():
    index = np.flatnonzero(scored.dataset == name)
    datasets[name], sums[name], found = dataset_metrics(scored, name, index, options)
    statistics.update(found)
  with estimates.keeping_rows() as kept:
    domains = accuracy.domain_summary(sums)
  statistics.update(estimates.kept_by_path(kept, {"domains": domains}))
  gold = scored.pair_source == records.GOLD                                   # [P]
  fits = scored.fit_half[scored.pair_item]                                   # [P]
  tree = {
      "n_resamples": options.n_resamples,
      "seed": options.seed,
      "domains": domains,
      "datasets": datasets,
      "calibration": calibration.summary(  # the fit is in float32: so its margins
          scored.reward_margin(gold & fits, np.float32), scored.reward_margin(gold & ~fits)),
      "length_confound": confounds.length_rates(scored, gold),
      "coverage": scored.coverage,
  }
  if several:
    tree["primary_templates"] = primary
  verdicts.add(tree, statistics, delta=options.delta)
  reasons: dict[str, str] = {}
  tree = estimates.finalize(tree, reasons=reasons)
  tree["null_reasons"] = reasons
  tables.release_unused_memory()
  return tree


def compute_metrics(items: Sequence[dict], pairs: Sequence[dict], scores: Scores,
                    options: Options) -> dict[str, Any]:
  """metrics.json for one scores set over the items and pairs tables' rows (in memory; a table
  too large for that goes through `pairs.read_items` and `runner.evaluate_all`)."""
  tree = metrics_from_scored(join(items, pairs, scores, options.allow_missing,
                                  options.item_fields), options)
  evidence.add_texts([tree], lambda ids: (item for item in items if item["item_id"] in ids))
  return tree
