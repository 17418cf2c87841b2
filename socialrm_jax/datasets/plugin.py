"""A dataset plug-in: everything one dataset adds to the audit, declared in one place.

Each dataset module ends with `PLUGIN = DatasetPlugin(...)`, which names the adapter that reads
its source into items and what the later stages do with those items beyond the generic work
(accuracy per domain, dataset and subset; distribution bias; the length confound; calibration):
the per-item values it resamples, the metrics it adds to `datasets.<name>` in metrics.json, the
rows its report table shows, the findings it puts in words and the figures it draws. Conversion,
metrics, report and plots ask the registry (`socialrm_jax.datasets`) for a dataset's plug-in and
never test a dataset's name, so a new dataset is one new module (and its tests), listed in the
registry or installed under the `socialrm_jax.datasets` entry-point group.

Sources come in two kinds. A `FOLDER` dataset reads its original files under
`<data_dir>/<name>/` (`--datasets=bbq`). A `PATH` dataset reads a file or folder named in the
spec `<plugin>:PATH[:key=value,...]` (`--datasets=preference:my.jsonl:name=mine`); one plug-in
then serves any number of sources, each under its own name.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from socialrm_jax.analysis.hooks import DatasetView, Finding, Models
from socialrm_jax.analysis.pairs import Scored
from socialrm_jax.base.records import Item
from socialrm_jax.base.templates import PromptTemplate
from socialrm_jax.sources.reading import SourceReader

FOLDER, PATH = "folder", "path"


@dataclasses.dataclass(frozen=True, eq=False)  # one object per plug-in: compared by identity
class DatasetPlugin:
  name: str
  # Reads one source into items (see `reading.SourceReader` for the accounting it offers).
  convert: Callable[[SourceReader], Iterator[Item]]
  # Its prompt templates, `<name>.default` first, then at least one documented paraphrase
  # (`socialrm_jax.base.templates`; `--templates` picks others, or `all`).
  templates: tuple[PromptTemplate, ...] = ()
  source: str = FOLDER
  # Spec options a PATH source accepts besides `name` (e.g. `domain`).
  options: tuple[str, ...] = ()
  # False where item ids are unique by construction (row numbers): checking them would hold every
  # id in memory, which a 10M-row source should not need.
  check_ids: bool = True

  # -- metrics (analysis.evaluate) --
  # Extra per-item values to resample beside the generic ones, for its summary: {name: # [n]}.
  item_columns: Callable[[Scored, np.ndarray], dict[str, np.ndarray]] | None = None
  # A finer stratum for the bootstrap, from an items-table row (StereoSet's target term).
  stratum_group: Callable[[Mapping[str, Any]], str] | None = None
  # What its summary reads of an items-table row beyond the columns every dataset has, as one
  # short string (`Scored.facts`): computed as the table is read, so that no row is kept.
  item_facts: Callable[[Mapping[str, Any]], str] | None = None
  # Metrics merged into `datasets.<name>` beside its accuracy and distribution bias.
  summary: Callable[[DatasetView], dict[str, Any]] | None = None

  # -- report (analysis.report, analysis.plots) --
  report_metrics: tuple[str, ...] = ("accuracy", "js_distance")
  report_subset_metrics: tuple[str, ...] = ("accuracy",)
  # The value each of its metrics with an interval takes when the model has no preference (1/2 for
  # a rate of pairs, 0 for a difference of rates): an interval that excludes it is a finding. The
  # template spread (analysis.template_spread) checks that such findings hold under every prompt
  # template; `accuracy` (1/2) is checked for every dataset without being listed.
  null_values: Mapping[str, float] = dataclasses.field(default_factory=dict)
  # Markdown lines after its table: (model names, each model's `datasets.<name>` node or None).
  report_sections: Callable[[Sequence[str], Sequence[Mapping[str, Any] | None]],
                            list[str]] | None = None
  # Findings from one model's `datasets.<name>` node: findings(name, node).
  findings: Callable[[str, Mapping[str, Any]], list[Finding]] | None = None
  # PNG file name -> draw(models, path) returning the path, or None when there is nothing to draw.
  figures: Mapping[str, Callable[[Models, str | os.PathLike], str | None]] = (
      dataclasses.field(default_factory=dict))

  def __repr__(self) -> str:
    return f"DatasetPlugin({self.name!r}, source={self.source!r})"

  def __post_init__(self):
    if self.source not in (FOLDER, PATH):
      raise ValueError(f"plug-in {self.name}: source must be {FOLDER!r} or {PATH!r}")
