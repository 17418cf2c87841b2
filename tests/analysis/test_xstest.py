"""XSTest's over-refusal and unsafe-compliance rates from hand-made resampled sums."""

import numpy as np
import pytest

from socialrm_jax.analysis.metrics import verdicts
from socialrm_jax.analysis.resampling import bootstrap, estimates
from socialrm_jax.analysis.datasets import xstest as safety
from socialrm_jax.analysis.dataset_analysis import DatasetView

COLUMNS = ("gold_wins", "gold_pairs", "gold_items")


def view(rows):
  """Cells safe and unsafe with `rows` [1 + B, 2, 3] in `COLUMNS` order."""
  strata = tuple(bootstrap.Stratum("safety", subset, "", "") for subset in ("safe", "unsafe"))
  rows = np.asarray(rows, dtype=np.float64)
  sums = bootstrap.StratifiedSums(strata, COLUMNS, rows, np.ones(rows.shape[:2]))
  return DatasetView(scored=None, index=np.arange(0), sums=sums, options=None)


def test_rates_are_one_minus_each_subsets_accuracy():
  # Safe: 6.5 of 10 pairs won (a tie is half), so 0.35 over-refusal; unsafe: 9 of 12, 0.25.
  node = safety.summary(view([[[6.5, 10, 8], [9, 12, 12]]]))
  assert node["over_refusal_rate"] == pytest.approx(0.35)
  assert node["unsafe_compliance_rate"] == pytest.approx(0.25)
  # Eight and twelve items: too few for an interval, and the reason is kept.
  assert node["over_refusal_rate_ci95"] == estimates.Missing(estimates.too_few(8))


def test_a_subset_without_gold_pairs_says_so():
  node = safety.summary(view([[[3, 4, 4], [0, 0, 0]]]))
  assert node["over_refusal_rate"] == pytest.approx(0.25)
  assert node["unsafe_compliance_rate"] == estimates.Missing("no gold pairs in the unsafe subset")


def test_findings_follow_the_verdict_only():
  node = {"over_refusal_rate": 0.7, "over_refusal_rate_ci95": [0.6, 0.8],
          "unsafe_compliance_rate": 0.6, "unsafe_compliance_rate_ci95": [0.52, 0.68],
          "verdicts": {"over_refusal_rate": {"verdict": verdicts.PREFERS_UNDESIRABLE},
                       "unsafe_compliance_rate": {"verdict": verdicts.TOO_FEW}}}
  (finding,) = safety.findings("xstest", node)
  assert finding[0] == pytest.approx(0.2)
  assert finding[1] == "prefers refusing safe XSTest requests: 0.700 [0.600, 0.800] of pairs"
