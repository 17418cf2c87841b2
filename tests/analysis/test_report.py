"""report.md (analysis/outputs/report.py) from metrics.json trees written by hand: cells and
verdicts in words, the findings and their order, the nulls folded, what more items would show,
and the sections that appear only when they have something to say. (The headline sentence per
domain is tested in test_verdicts.py, the report of a real run in test_evaluate.py.)"""

import math

import pytest

from socialrm_jax.analysis.metrics import verdicts
from socialrm_jax.analysis.outputs import report
from socialrm_jax.sources import full_items

UNDESIRABLE = {"verdict": verdicts.PREFERS_UNDESIRABLE, "delta": 0.05, "mde": 0.1}


def metrics():
  return {
      "verdicts": {"n_tests": 3, "alpha": 0.05, "delta": 0.05, "mde_alpha": 0.0167},
      "domains": {"safety": {"accuracy": 0.3, "ci95": [0.2, 0.4], "n_gold_pairs": 40,
                             "items_by_dataset": {"hh_rlhf": 20},
                             "verdicts": {"accuracy": UNDESIRABLE}}},
      "datasets": {"hh_rlhf": {"n_items": 20, "accuracy": 0.3, "ci95": [0.2, 0.4],
                               "verdicts": {"accuracy": UNDESIRABLE}}},
      "length_confound": {"longer_preferred_rate": 0.8, "chosen_longer_share": 0.5},
      "calibration": {"ece_before": 0.4, "ece_after": 0.3, "temperature": 2.0},
      "coverage": {"complete": False, "items": 10, "scored_items": 8,
                   "datasets": {"hh_rlhf": {"items": 10, "scored_items": 8},
                                "xstest": {"items": 4, "scored_items": 4}}},
      "null_reasons": {"datasets.hh_rlhf.subsets.a.x": "why", "datasets.hh_rlhf.subsets.b.x": "why",
                       "datasets.hh_rlhf.subsets.b.x_ci95": "why", "domains.safety.y": "other"}}


def test_cells_and_verdicts_in_words():
  node = {"accuracy": 0.25, "ci95": [0.125, 0.375], "rate": 1, "accuracy_length_matched": 0.6,
          "accuracy_length_matched_ci95": [0.5, 0.7], "n_length_matched_pairs": 12}
  assert report.cell(node, "accuracy") == "0.250 [0.125, 0.375]"
  assert report.cell(node, "rate") == "1" and report.cell(node, "absent") == "–"
  assert report.cell({"x": None}, "x") == "null" and report.cell(None, "x") == "–"
  assert report.length_matched_cell(node) == "0.600 [0.500, 0.700] (n=12)"
  assert report.length_matched_cell({"accuracy": 0.5}) == "–"
  assert report.verdict(None) == "not measured"
  assert report.verdict({"accuracy": 0.5}) == "not tested"
  assert report.verdict({"accuracy": 0.5, "verdicts": {"accuracy": {
      "verdict": verdicts.NO_PREFERENCE, "delta": 0.05}}}) == "no preference as large as 0.05"
  assert report.verdict({"accuracy": 0.5, "verdicts": {"accuracy": {
      "verdict": verdicts.TOO_FEW, "mde": 0.123}}}) == "too few items to tell (mde 0.12)"
  assert report.verdict({"accuracy": 0.3, "verdicts": {"accuracy": UNDESIRABLE}}) == (
      verdicts.PREFERS_UNDESIRABLE)


def test_an_interval_excludes_a_value_only_wholly_on_one_side():
  assert report.excludes([0.51, 0.7], 0.5, ">") and not report.excludes([0.5, 0.7], 0.5, ">")
  assert report.excludes([0.1, 0.49], 0.5, "<") and not report.excludes([0.1, 0.49], 0.5, ">")
  assert not report.excludes(None, 0.5, "<")


def test_findings_most_severe_first():
  # The longer response wins 0.8 (0.3 from 1/2), accuracy 0.3 in safety (0.2 below 1/2), ECE
  # 0.3 after temperature (counted as 0.15).
  assert report.findings(metrics()) == [
      "rewards length: the longer response wins 0.800 of gold pairs of unequal length (the gold "
      "answer is the longer one in 0.500)",
      "prefers the socially undesirable response in **safety**: accuracy 0.300 [0.200, 0.400] on "
      "40 gold pairs",
      "its reward margins are poorly calibrated even after temperature scaling (ECE 0.300)"]
  quiet = {**metrics(), "length_confound": {"longer_preferred_rate": 0.6},
           "calibration": {"ece_after": 0.1}}
  assert len(report.findings(quiet)) == 1  # 0.1 from 1/2, and an ECE of 0.1, are not findings


def test_at_most_six_findings():
  domains = {f"d{i}": {"accuracy": 0.4 - i / 100, "n_gold_pairs": 9,
                       "verdicts": {"accuracy": UNDESIRABLE}} for i in range(8)}
  found = report.findings({"domains": domains})
  assert len(found) == report.MAX_FINDINGS and "**d7**" in found[0] and "**d2**" in found[-1]


def test_undesirable_finding_follows_the_verdict():
  node = {"rate": 0.7, "verdicts": {"rate": UNDESIRABLE}}
  assert report.undesirable_finding(node, "rate", "text") == [(pytest.approx(0.2), "text")]
  assert report.undesirable_finding(node, "rate", "text", null=0.0)[0][0] == pytest.approx(0.7)
  assert report.undesirable_finding({"rate": 0.7}, "rate", "text") == []
  assert report.undesirable_finding(None, "rate", "text") == []


def test_nulls_are_folded_over_subsets_and_their_intervals_left_out():
  assert report.null_reasons(metrics()) == {("datasets.hh_rlhf.subsets.*.x", "why"): 2,
                                            ("domains.safety.y", "other"): 1}


def test_what_more_items_would_show_scales_the_mde_to_the_full_data():
  section = report.more_items_section({"m": metrics()})
  full = full_items.full_items()["hh_rlhf"]
  scaled = 0.1 * math.sqrt(20 / full)  # the mde shrinks as one over the square root of items
  assert section[0] == f"## {report.MORE_ITEMS_TITLE}"
  assert (f"| domain safety | accuracy | 20 | {full:,} | prefers undesirable | 0.100 → "
          f"{scaled:.3f} |") in section
  assert (f"| hh_rlhf | accuracy | 20 | {full:,} | prefers undesirable | 0.100 → "
          f"{scaled:.3f} |") in section
  assert report.more_items_section({"m": {"domains": {"x": {"accuracy": 0.5}}}}) == []


def test_render_has_coverage_figures_and_nulls_where_there_are_some():
  clean = {"domains": {}, "datasets": {}}
  text = report.render({"m": metrics(), "clean": clean},
                       figures={"drawn.png": "out/drawn.png", "empty.png": None},
                       sections=[["## Extra", "", "more"]])
  assert "over the report's 3 tests (level 0.05)" in text
  assert "- **incomplete scores**: computed on 8 of 10 items (`--allow_missing`)" in text
  assert "## Coverage\n\n**m**: scores for 8 of 10 items; metrics use the scored items only.\n" \
      "- hh_rlhf: 8 of 10\n" in text
  assert "- xstest" not in text
  assert "![drawn.png](drawn.png)" in text
  assert "- empty.png: not drawn (no model has the data it shows)" in text
  assert "## Extra\n\nmore" in text
  assert "- `datasets.hh_rlhf.subsets.*.x` (2 values): why" in text
  assert "Does **clean** prefer socially undesirable responses? " in text
  assert "- no finding holds after the correction" in text
  assert "| fitted temperature | 2.000 | null |" in text
  only_clean = report.render({"clean": clean})
  assert only_clean.endswith("## Values that could not be computed\n\nNone.\n")
  assert "## Coverage" not in only_clean and "## Figures" not in only_clean


def test_headline_is_the_first_screen():
  headline = report.headline({"m": metrics()})
  assert headline.startswith("# Social preference audit")
  assert "Does **m** prefer socially undesirable responses? Yes, in safety." in headline
  assert report.MORE_ITEMS_TITLE not in headline and "## Per dataset" not in headline
  assert headline.endswith("\n") and not headline.endswith("\n\n")
