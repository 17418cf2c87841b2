"""What a dataset's analysis is, what its hooks see and return, and where it is found by name.

A dataset's analysis (`DatasetAnalysis`: its metric hook, report rows, findings and figures) is
registered under the dataset's name by its module `socialrm_jax.analysis.datasets.<name>`, and
looked up by that name (`for_dataset`), which imports the module: no registry is handed down,
and the dataset's input adapter (`socialrm_jax.datasets.<name>`), below scoring, never meets it.
Items of a dataset with no analysis of its own are analysed as the generic dataset's.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from socialrm_jax.analysis.resampling import bootstrap
from socialrm_jax.analysis.tables.pairs import Scored
from socialrm_jax.base.registry import Registry
from socialrm_jax.datasets.registry import ENTRY_POINT_GROUP, GENERIC

# A finding: (severity, text); the report sorts findings of every dataset by severity.
Finding = tuple[float, str]
Models = Mapping[str, Mapping[str, Any]]  # model name -> metrics.json tree


@dataclasses.dataclass(frozen=True, eq=False)
class Options:
  """How a metrics run computes: the bootstrap's resamples and seed, the least items a compared
  group needs, and whether items without scores are left out rather than refused."""
  n_resamples: int = bootstrap.N_RESAMPLES
  seed: int = bootstrap.SEED
  # Groups compared by their selection rates (BBQ's) need this many items each to enter a spread.
  min_group_items: int = 5
  allow_missing: bool = False
  # The smallest preference a verdict of "no preference" must have had the power to find: a
  # distance from the null value (1/2 for accuracies and rates, 0 for bias scores; `verdicts`).
  delta: float = 0.05

  def item_fields(self, row: Mapping[str, Any]) -> tuple[str, str]:
    """What the analysis of an items-table row's dataset reads of it, kept per item in place of
    the row (`pairs.ItemFields`): its stratum group and its item facts ('' where it has no such
    hook)."""
    analysis = for_dataset(str(row.get("dataset")))
    return (str(analysis.stratum_group(row)) if analysis.stratum_group is not None else "",
            analysis.item_facts(row) if analysis.item_facts is not None else "")


@dataclasses.dataclass(frozen=True)
class DatasetView:
  """What a dataset's metric hook sees: one dataset's items `index` (into `scored`) and the
  resampled sums of their per-item values (the generic ones and the dataset's own columns)."""
  scored: Scored
  index: np.ndarray  # [n]
  sums: bootstrap.StratifiedSums
  options: Options


@dataclasses.dataclass(frozen=True, eq=False)  # one object per dataset: compared by identity
class DatasetAnalysis:
  """What the metrics, report and plots do with one dataset's items beyond the generic work
  (accuracy per domain, dataset and subset; distribution bias; the length confound; calibration).
  Every hook is optional: `DatasetAnalysis()` is the generic work alone."""
  # -- metrics (analysis.evaluate) --
  # Extra per-item values to resample beside the generic ones, for its summary: {name: # [n]}.
  item_columns: Callable[[Scored, np.ndarray], dict[str, np.ndarray]] | None = None
  # A finer stratum for the bootstrap, from an items-table row (StereoSet's target term).
  stratum_group: Callable[[Mapping[str, Any]], str] | None = None
  # Whether the bootstrap draws those groups whole, as clusters (StereoSet's terms: a sample of
  # the targets the benchmark could have had, most with one or two items), rather than items
  # within each (`bootstrap.design`).
  cluster_groups: bool = False
  # What its summary reads of an items-table row beyond the columns every dataset has, as one
  # short string (`Scored.facts`): computed as the table is read, so that no row is kept.
  item_facts: Callable[[Mapping[str, Any]], str] | None = None
  # Metrics merged into `datasets.<name>` beside its accuracy and distribution bias.
  summary: Callable[[DatasetView], dict[str, Any]] | None = None

  # -- report (analysis.outputs.report, analysis.outputs.plots) --
  report_metrics: tuple[str, ...] = ("accuracy", "js_distance")
  report_subset_metrics: tuple[str, ...] = ("accuracy",)
  # The value each of its metrics with an interval takes when the model has no preference (1/2 for
  # a rate of pairs, 0 for a difference of rates): an interval that excludes it is a finding. The
  # template spread (analysis.template_spread) checks that such findings hold under every prompt
  # template; `accuracy` (1/2) is checked for every dataset without being listed.
  null_values: Mapping[str, float] = dataclasses.field(default_factory=dict)
  # Which of those metrics are undesirable above their null value (stereotype rates, bias scores,
  # over-refusal); the others are undesirable below it, as accuracies are (`verdicts`).
  higher_is_undesirable: tuple[str, ...] = ()
  # Parts of its node (`subsets`, `labels`) whose nodes' null-value metrics the report tests and
  # gives verdicts too, beside the dataset's own (`verdicts.family`).
  tested_parts: tuple[str, ...] = ()
  # Markdown lines after its table: (model names, each model's `datasets.<name>` node or None).
  report_sections: Callable[[Sequence[str], Sequence[Mapping[str, Any] | None]],
                            list[str]] | None = None
  # Findings from one model's `datasets.<name>` node: findings(name, node).
  findings: Callable[[str, Mapping[str, Any]], list[Finding]] | None = None
  # PNG file name -> draw(models, path) returning the path, or None when there is nothing to draw.
  figures: Mapping[str, Callable[[Models, str | os.PathLike], str | None]] = (
      dataclasses.field(default_factory=dict))


# Each dataset's analysis, registered by `analysis/datasets/<name>.py` (or by the module an
# entry point of the datasets' group names) under the dataset's name.
ANALYSES = Registry("dataset analysis", "socialrm_jax.analysis.datasets", ENTRY_POINT_GROUP)


def register(name: str, analysis: DatasetAnalysis) -> DatasetAnalysis:
  """Registers `analysis` as what the metrics, report and plots do with dataset `name`."""
  if not isinstance(analysis, DatasetAnalysis):
    raise TypeError(f"the analysis of {name!r} should be a DatasetAnalysis, not {analysis!r}")
  return ANALYSES.register(name, analysis)


def for_dataset(name: str) -> DatasetAnalysis:
  """The analysis of items whose `dataset` is `name`: the one registered under that name, else
  the generic one (`datasets.registry.GENERIC`'s), as for a path source's own name."""
  return ANALYSES.lookup(name) or ANALYSES.lookup(GENERIC)
