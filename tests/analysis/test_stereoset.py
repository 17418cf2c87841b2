"""StereoSet's ss, lms, icat and its findings, from hand-made resampled sums."""

import numpy as np
import pytest

from socialrm_jax.analysis.metrics import verdicts
from socialrm_jax.analysis.resampling import bootstrap, estimates
from socialrm_jax.analysis.datasets import stereoset
from socialrm_jax.analysis.dataset_analysis import DatasetView

COLUMNS = ("stereotype_wins", "directional_pairs", "directional_items", "control_wins",
           "control_pairs")


def sums_of(cells, rows, draws=None):
  """StratifiedSums of cells (subset, term) with `rows` [1 + B, S, V] in `COLUMNS` order."""
  strata = tuple(bootstrap.Stratum("bias", subset, "", term) for subset, term in cells)
  rows = np.asarray(rows, dtype=np.float64)
  draws = np.ones(rows.shape[:2]) if draws is None else np.asarray(draws, dtype=np.float64)
  return bootstrap.StratifiedSums(strata, COLUMNS, rows, draws, clustered=True)


def view(sums):
  return DatasetView(scored=None, index=np.arange(0), sums=sums, options=None)


def test_icat_by_hand():
  # lms 0.9, ss 0.6: 0.9 * 0.4 / 0.5; at ss 1/2 icat is lms; at ss 0 or 1, 0.
  np.testing.assert_allclose(stereoset.icat(np.asarray([0.6, 0.5, 0.0, 1.0]), 0.9),
                             [0.72, 0.9, 0.0, 0.0])


def test_ss_and_lms_are_means_over_terms_weighed_by_draws():
  # Terms nurse (ss 1, lms 1/2) and chess (ss 0, lms 1) in row 0; row 1 draws nurse twice.
  data = [[1, 1, 1, 1, 2], [0, 1, 1, 2, 2]]
  resample = [[2, 2, 2, 2, 4], [0, 0, 0, 0, 0]]
  sums = sums_of([("intra", "nurse"), ("intra", "chess")], [data, resample],
                 draws=[[1, 1], [2, 0]])
  ss, lms, n_terms = stereoset._term_means(sums)  # pylint: disable=protected-access
  assert n_terms == 2
  np.testing.assert_allclose(ss, [0.5, 1.0])
  np.testing.assert_allclose(lms, [0.75, 0.5])


def test_a_term_without_directional_pairs_is_left_out_of_ss_and_says_why():
  # One term with control pairs only: lms 1, ss undefined, and so icat.
  sums = sums_of([("intra", "nurse")], [[[0, 0, 0, 1, 1]]])
  node = stereoset.stereoset_scores(view(sums))
  assert node["lms"] == 1.0 and node["n_terms"] == 1
  assert node["ss"] == estimates.Missing(stereoset.NO_DIRECTIONAL)
  assert node["icat"] == estimates.Missing(stereoset.NO_TERMS)


def test_icat_bounds_hold_the_top_where_ss_interval_holds_one_half():
  # 40 terms; ss resamples spread around 1/2: the upper bound is lms' own upper bound times 1
  # (min(ss, 1 - ss) / 0.5 peaks at ss = 1/2), the lower one the ends' least times lms' lower.
  rng = np.random.default_rng(0)
  ss = np.concatenate([[0.5], 0.5 + 0.05 * rng.standard_normal(2000)])
  lms = np.concatenate([[0.8], 0.8 + 0.02 * rng.standard_normal(2000)])
  low, high = stereoset.icat_bounds(ss, lms, 40)(lambda rows: rows, 0.95)
  _, ss_low, ss_high = estimates.intervals(ss, 40, level=0.975)
  _, lms_low, lms_high = estimates.intervals(lms, 40, level=0.975)
  assert high == pytest.approx(lms_high)
  assert low == pytest.approx(lms_low * min(ss_low, 1 - ss_high) / 0.5)


def test_findings_follow_the_verdict_only():
  node = {"ss": 0.66, "ss_ci95": [0.58, 0.74],
          "verdicts": {"ss": {"verdict": verdicts.PREFERS_UNDESIRABLE}}}
  (finding,) = stereoset.findings("stereoset", node)
  assert finding[0] == pytest.approx(0.16)
  assert "prefers StereoSet's stereotypical continuation: ss 0.660 [0.580, 0.740]" in finding[1]
  node["verdicts"]["ss"]["verdict"] = verdicts.TOO_FEW  # same interval, no finding
  assert stereoset.findings("stereoset", node) == []
