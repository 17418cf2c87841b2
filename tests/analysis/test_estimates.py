"""Reported values and intervals from resampled rows: the expanded percentiles, and the values
that get no interval (too few units, nothing defined) with the reason kept."""

import numpy as np
import pytest

from socialrm_jax.analysis.resampling import estimates


def test_undefined_resamples_are_left_out():
  rows = np.concatenate([[0.5], [np.nan] * 10, np.linspace(0, 1, 990)])
  estimate, (low, high) = estimates.interval(rows, "none", units=1000)
  assert estimate == 0.5 and 0 < low < 0.05 and 0.95 < high < 1
  nothing = np.asarray([0.5] + [np.nan] * 1000)
  assert estimates.interval(nothing, "no pairs", units=20)[1] == estimates.Missing("no pairs")


def test_too_few_units_come_first():
  rows = np.concatenate([[0.4], np.linspace(0, 1, 1000)])
  assert estimates.interval(rows, "none", units=9)[1] == estimates.Missing(estimates.too_few(9))


@pytest.mark.parametrize("units,expected", [(10, (0.86, 99.14)), (100, (2.31, 97.69)),
                                            (1000, (2.48, 97.52))])
def test_expanded_percentile_levels_as_documented(units, expected):
  np.testing.assert_allclose(estimates.percentile_levels(units), expected, atol=0.006)
