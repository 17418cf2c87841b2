"""Preference data audited end to end on a tiny random Llama reward model: one audit whose
datasets are the same pairs in five layouts and file kinds (RewardBench-style strings, TRL
conversational, HH transcripts, parquet, a `save_to_disk` folder), each with its accuracy per
subset in metrics.json and report.md, recomputed here from the scores."""

import json

import numpy as np
import pytest

from socialrm_jax.analysis.resampling import estimates
from socialrm_jax.orchestrators import audit as audit_lib
from socialrm_jax.base import tables
from tests.helpers import preference_fixtures as pf
from tests.helpers import scoring_fixtures as fx

MODEL = "tiny-llama"
N_RESAMPLES = 50
# Packing may change a reward in its last digits (it is tested to 1e-4 against PyTorch).
TOLERANCE = 1e-4
# name -> (layout, how it is written)
SOURCES = {
    "rewardbench": ("strings", pf.write_jsonl, "rewardbench.jsonl"),
    "trl": ("conversational", pf.write_jsonl, "trl.jsonl"),
    "hh": ("hh_transcripts", pf.write_jsonl, "hh.jsonl"),
    "rb_parquet": ("strings", pf.write_parquet, "rb.parquet"),
    "saved": ("implicit_conversational", pf.write_saved, "saved"),
}


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
  root = tmp_path_factory.mktemp("preference_audit")
  fx.make_llama(root / "rm", head="score")
  specs = [f"preference:{write(root / 'data' / file, pf.rows(layout))}:name={name}"
           for name, (layout, write, file) in SOURCES.items()]
  config = audit_lib.audit_config(str(root / "out"))
  config.datasets = ",".join(specs)
  config.models = audit_lib.models(audit_lib.model_config(
      MODEL, str(root / "rm"), max_length=256, tokens_per_batch=1024, chunk_size=8))
  config.metrics.n_resamples = N_RESAMPLES
  audit_lib.run_audit(config)
  out = root / "out"
  return {"metrics": json.loads((out / MODEL / "metrics.json").read_text()),
          "report": (out / "report.md").read_text(),
          "conversion": json.loads((out / "converted" / "conversion_report.json").read_text()),
          "items": tables.read_rows(out / "converted", "items"),
          "scores": fx.scores_by_key(tables.read_rows(out / "scores" / MODEL, "scores"))}


def hand_accuracy(audit, name):
  """Accuracy per subset from the scores: chosen (candidate 0) above rejected, ties 1/2."""
  outcomes: dict[str, list[float]] = {}
  for item in audit["items"]:
    if item["dataset"] == name:
      chosen, rejected = (audit["scores"][(item["item_id"], k)]["reward"] for k in (0, 1))
      outcomes.setdefault(item["subset"], []).append(
          1.0 if chosen > rejected else 0.5 if chosen == rejected else 0.0)
  return {subset: float(np.mean(o)) for subset, o in outcomes.items()}


@pytest.mark.parametrize("name", SOURCES)
def test_each_layout_is_audited_with_accuracy_per_subset(audit, name):
  layout = SOURCES[name][0]
  assert [t["layout"] for t in audit["conversion"]["datasets"][name]["tables"]] == [layout]
  node = audit["metrics"]["datasets"][name]
  expected = hand_accuracy(audit, name)
  assert set(node["subsets"]) == set(expected) == {"chat", "refusals", "math"}
  reasons = audit["metrics"]["null_reasons"]
  for subset, accuracy in expected.items():
    got = node["subsets"][subset]
    assert got["accuracy"] == pytest.approx(accuracy)
    # A handful of pairs per subset: fewer than an interval needs, so none, with the reason.
    assert got["n_gold_items"] < estimates.MIN_INTERVAL_UNITS and got["ci95"] is None
    assert "resampling units" in reasons[f"datasets.{name}.subsets.{subset}.ci95"]
    assert f"| {subset}: accuracy | {got['accuracy']:.3f} |" in audit["report"]
  assert f"### {name}" in audit["report"]
  assert set(node["labels"]) == {"easy", "hard"}  # the label column's accuracy, with intervals
  assert "ci95" in node["labels"]["hard"]


def test_the_same_pairs_get_the_same_rewards_and_metrics_in_every_layout(audit):
  by_content: dict[str, list[float]] = {}
  for item in audit["items"]:
    for k, text in enumerate(item["candidates"]):
      key = json.dumps([item["prompt"], text])
      by_content.setdefault(key, []).append(audit["scores"][(item["item_id"], k)]["reward"])
  assert all(max(r) - min(r) <= TOLERANCE for r in by_content.values())
  assert max(len(r) for r in by_content.values()) == len(SOURCES)
  assert np.std([r[0] for r in by_content.values()]) > 0.01  # the model tells responses apart
  datasets = audit["metrics"]["datasets"]
  def accuracies(name):
    return {s: n["accuracy"] for s, n in datasets[name]["subsets"].items()}
  for first, second in (("trl", "hh"), ("trl", "saved"), ("rewardbench", "rb_parquet")):
    assert accuracies(first) == accuracies(second), (first, second)
  # The refusal row's domain comes from its row; the rest from the default.
  assert audit["metrics"]["domains"]["safety"]["n_gold_pairs"] == len(SOURCES)
