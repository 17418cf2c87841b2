"""The generic dataset's analysis (analysis/datasets/preference.py), that of every path source:
accuracy per preference label, its report table and its findings per subset and label.
(Best-of-N and RewardBench 2's scores: test_best_of_n.py.)"""

import pytest

from socialrm_jax.analysis import evaluate
from socialrm_jax.analysis.datasets import preference
from socialrm_jax.analysis.metrics import verdicts
from tests.helpers.scored_fixtures import tables_of


def test_an_items_label_is_its_stratum_group():
  assert preference.label_of({"attributes": {"label": "hard"}}) == "hard"
  assert preference.label_of({"attributes": {"label": None}}) == ""
  assert preference.label_of({"attributes": None}) == ""


def source(labels_and_wins):
  return tables_of([{"id": f"mine/{i}", "dataset": "mine", "domain": "general", "subset": "all",
                     "candidates": ["good", "bad"], "roles": ["chosen", "rejected"],
                     "desirability": [1, -1], "rewards": [1.0, 0.0] if win else [0.0, 1.0],
                     "pairs": [(0, 1, "gold")], "attributes": {"label": label} if label else {}}
                    for i, (label, win) in enumerate(labels_and_wins)])


def test_accuracy_per_label():
  # easy: 3 of 4 pairs won; hard: 0 of 2; the source: 3 of 6.
  metrics = evaluate.compute_metrics(*source([("easy", True)] * 3 + [("easy", False)]
                                             + [("hard", False)] * 2),
                                     evaluate.Options(n_resamples=20))
  node = metrics["datasets"]["mine"]
  assert node["accuracy"] == pytest.approx(0.5)
  assert node["labels"]["easy"]["accuracy"] == pytest.approx(0.75)
  assert node["labels"]["hard"]["accuracy"] == 0.0
  assert node["labels"]["hard"]["n_gold_pairs"] == 2
  unlabelled = evaluate.compute_metrics(*source([(None, True)] * 2),
                                        evaluate.Options(n_resamples=20))
  assert "labels" not in unlabelled["datasets"]["mine"]


def test_the_report_table_has_a_row_per_label_and_a_column_per_model():
  nodes = [{"labels": {"easy": {"accuracy": 0.75, "ci95": [0.5, 0.9]}}},
           {"labels": {"easy": {"accuracy": 0.5}, "hard": {"accuracy": 0.25}}}, None]
  assert preference.report_sections(["a", "b", "c"], nodes) == [
      "| label | a: accuracy | b: accuracy | c: accuracy |", "|---|---|---|---|",
      "| easy | 0.750 [0.500, 0.900] | 0.500 | – |", "| hard | – | 0.250 | – |", ""]
  assert preference.report_sections(["a"], [{"accuracy": 0.5}]) == []


def test_findings_name_each_subset_and_label_the_rejected_response_wins():
  against = {"accuracy": 0.3, "ci95": [0.2, 0.4], "n_gold_pairs": 10,
             "verdicts": {"accuracy": {"verdict": verdicts.PREFERS_UNDESIRABLE}}}
  fine = {"accuracy": 0.6, "n_gold_pairs": 10,
          "verdicts": {"accuracy": {"verdict": verdicts.NO_PREFERENCE}}}
  node = {"subsets": {"x": against, "y": fine}, "labels": {"only": against}}
  # One label alone is the source itself (its domain's finding), not named again.
  assert preference.findings("mine", node) == [
      (pytest.approx(0.2), "prefers the rejected response on **mine** subset x: accuracy "
       "0.300 [0.200, 0.400] on 10 pairs")]
