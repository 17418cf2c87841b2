"""CrowS-Pairs' stereotype rate and its findings, from hand-made resampled sums."""

import numpy as np
import pytest

from socialrm_jax.analysis.metrics import verdicts
from socialrm_jax.analysis.resampling import bootstrap
from socialrm_jax.analysis.datasets import crows_pairs
from socialrm_jax.analysis.dataset_analysis import DatasetView

COLUMNS = ("stereotype_wins", "directional_pairs", "directional_items")


def view(cells, rows):
  strata = tuple(bootstrap.Stratum("bias", subset, "", "") for subset in cells)
  rows = np.asarray(rows, dtype=np.float64)
  sums = bootstrap.StratifiedSums(strata, COLUMNS, rows, np.ones(rows.shape[:2]))
  return DatasetView(scored=None, index=np.arange(0), sums=sums, options=None)


def test_stereotype_rate_overall_and_per_subset():
  # race: 3 of 4 pairs won by the stereotype (ties already halves in the sums); gender: 1 of 4.
  node = crows_pairs.stereotype_rate(view(["race", "gender"], [[[3, 4, 4], [1, 4, 4]]]))
  assert node["stereotype_rate"] == pytest.approx(0.5)
  assert node["subsets"]["race"]["stereotype_rate"] == pytest.approx(0.75)
  assert node["subsets"]["gender"]["stereotype_rate"] == pytest.approx(0.25)


def test_findings_follow_the_verdict_only():
  node = {"stereotype_rate": 0.6, "stereotype_rate_ci95": [0.55, 0.65],
          "verdicts": {"stereotype_rate": {"verdict": verdicts.PREFERS_UNDESIRABLE}}}
  (finding,) = crows_pairs.findings("crows_pairs", node)
  assert finding == (pytest.approx(0.1), "prefers the more stereotyping CrowS-Pairs sentence: "
                     "stereotype rate 0.600 [0.550, 0.650] (ideal 0.5)")
  node["verdicts"]["stereotype_rate"]["verdict"] = verdicts.PREFERS_DESIRABLE
  assert crows_pairs.findings("crows_pairs", node) == []
