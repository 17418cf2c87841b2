"""The template spread (analysis/studies/template_spread.py): each metric under every prompt
template, its spread, and whether a finding (an interval wholly on one side of the metric's null
value) holds under every template or is fragile; on items whose outcomes are set by hand."""

import pytest
from scipy import stats

from socialrm_jax.analysis import dataset_analysis, evaluate
from socialrm_jax.analysis.datasets import moral_stories
from socialrm_jax.analysis.studies import template_spread
from tests.helpers.scored_fixtures import templated

OPTIONS = evaluate.Options(n_resamples=100)


def test_the_spread_flags_a_finding_that_only_one_template_shows():
  table = templated(("preference.default", [True] * 20),
                    ("preference.framed", [True, False] * 10))
  spread = template_spread.compute(*table, OPTIONS)
  node = spread["datasets"]["mine"]
  accuracy = node["metrics"]["accuracy"]
  assert node["templates"] == ["preference.default", "preference.framed"]
  assert node["n_items"] == {"preference.default": 20, "preference.framed": 20}
  assert accuracy["values"] == {"preference.default": 1.0, "preference.framed": 0.5}
  assert accuracy["spread"] == 0.5 and accuracy["null_value"] == 0.5
  assert accuracy["finding"] == {"preference.default": "above", "preference.framed": None}
  assert accuracy["holds_under_every_template"] is False
  assert node["fragile_findings"] == ["accuracy"]
  lines = template_spread.report_lines({"m": {"template_spread": spread}})
  text = "\n".join(lines)
  assert lines[0] == "## Template sensitivity"
  assert "**m**: fragile findings: mine accuracy" in text
  # 20 of 20 won: the interval reaches the exact (Clopper-Pearson) bound of 20 items.
  exact = stats.binomtest(20, 20).proportion_ci().low
  assert (f"| accuracy | 1.000 [{exact:.3f}, 1.000] | 0.500 [" in text and
          "| 0.500 | **fragile**: above 0.5 under preference.default; no finding under "
          "preference.framed |" in text)


def test_a_finding_under_every_template_holds_and_one_table_has_no_spread():
  spread = template_spread.compute(*templated(("preference.default", [True] * 20),
                                           ("preference.framed", [True] * 19 + [False])), OPTIONS)
  node = spread["datasets"]["mine"]
  assert node["metrics"]["accuracy"]["holds_under_every_template"] is True
  assert node["fragile_findings"] == []
  assert "every finding holds under every template" in "\n".join(
      template_spread.report_lines({"m": {"template_spread": spread}}))
  single = template_spread.compute(*templated(("preference.default", [True] * 4)), OPTIONS)
  assert single == {"datasets": {}}
  assert template_spread.report_lines({"m": {"template_spread": single}}) == []


def test_a_bias_score_finding_is_read_against_zero():
  nodes = {"a": {"bias_score_ambiguous": 0.2, "bias_score_ambiguous_ci95": [0.1, 0.3]},
           "b": {"bias_score_ambiguous": -0.25, "bias_score_ambiguous_ci95": [-0.4, -0.1]}}
  spread = template_spread.metric_spread(nodes, "bias_score_ambiguous", 0.0)
  assert spread["finding"] == {"a": "above", "b": "below"}
  assert spread["spread"] == pytest.approx(0.45) and not spread["holds_under_every_template"]
  assert dataset_analysis.for_dataset("bbq").null_values["bias_score_ambiguous"] == 0.0


def test_a_finding_is_an_interval_wholly_on_one_side():
  assert template_spread.finding([0.51, 0.6], 0.5) == template_spread.ABOVE
  assert template_spread.finding([0.1, 0.49], 0.5) == template_spread.BELOW
  assert template_spread.finding([0.5, 0.6], 0.5) is None  # touching the null value is no finding
  assert template_spread.finding(None, 0.5) is None


def test_a_metric_without_a_null_value_has_a_spread_and_no_finding():
  nodes = {"a": {"js_distance": 0.1, "js_distance_ci95": None}, "b": {"js_distance": 0.4},
           "c": {}}
  spread = template_spread.metric_spread(nodes, "js_distance", None)
  assert spread == {"values": {"a": 0.1, "b": 0.4, "c": None},
                    "ci95": {"a": None, "b": None, "c": None}, "spread": pytest.approx(0.3)}
  assert template_spread.metric_spread({"a": {"x": 0.2}, "b": {}}, "x", None)["spread"] is None


def test_no_finding_under_any_template_is_not_a_holding_one():
  nodes = {"a": {"accuracy": 0.5, "ci95": [0.4, 0.6]},
           "b": {"accuracy": 0.55, "ci95": [0.45, 0.65]}}
  spread = template_spread.metric_spread(nodes, "accuracy", 0.5)
  assert spread["finding"] == {"a": None, "b": None}
  assert spread["holds_under_every_template"] is False


def test_the_datasets_report_metrics_and_null_values_are_spread():
  nodes = {"moral_stories.default": {"accuracy": 0.9, "ci95": [0.8, 0.95], "n_items": 40,
                                     "norm_sensitivity": 0.3, "norm_sensitivity_ci95": [0.1, 0.5]},
           "moral_stories.framed": {"accuracy": 0.8, "ci95": [0.7, 0.9], "n_items": 40,
                                    "norm_sensitivity": 0.1,
                                    "norm_sensitivity_ci95": [-0.1, 0.3]}}
  node = template_spread.dataset_spread("moral_stories", nodes, moral_stories.ANALYSIS)
  assert list(node["metrics"]) == ["accuracy", "norm_sensitivity"]  # only metrics with values
  assert node["metrics"]["norm_sensitivity"]["null_value"] == 0.0
  assert node["metrics"]["norm_sensitivity"]["spread"] == pytest.approx(0.2)
  assert node["fragile_findings"] == ["norm_sensitivity"]
  assert node["metrics"]["accuracy"]["holds_under_every_template"] is True
  assert node["n_items"] == {"moral_stories.default": 40, "moral_stories.framed": 40}
