"""Metrics for several scores sets (analysis/runner.py): one display name per set, what a run.json
beside the scores tells, and the files one call writes for two models, in-process (the command
around it is tested in tests/main/test_metrics.py)."""

import json

import pytest

from socialrm_jax.analysis import evaluate, runner
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from tests.helpers.scored_fixtures import tables_of


def test_display_names_from_flag_run_json_or_stem(tmp_path):
  (tmp_path / "x").mkdir()
  tables.atomic_write_json(tmp_path / "x" / "run.json", {"model": "org/rm-7b"})
  (tmp_path / "y").mkdir()
  assert runner.model_names([str(tmp_path / "x"), str(tmp_path / "y" / "scores.parquet")], []) \
      == ["rm-7b", "y"]
  assert runner.model_names(["a", "b"], ["same", "same"]) == ["same", "same-2"]
  assert runner.model_names(["a/s.jsonl", "b/s.jsonl", "c/s.jsonl"], []) == ["s", "s-2", "s-3"]
  with pytest.raises(InputError, match="--names has 1 names for 2 scores sets"):
    runner.model_names(["a", "b"], ["only"])


def test_run_json_and_a_custom_heads_output_names(tmp_path):
  tables.atomic_write_json(tmp_path / "head" / "run.json",
                           {"reward_head": {"outputs": ["helpful", "harmless"]}})
  tables.atomic_write_json(tmp_path / "plain" / "run.json", {"model": "m"})
  assert runner.run_json(str(tmp_path / "plain" / "scores.jsonl")) == {"model": "m"}
  assert runner.run_json(str(tmp_path / "nowhere")) is None
  assert runner.output_names(str(tmp_path / "head")) == ("helpful", "harmless")
  assert runner.output_names(str(tmp_path / "plain")) == ()
  assert runner.output_names(str(tmp_path / "nowhere")) == ()


def test_two_models_give_their_metrics_the_comparisons_and_one_report(tmp_path):
  # Four gold pairs: model "good" wins all, model "bad" loses all.
  items = [{"id": f"i{i}", "dataset": "hh_rlhf", "domain": "general", "subset": "helpful",
            "candidates": ["a good answer", "bad"], "roles": ["chosen", "rejected"],
            "desirability": [1, -1], "rewards": [1.0, 0.0], "pairs": [(0, 1, "gold")]}
           for i in range(4)]
  item_rows, pair_rows, _ = tables_of(items)
  tables.write_rows(tmp_path / "conv" / "items.jsonl", item_rows)
  tables.write_rows(tmp_path / "conv" / "pairs.jsonl", pair_rows)
  for name, rewards in (("good", (1.0, 0.0)), ("bad", (0.0, 1.0))):
    tables.write_rows(tmp_path / name / "scores.jsonl", [
        {"item_id": f"i{i}", "candidate": c, "reward": rewards[c]}
        for i in range(4) for c in range(2)])
  models = runner.evaluate_all(str(tmp_path / "conv"), [str(tmp_path / "good"),
                                                        str(tmp_path / "bad")],
                               str(tmp_path / "out"), [], evaluate.Options(n_resamples=20))
  assert list(models) == ["good", "bad"]
  assert models["good"]["datasets"]["hh_rlhf"]["accuracy"] == 1.0
  assert models["bad"]["datasets"]["hh_rlhf"]["accuracy"] == 0.0
  written = json.loads((tmp_path / "out" / "bad" / "metrics.json").read_text())
  assert written["model"] == "bad" and written["scores"] == str(tmp_path / "bad")
  # The worst pair's texts were read back from the items table.
  assert written["datasets"]["hh_rlhf"]["worst_pairs"][0]["rejected"] == "bad"
  comparisons = json.loads((tmp_path / "out" / "comparisons.json").read_text())
  assert len(comparisons["pairs"]) == 1
  report = (tmp_path / "out" / "report.md").read_text()
  assert "Models: **good**, **bad**." in report and "## Worst pairs" in report
  assert (tmp_path / "out" / "report.html").is_file()
  assert not (tmp_path / "out" / "rewardbench2").exists()  # no RewardBench 2 rows
