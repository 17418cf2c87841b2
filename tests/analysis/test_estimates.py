"""Reported values and intervals from resampled rows: the expanded percentiles, and the values
that get no interval (too few units, nothing defined, no spread) with the reason kept."""

import numpy as np
import pytest

from socialrm_jax.analysis import estimates


def test_resamples_of_one_value_are_no_interval_and_say_why():
  # 0 of 20 items: every resample is 0, so [0, 0] would claim a certainty 20 items lack.
  rows = np.zeros(1001)
  assert estimates.interval(rows, "none", units=20) == (0.0, estimates.Missing(estimates.NO_SPREAD))
  _, low, high = estimates.intervals(np.stack([rows, np.linspace(0, 1, 1001)]), 20)
  assert np.isnan(low[0]) and np.isnan(high[0])
  assert 0 < low[1] < high[1] < 1


def test_undefined_resamples_are_left_out_and_the_rest_may_have_no_spread():
  rows = np.asarray([0.5] + [np.nan] * 10 + [0.5] * 990)
  assert estimates.no_spread(rows[1:])
  assert estimates.interval(rows, "none", units=20)[1] == estimates.Missing(estimates.NO_SPREAD)
  nothing = np.asarray([0.5] + [np.nan] * 1000)
  assert not estimates.no_spread(nothing[1:])  # no interval, for its own reason
  assert estimates.interval(nothing, "no pairs", units=20)[1] == estimates.Missing("no pairs")


def test_too_few_units_come_first():
  rows = np.concatenate([[0.4], np.linspace(0, 1, 1000)])
  assert estimates.interval(rows, "none", units=9)[1] == estimates.Missing(estimates.too_few(9))


@pytest.mark.parametrize("units,expected", [(10, (0.86, 99.14)), (100, (2.31, 97.69)),
                                            (1000, (2.48, 97.52))])
def test_expanded_percentile_levels_as_documented(units, expected):
  np.testing.assert_allclose(estimates.percentile_levels(units), expected, atol=0.006)
