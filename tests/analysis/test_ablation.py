"""The value-bias ablation grid's statistics (analysis/studies/ablation.py) against hand-computed
cases and scipy: agency - communion from a probe, the base-family Mann-Whitney test, the tests
over a grid's rows, the table and the plot, and the checkpoints' log-spaced steps."""

import pytest
from scipy import stats

from socialrm_jax.analysis.studies import ablation


def test_family_test_matches_the_exact_mann_whitney_counted_by_hand():
  # x = {1, 2} below y = {3, 4}: U = 0, the least of the C(4, 2) = 6 equally likely rank sets,
  # so the two-sided exact p is 2 / 6.
  test = ablation.family_test({"llama": [1.0, 2.0], "gemma2": [3.0, 4.0]})
  assert test["families"] == ["llama", "gemma2"] and test["n"] == [2, 2]
  assert test["u"] == 0 and test["method"] == "exact"
  assert test["p_value"] == pytest.approx(1 / 3)
  assert test["difference"] == pytest.approx(-2.0)
  # x = {1, 2, 5}, y = {3, 4}: U = 2 (5 beats both); of the C(5, 3) = 10 rank sets of x, those
  # with U <= 2 (rank sum <= 8) are {1,2,3}, {1,2,4}, {1,2,5}, {1,3,4}: p = 2 * 4 / 10.
  test = ablation.family_test({"a": [1.0, 2.0, 5.0], "b": [3.0, 4.0]})
  assert test["u"] == 2 and test["p_value"] == pytest.approx(0.8)
  assert ablation.family_test({"a": [1.0, 2.0]}) is None
  assert ablation.family_test({"a": [1.0], "b": [2.0], "c": [3.0]}) is None


def test_agency_minus_communion_turns_the_probe_contrast_and_its_interval():
  probe = {"contrasts": {ablation.CONTRAST: {"difference": 0.2, "ci95": [0.1, 0.35],
                                             "p_value": 0.04}}}
  assert ablation.agency_minus_communion(probe) == {"value": -0.2, "ci95": [-0.35, -0.1],
                                                    "p_value": 0.04}


def test_log_spaced_steps():
  assert ablation.log_spaced_steps(100, 3) == [0, 1, 10, 100]
  # geomspace(1, 5, 4) = 1, 1.71, 2.92, 5.
  assert ablation.log_spaced_steps(5, 4) == [0, 1, 2, 3, 5]
  assert ablation.log_spaced_steps(3, 10) == [0, 1, 2, 3]
  assert ablation.log_spaced_steps(0, 4) == [0]


def _rows():
  rows = []
  for base, family, shift in (("llama", "llama", 0.5), ("gemma2", "gemma2", -0.5)):
    for quantity in (16, 32):
      for seed in (0, 1):
        run = f"hh/{base}/{quantity}/{seed}"
        for step in (0, 1, 4):
          value = shift * step / 4 + 0.01 * seed + 0.001 * quantity
          rows.append({"run": run, "source": "hh", "base": base, "family": family,
                       "quantity": quantity, "seed": seed, "step": step, "value": value,
                       "ci95": [value - 0.1, value + 0.1], "p_value": 0.5})
  return rows


def test_summarise_tests_the_last_checkpoints_by_family_and_per_cell():
  tests = ablation.summarise(_rows())
  final = tests["final"]
  # Every llama run ends above every gemma2 run: U = 4 * 4 = 16, exact p = 2 / C(8, 4).
  assert final["families"] == ["llama", "gemma2"] and final["u"] == 16
  assert final["p_value"] == pytest.approx(2 / 70)
  assert final["difference"] == pytest.approx(1.0)
  # Step 0 counts once per (base, seed): its weights are the same for every quantity.
  assert tests["step_0"]["n"] == [2, 2]
  assert tests["step_0"]["difference"] == pytest.approx(0.0)
  assert set(tests["cells"]) == {"hh/16", "hh/32"}
  assert tests["cells"]["hh/16"]["n"] == [2, 2]


def test_report_and_plot(tmp_path):
  rows = _rows()
  tests = ablation.summarise(rows)
  lines = ablation.report_lines(rows, tests, "grid.png")
  table = [line for line in lines if line.startswith("| hh |")]
  assert len(table) == 8
  assert "| hh | gemma2 | gemma2 | 16 | 0 | 0: 0.016 [-0.084, 0.116] | 4: -0.484 [-0.584, -0.384]" \
      in "\n".join(table)
  assert any("Mann-Whitney U=16" in line for line in lines)
  path = ablation.plot(rows, tmp_path / "grid.png")
  assert (tmp_path / "grid.png").stat().st_size > 10_000 and path.endswith("grid.png")


def test_family_test_with_tied_values_is_scipys_normal_approximation():
  test = ablation.family_test({"llama": [0.1, 0.2, 0.2], "gemma2": [0.2, 0.3, 0.4]})
  expected = stats.mannwhitneyu([0.1, 0.2, 0.2], [0.2, 0.3, 0.4], method="asymptotic")
  assert test["method"] == "asymptotic" and test["p_value"] == float(expected.pvalue)


def test_family_test_records_the_method_it_computed_with():
  # Nine runs against three, no ties: the exact distribution (a size rule on the larger sample
  # alone would call it asymptotic).
  x, y = [0.1 * i for i in range(9)], [0.05, 0.35, 0.95]
  test = ablation.family_test({"llama": x, "gemma2": y})
  assert test["method"] == "exact"
  assert test["p_value"] == float(stats.mannwhitneyu(x, y, method="exact").pvalue)
