"""The calibration metrics (analysis/metrics/calibration.py) on cases worked by hand."""

import zlib

import numpy as np
import pytest

from socialrm_jax.analysis.metrics import calibration
from socialrm_jax.analysis.tables import pairs
from socialrm_jax.analysis.resampling.estimates import Missing


@pytest.mark.parametrize("a,won,lost", [(2.0, 3, 1), (0.5, 5, 2), (7.0, 9, 4)])
def test_the_fitted_temperature_of_won_and_lost_pairs_of_one_margin(a, won, lost):
  """`won` pairs of margin +a and `lost` of -a: d loss / d(1/T) = 0 where won * sigmoid(-a / T) =
  lost * sigmoid(a / T), i.e. exp(a / T) = won / lost, T = a / ln(won / lost)."""
  margin = np.array([a] * won + [-a] * lost, dtype=np.float32)
  assert calibration.fit_temperature(margin) == pytest.approx(a / np.log(won / lost), rel=1e-5)


def test_the_fit_is_the_minimum_of_the_loss_over_a_grid():
  margin = np.random.default_rng(0).normal(1.0, 3.0, 2000)
  grid = np.exp(np.linspace(-3, 3, 6001))
  best = grid[np.argmin([np.mean(np.logaddexp(0, -margin / t)) for t in grid])]
  assert calibration.fit_temperature(margin) == pytest.approx(best, rel=1e-3)


def test_all_won_pairs_fit_a_temperature_near_zero_and_all_ties_keep_one():
  """Every pair won: the loss falls as T -> 0, so the fit ends near the bound below; every margin
  0: the loss is ln 2 at any T, and T stays 1."""
  won = np.array([1.0, 2.0, 3.0])
  t = calibration.fit_temperature(won)
  assert np.exp(-calibration.LOG_T_BOUND) <= t < 0.01
  assert calibration.bradley_terry_loss(np.log(t), won) < calibration.bradley_terry_loss(0.0, won)
  assert calibration.fit_temperature(np.zeros(4)) == 1.0


def test_expected_calibration_error_by_hand():
  """Margins ln 3, -ln 3, 0 at T = 1: p = 3/4, 1/4, 1/2; confidences 3/4, 3/4, 1/2, correct 1, 0,
  1/2. Bin 11 (3/4 * 15 = 11.25) holds two pairs, |1 - 3/2| = 1/2; bin 7 holds the tie, |1/2 -
  1/2| = 0: ECE = (1/2) / 3. At T = 2: p = sqrt(3) / (1 + sqrt(3)) = 0.634 for the first two (bin
  9), |1 - 2 * 0.634| / 3."""
  margin = np.array([np.log(3), -np.log(3), 0.0])
  assert calibration.expected_calibration_error(margin) == pytest.approx(1 / 6)
  p = np.sqrt(3) / (1 + np.sqrt(3))
  assert calibration.expected_calibration_error(margin, 2.0) == pytest.approx(abs(1 - 2 * p) / 3)
  # Chunked sums are the same sums.
  assert calibration.expected_calibration_error(margin, 2.0, chunk=1) == pytest.approx(
      abs(1 - 2 * p) / 3)


def test_the_fit_half_is_the_low_bit_of_the_ids_crc32_whatever_the_order():
  ids = ["a", "b", "c", "item-17", "bbq/42"]
  expected = [zlib.crc32(i.encode()) % 2 == 0 for i in ids]
  assert pairs.fit_half(ids).tolist() == expected
  assert pairs.fit_half(ids[::-1]).tolist() == expected[::-1]


def test_summary_fits_on_one_half_and_reports_on_the_other():
  fit = np.array([2.0, 2.0, 2.0, -2.0])
  report = np.array([np.log(3), -np.log(3), 0.0])
  node = calibration.summary(fit, report)
  t = 2 / np.log(3)
  assert node["n_fit_pairs"] == 4 and node["n_eval_pairs"] == 3 and node["n_bins"] == 15
  assert node["temperature"] == pytest.approx(t, rel=1e-5)
  assert node["ece_before"] == pytest.approx(1 / 6)
  assert node["ece_after"] == pytest.approx(calibration.expected_calibration_error(report, t))
  empty = calibration.summary(fit, np.array([]))
  assert all(isinstance(empty[k], Missing) for k in ("ece_before", "ece_after", "temperature"))
