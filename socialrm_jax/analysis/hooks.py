"""What a dataset plug-in's analysis hooks see and return, and the set of plug-ins a metrics run
is handed.

The plug-ins (`socialrm_jax.datasets.<name>`) sit above the analysis primitives they use, and the
registry (`socialrm_jax.datasets`) above the plug-ins; so the types both sides share live here,
below them: the analysis code names them without importing a plug-in or the registry. An
orchestrator (`socialrm-metrics`, the audit pipeline) reads the registry once and hands it down
as `Options.plugins`; `report.write` and `plots.write_all` take it as an argument.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Mapping

import numpy as np

from socialrm_jax.analysis import bootstrap, pairs
from socialrm_jax.analysis.pairs import Scored

# A finding: (severity, text); the report sorts findings of every dataset by severity.
Finding = tuple[float, str]
Models = Mapping[str, Mapping[str, Any]]  # model name -> metrics.json tree


class Plugins(Mapping[str, Any]):
  """The registered dataset plug-ins by name (`datasets.plugin.DatasetPlugin` values), and the
  generic one that evaluates items of a dataset no plug-in is registered under (a path source's
  own name)."""

  def __init__(self, by_name: Mapping[str, Any], generic: str):
    if generic not in by_name:
      raise ValueError(f"the generic plug-in {generic!r} is not among {list(by_name)}")
    self._by_name = dict(by_name)
    self.generic = generic

  def __getitem__(self, name: str) -> Any:
    return self._by_name[name]

  def __iter__(self) -> Iterator[str]:
    return iter(self._by_name)

  def __len__(self) -> int:
    return len(self._by_name)

  def for_dataset(self, name: str) -> Any:
    """The plug-in that evaluates items whose `dataset` is `name`."""
    return self._by_name.get(name) or self._by_name[self.generic]


@dataclasses.dataclass(frozen=True, eq=False)
class Options:
  """How a metrics run computes: the bootstrap's resamples and seed, the least items a compared
  group needs, whether items without scores are left out rather than refused, and the plug-ins
  that evaluate each dataset (the registry, handed down; the counterfactual measures need none)."""
  n_resamples: int = bootstrap.N_RESAMPLES
  seed: int = bootstrap.SEED
  # Groups compared by their selection rates (BBQ's) need this many items each to enter a spread.
  min_group_items: int = 5
  allow_missing: bool = False
  plugins: Plugins | None = None

  def plugin(self, dataset: str) -> Any:
    """The plug-in that evaluates items whose `dataset` is `dataset`."""
    if self.plugins is None:
      raise ValueError("Options.plugins is not set: the metrics' caller reads the registry "
                       "(socialrm_jax.registry.plugins()) and hands it down")
    return self.plugins.for_dataset(dataset)

  def item_fields(self, row: Mapping[str, Any]) -> tuple[str, str]:
    """What the plug-in of an items-table row reads of it, kept per item in place of the row
    (`pairs.ItemFields`): its stratum group and its item facts ('' where it has no such hook)."""
    if self.plugins is None:
      return pairs.no_fields(row)
    plugin = self.plugins.for_dataset(str(row.get("dataset")))
    return (str(plugin.stratum_group(row)) if plugin.stratum_group is not None else "",
            plugin.item_facts(row) if plugin.item_facts is not None else "")


@dataclasses.dataclass(frozen=True)
class DatasetView:
  """What a plug-in's metric hook sees: one dataset's items `index` (into `scored`) and the
  resampled sums of their per-item values (the generic ones and the plug-in's own columns)."""
  scored: Scored
  index: np.ndarray  # [n]
  sums: bootstrap.StratifiedSums
  options: Options
