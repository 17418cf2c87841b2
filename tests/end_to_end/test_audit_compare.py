"""A two-model audit of the bundled suite (BBQ, CrowS-Pairs and Moral Stories; two tiny random
Llama reward models) writes comparisons.json and the report's "Model comparisons" table, row for
row the same, with values that are the models' own metrics."""

import json

import pytest

from socialrm_jax.orchestrators import audit as audit_lib
from socialrm_jax.analysis.studies import compare
from tests.helpers import scoring_fixtures as fx

MODELS = ("llama-a", "llama-b")
DATASETS = "bbq,crows_pairs,moral_stories"
N_RESAMPLES = 200
HEADER = "| metric | A | B | A − B | 95% CI | test | p | Holm p | holds |"

# Two tiny models made with PyTorch (its import is most of the time), 320 items scored by each.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
  root = tmp_path_factory.mktemp("audit_compare")
  specs = []
  for seed, name in enumerate(MODELS):
    fx.make_llama(root / name, head="score", seed=seed)
    specs.append(audit_lib.model_config(name, str(root / name), max_length=256,
                                       tokens_per_batch=2048, chunk_size=64))
  config = audit_lib.audit_config(str(root / "out"))
  config.datasets = DATASETS
  config.models = audit_lib.models(*specs)
  config.metrics.n_resamples = N_RESAMPLES
  config.probe.enabled = False
  audit_lib.run_audit(config)
  out = root / "out"
  return {"comparisons": json.loads((out / "comparisons.json").read_text()),
          "report": (out / "report.md").read_text(),
          "metrics": {name: json.loads((out / name / "metrics.json").read_text())
                      for name in MODELS}}


def table_rows(report: str) -> list[list[str]]:
  section = report.split("## Model comparisons\n")[1].split("\n## ")[0]
  lines = section.split(HEADER + "\n|---|---|---|---|---|---|---|---|---|\n")[1].splitlines()
  return [line.strip("| ").split(" | ") for line in lines if line.startswith("| ")]


def test_comparisons_json_covers_the_shared_metrics_of_both_models(audit):
  comparisons = audit["comparisons"]
  assert comparisons["models"] == list(MODELS)
  assert comparisons["n_resamples"] == N_RESAMPLES and comparisons["correction"] == "holm"
  (pair,) = comparisons["pairs"]
  assert (pair["a"], pair["b"]) == MODELS
  metrics = audit["metrics"][MODELS[0]]
  n_items = sum(node["n_items"] for node in metrics["datasets"].values())
  assert pair["n_items_a"] == pair["n_items_b"] == pair["n_common_items"] == n_items
  rows = {(r["level"], r["key"], r["metric"]): r for r in pair["comparisons"]}
  # BBQ is the bias domain's only dataset with gold pairs: its accuracy is listed as the domain's.
  for key in (("domains", "bias", "accuracy"), ("domains", "morality", "accuracy"),
              ("datasets", "bbq", "bias_score_ambiguous"),
              ("datasets", "bbq", "bias_score_disambiguated"),
              ("datasets", "crows_pairs", "stereotype_rate"),
              ("datasets", "moral_stories", "norm_sensitivity")):
    assert key in rows, key
  assert ("datasets", "bbq", "accuracy") not in rows
  assert comparisons["n_tests"] == len(rows)
  # Every item was scored by both, so each side's value is that model's own metric.
  for (level, key, metric), row in rows.items():
    for side, name in (("value_a", MODELS[0]), ("value_b", MODELS[1])):
      assert row[side] == pytest.approx(audit["metrics"][name][level][key][metric]), (key, metric)
    assert row["difference"] == pytest.approx(row["value_a"] - row["value_b"])
    low, high = row["ci95"]
    assert low <= row["difference"] <= high
    assert row["test"] == (compare.SIGN_TEST if metric in compare.GOLD_PAIR_ACCURACIES
                           else compare.PAIRED_BOOTSTRAP)
    assert row["p"] <= row["p_holm"] <= 1 and row["holds"] == (row["p_holm"] < 0.05)
  bias = rows[("domains", "bias", "accuracy")]
  assert bias["n_pairs"] == audit["metrics"][MODELS[0]]["domains"]["bias"]["n_gold_pairs"]


def test_the_report_table_lists_every_comparison(audit):
  report = audit["report"]
  assert "## Model comparisons" in report
  (pair,) = audit["comparisons"]["pairs"]
  assert (f"- {MODELS[0]} and {MODELS[1]}: {pair['n_common_items']} items in common "
          f"(of {pair['n_items_a']} and {pair['n_items_b']} scored)") in report
  rows = table_rows(report)
  assert len(rows) == len(pair["comparisons"])
  for cells, row in zip(rows, pair["comparisons"]):
    scope = f"domain {row['key']}" if row["level"] == "domains" else row["key"]
    assert cells[0] == f"{scope}: {row['metric']}"
    assert cells[1] == f"{MODELS[0]} {row['value_a']:.3f}"
    assert cells[2] == f"{MODELS[1]} {row['value_b']:.3f}"
    assert cells[3] == f"{row['difference']:.3f}"
    assert cells[4] == f"[{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}]"
    assert cells[5] == row["test"]
    for cell, p in zip(cells[6:8], (row["p"], row["p_holm"])):
      assert float(cell) == pytest.approx(p, rel=0.06, abs=6e-4)
    assert cells[8] == ("yes" if row["holds"] else "no")
  # The length-matched accuracy sits beside each model's domain accuracy.
  assert f"| domain | {MODELS[0]} | {MODELS[0]}: length-matched | {MODELS[1]} |" in report
