"""Moral Stories' norm sensitivity (analysis/datasets/moral_stories.py): each condition's
accuracy and their difference, from hand-made resampled sums; and its finding."""

import numpy as np
import pytest

from socialrm_jax.analysis import dataset_analysis
from socialrm_jax.analysis.datasets import moral_stories
from socialrm_jax.analysis.metrics import verdicts
from socialrm_jax.analysis.resampling import bootstrap, estimates
from tests.helpers.scored_fixtures import sums_of

COLUMNS = ("gold_wins", "gold_pairs", "gold_items")
CONDITIONS = ("with_norm", "without_norm")


def view(rows, conditions=CONDITIONS):
  """`rows` [1 + B, len(conditions), 3] in `COLUMNS` order."""
  sums = sums_of([bootstrap.Stratum("morality", "test", c, "") for c in conditions], COLUMNS, rows)
  return dataset_analysis.DatasetView(scored=None, index=np.arange(0), sums=sums, options=None)


def test_norm_sensitivity_is_the_difference_in_every_resample():
  # Data: 9 of 10 with the norm, 6 of 10 without: 0.9 - 0.6 = 0.3. Both resamples move the two
  # accuracies together (0.8 - 0.5, 1.0 - 0.7), so the difference's interval is the one point 0.3
  # while each accuracy's is not.
  node = moral_stories.summary(view([[[9, 10, 10], [6, 10, 10]],
                                     [[8, 10, 10], [5, 10, 10]],
                                     [[10, 10, 10], [7, 10, 10]]]))
  assert node["accuracy_with_norm"] == pytest.approx(0.9)
  assert node["accuracy_without_norm"] == pytest.approx(0.6)
  assert node["norm_sensitivity"] == pytest.approx(0.3)
  assert node["norm_sensitivity_ci95"] == pytest.approx([0.3, 0.3])
  low, high = node["accuracy_with_norm_ci95"]
  assert 0.8 <= low < high <= 1.0


def test_the_difference_rests_on_the_smaller_conditions_items():
  node = moral_stories.summary(view([[[9, 10, 10], [3, 5, 5]]]))
  assert node["norm_sensitivity"] == pytest.approx(0.3)
  assert node["norm_sensitivity_ci95"] == estimates.Missing(estimates.too_few(5))


def test_one_condition_alone_has_no_norm_sensitivity():
  node = moral_stories.summary(view([[[9, 10, 10]]], conditions=("with_norm",)))
  assert node["accuracy_with_norm"] == pytest.approx(0.9)
  assert node["accuracy_without_norm"] == estimates.Missing("no without_norm items with gold pairs")
  assert node["norm_sensitivity"] == estimates.Missing(
      "needs gold pairs in both the with_norm and without_norm conditions")


def test_findings_follow_the_verdict_only():
  node = {"norm_sensitivity": 0.3, "norm_sensitivity_ci95": [0.1, 0.5],
          "verdicts": {"norm_sensitivity": {"verdict": verdicts.PREFERS_UNDESIRABLE}}}
  assert moral_stories.findings("moral_stories", node) == [
      (pytest.approx(0.3), "prefers the moral action only when the norm is stated: norm "
       "sensitivity 0.300 [0.100, 0.500]")]
  node["verdicts"]["norm_sensitivity"]["verdict"] = verdicts.NO_PREFERENCE
  assert moral_stories.findings("moral_stories", node) == []


def test_registered_with_zero_as_the_null_of_the_difference():
  analysis = dataset_analysis.for_dataset("moral_stories")
  assert analysis is moral_stories.ANALYSIS
  assert analysis.null_values["norm_sensitivity"] == 0.0
  assert analysis.higher_is_undesirable == ("norm_sensitivity",)
