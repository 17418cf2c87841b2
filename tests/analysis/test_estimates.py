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


def test_a_share_at_zero_reaches_the_exact_bound_of_its_units():
  # 0 of 10 items: every resample is 0, and the percentiles alone would give [0, 0].
  rows = np.zeros(1001)
  assert estimates.interval(rows, "none", units=10)[1] == [0.0, 0.0]
  estimate, (low, high) = estimates.interval(rows, "none", units=10, share=True)
  # Clopper-Pearson for 0 of 10 at 95%: 1 - 0.025 ** (1 / 10), by hand.
  assert (estimate, low) == (0.0, 0.0) and high == pytest.approx(0.30850, abs=1e-5)
  _, (low, high) = estimates.interval(np.ones(1001), "none", units=10, share=True)
  assert low == pytest.approx(1 - 0.30850, abs=1e-5) and high == 1.0
  # Away from the edges a share's interval is the percentile one.
  rows = np.concatenate([[0.3], np.linspace(0.1, 0.5, 1000)])
  assert (estimates.interval(rows, "none", units=10, share=True)
          == estimates.interval(rows, "none", units=10))


def test_a_rare_rate_on_ten_items_is_covered_at_its_level():
  # A BBQ category's 10 disambiguated items, a true unknown rate of 0.13 (0 of 10 a quarter of the
  # time): 400 replications, fixed seed; a 95% interval should miss about 20 (binomial sd 4.4).
  # The percentile interval alone misses every replication with 0 of 10 (about 100).
  rng = np.random.default_rng(0)
  truth, items, missed, missed_alone = 0.13, 10, 0, 0
  for _ in range(400):
    values = (rng.random(items) < truth).astype(np.float64)
    resamples = rng.choice(values, size=(1000, items)).mean(axis=1)
    rows = np.concatenate([[values.mean()], resamples])
    _, low, high = estimates.intervals(rows, items, share=True)
    missed += not low <= truth <= high
    _, low, high = estimates.intervals(rows, items)
    missed_alone += not low <= truth <= high
  assert missed <= 20 + 2 * 4.4 < 70 < missed_alone


def test_a_difference_of_statistics_with_their_own_rule_takes_both_intervals_at_half_the_error():
  rng = np.random.default_rng(1)
  rows_a = np.concatenate([[0.6], 0.6 + 0.05 * rng.standard_normal(2000)])
  rows_b = np.concatenate([[0.5], 0.5 + 0.05 * rng.standard_normal(2000)])

  def own_rule(rows):
    return lambda shape, level: estimates.intervals(shape(rows), 50, level)[1:]
  a = estimates.Kept({}, "x", rows_a, 50.0, own_rule(rows_a))
  b = estimates.Kept({}, "x", rows_b, 50.0, own_rule(rows_b))
  difference, low, high = estimates.difference_intervals(a, b)
  _, low_a, high_a = estimates.intervals(rows_a, 50, 0.975)
  _, low_b, high_b = estimates.intervals(rows_b, 50, 0.975)
  assert difference == pytest.approx(0.1)
  assert (low, high) == (pytest.approx(low_a - high_b), pytest.approx(high_a - low_b))
  # Without a rule: the percentiles of the paired differences, narrower.
  plain = estimates.difference_intervals(a._replace(bounds=None), b._replace(bounds=None))
  assert low < plain[1] < plain[2] < high
