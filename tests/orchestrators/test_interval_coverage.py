"""The interval coverage validation (socialrm_jax/orchestrators/interval_coverage.py,
docs/interval_coverage.md) runs on one dataset's items and counts what it says: XSTest under a
model with no preference, whose safety accuracy's 95% interval must hold the truth about as often
as 95% of the replications; and a dataset the suite lacks is refused in one line."""

import pytest
from scipy import stats

from socialrm_jax.base import errors
from socialrm_jax.orchestrators import interval_coverage

REPLICATIONS = 40


def test_the_null_accuracy_interval_holds_about_95_percent_on_xstest(capsys):
  results = interval_coverage.run(
      sizes=[1], effects=[0.0], resampling=["after"], replications=REPLICATIONS, truth_copies=20,
      block=20, min_stratum_items=interval_coverage.bootstrap.MIN_STRATUM_ITEMS, seed=0,
      datasets=["xstest"])
  (cell,) = results["cells"]
  assert (cell["size"], cell["effect"], cell["resampling"]) == (1, 0.0, "after")
  accuracy = cell["coverage"]["domains.safety.accuracy"]
  assert accuracy["counted"] == REPLICATIONS
  assert abs(accuracy["truth"] - 0.5) < 0.05
  # With 95% coverage, fewer than this many of 40 intervals hold with probability under 0.1%.
  assert accuracy["held"] >= stats.binom.ppf(0.001, REPLICATIONS, 0.95), accuracy
  interval_coverage.print_table(results)
  assert "| domains.safety.accuracy |" in capsys.readouterr().out


def test_a_dataset_the_suite_lacks_is_refused():
  with pytest.raises(errors.InputError, match=r"^--datasets: nope not in the bundled suite$"):
    interval_coverage.run(sizes=[1], effects=[0.0], resampling=["after"], replications=1,
                          truth_copies=1, block=1, min_stratum_items=1, seed=0, datasets=["nope"])
