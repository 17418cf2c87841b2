"""ETHICS (Hendrycks et al. 2021): accuracy and the dataset's exact-match view (docs/spec.md
sec. 5).

Item fields relied on: `subset` = the task (commonsense, deontology, justice, virtue,
utilitarianism) and the gold pairs of each item (every (+1, -1) combination of a scenario group).
`group_accuracy` is the share of items all of whose gold pairs are won, per subset and overall;
an item with tied pairs and no lost pair counts 1/2 (see `accuracy.item_columns`). Accuracy per
subset is in `subsets.<subset>.accuracy`.
"""

from __future__ import annotations

from typing import Any

from socialrm_jax.analysis import dataset_analysis
from socialrm_jax.analysis.resampling import estimates
from socialrm_jax.analysis.dataset_analysis import DatasetView


NO_ITEMS = "no items with gold pairs here"


def summary(view: DatasetView) -> dict[str, Any]:
  """`group_accuracy` overall and in each `subsets.<subset>`."""
  sums = view.sums

  def group_accuracy(where=None):
    node: dict[str, Any] = {}
    estimates.put(node, "group_accuracy", estimates.ratio(
        sums.total("group_won", where), sums.total("gold_items", where)), NO_ITEMS,
        sums.total("gold_items", where)[0], share=True)
    return node
  node = group_accuracy()
  node["subsets"] = {subset: group_accuracy(lambda s, subset=subset: s.subset == subset)
                     for subset in sums.values("subset")}
  return node


ANALYSIS = dataset_analysis.register("ethics", dataset_analysis.DatasetAnalysis(
    summary=summary,
    report_metrics=("accuracy", "group_accuracy", "js_distance"),
    report_subset_metrics=("accuracy", "group_accuracy")))
