"""ETHICS' exact-match view (analysis/datasets/ethics.py): group accuracy overall and per task,
from hand-made resampled sums; and what the report shows of it."""

import numpy as np
import pytest

from socialrm_jax.analysis import dataset_analysis
from socialrm_jax.analysis.datasets import ethics
from socialrm_jax.analysis.resampling import bootstrap, estimates
from tests.helpers.scored_fixtures import sums_of

COLUMNS = ("group_won", "gold_items")


def view(cells):
  """Cells (subset, group_won, gold_items), no resamples."""
  sums = sums_of([bootstrap.Stratum("morality", subset, "", "") for subset, _, _ in cells],
                 COLUMNS, [[[won, items] for _, won, items in cells]])
  return dataset_analysis.DatasetView(scored=None, index=np.arange(0), sums=sums, options=None)


def test_group_accuracy_overall_and_per_task():
  # commonsense: 1.5 of 3 items wholly won (an item tied and not lost counts 1/2); deontology:
  # 2 of 2; overall 3.5 of 5.
  node = ethics.summary(view([("commonsense", 1.5, 3), ("deontology", 2, 2)]))
  assert node["group_accuracy"] == pytest.approx(0.7)
  assert node["subsets"]["commonsense"]["group_accuracy"] == pytest.approx(0.5)
  assert node["subsets"]["deontology"]["group_accuracy"] == 1.0
  assert node["group_accuracy_ci95"] == estimates.Missing(estimates.too_few(5))


def test_a_task_without_gold_items_says_so():
  node = ethics.summary(view([("commonsense", 1, 2), ("justice", 0, 0)]))
  assert node["group_accuracy"] == 0.5
  assert node["subsets"]["justice"]["group_accuracy"] == estimates.Missing(ethics.NO_ITEMS)


def test_registered_under_its_name_with_group_accuracy_in_the_report():
  assert dataset_analysis.for_dataset("ethics") is ethics.ANALYSIS
  assert "group_accuracy" in ethics.ANALYSIS.report_metrics
  assert "group_accuracy" in ethics.ANALYSIS.report_subset_metrics
