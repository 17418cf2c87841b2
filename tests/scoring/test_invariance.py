"""--check_invariance: a sample of the run's items re-scored in other batch compositions, the largest
difference from the written rewards recorded (and a difference found when there is one)."""

import dataclasses
import json
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from socialrm_jax.base import tables
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import engine, invariance, packing, run_report, shards
from tests.helpers import scoring_fixtures as fx


@pytest.mark.slow  # A subprocess; the check compiles the shapes of its other row lengths.
def test_the_command_checks_invariance_with_the_default_settings(tmp_path):
  """fp32 on the CPU, every engine setting at its default: <= 1e-5, and the run's own counts
  untouched by the check."""
  fx.make_llama(tmp_path / "lm", head="lm")
  tables.write_rows(tmp_path / "items" / "items.jsonl", fx.many_bbq_items(20) + fx.hh_items())
  command = [*fx.score_command(tmp_path / "lm", tmp_path / "items", tmp_path / "scores")[:6],
             f"--compilation_cache={tmp_path / 'xla'}", "--check_invariance=8"]
  subprocess.run(command, env=fx.subprocess_env(), check=True, timeout=300,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  run = json.loads((tmp_path / "scores" / "run.json").read_text())
  check = run["invariance"]
  defaults = json.loads(json.dumps(dataclasses.asdict(engine.ScoringOptions())))
  assert run["manifest"]["options"] == {**defaults, "check_invariance": 8,
                                        "compilation_cache": str(tmp_path / "xla")}
  assert check["items"] == 8 and check["dtype"] == "float32" and check["tolerance"] == 1e-5
  assert check["compositions"] == [c.name for c in invariance.COMPOSITIONS]
  assert check["max_abs_diff"] <= 1e-5
  # Not vacuous: the sample really went through other row lengths than the run's.
  run_lengths = {length for _, length, _ in run["batch_shapes"]}
  longest = engine.ScoringOptions().max_length
  assert longest not in run_lengths
  assert {length for _, length, _ in check["batch_shapes"]["rows of max_length"]} == {longest}
  assert run["compilations"] <= packing.MAX_BUCKETS and check["compilations"] >= 1


def _add_to_written_rewards(folder, item_id: str, delta: float) -> None:
  """Changes the written rewards of one item, in whichever shard holds it."""
  for path in folder.glob("scores-*.parquet"):
    table = pq.read_table(path)
    rewards = np.asarray(table.column("reward").to_pylist())
    rewards[np.asarray(table.column("item_id").to_pylist()) == item_id] += delta
    column = table.schema.get_field_index("reward")
    pq.write_table(table.set_column(column, "reward", pa.array(rewards, pa.float64())), path)


def test_a_difference_from_the_written_scores_is_reported(tmp_path):
  """Written rewards changed after the run: a check run over the complete folder finds the change
  (and records it in its run.json, which otherwise stays the first run's)."""
  fx.make_llama(tmp_path / "rm")
  model = load_reward_model(tmp_path / "rm")
  items = fx.all_items()
  options = engine.ScoringOptions(max_length=256, tokens_per_batch=1024, chunk_size=4)
  engine.score_items(model, items, tmp_path / "scores", options=options)
  first_bytes = (tmp_path / "scores" / "run.json").read_bytes()
  first = json.loads(first_bytes)
  changed = items[invariance.sample_indices(range(3), 4, len(items), 4)[0]]["item_id"]
  _add_to_written_rewards(tmp_path / "scores", changed, 1e-3)
  checked = engine.score_items(model, items, tmp_path / "scores",
                               options=dataclasses.replace(options, check_invariance=4))
  check = checked["invariance"]
  assert check["max_abs_diff"] == pytest.approx(1e-3, abs=1e-5)
  assert check["worst"]["item_id"] == changed
  assert json.loads((tmp_path / "scores" / "run.json").read_text()) == checked
  assert {k: v for k, v in checked.items() if k != "invariance"} == first
  # Byte for byte: the first run's statistics stay as written, the check is appended after them;
  # a second check of the complete folder replaces only the check.
  opening = first_bytes.rstrip().removesuffix(b"}").rstrip()
  assert (tmp_path / "scores" / "run.json").read_bytes().startswith(opening + b',\n  "invariance"')
  engine.score_items(model, items, tmp_path / "scores",
                     options=dataclasses.replace(options, check_invariance=2))
  again = (tmp_path / "scores" / "run.json").read_bytes()
  assert again.startswith(opening + b',\n  "invariance"')
  assert json.loads(again)["invariance"]["items"] == 2


def test_the_sample_is_fixed_and_drawn_from_the_groups_own_chunks():
  picked = invariance.sample_indices(range(2, 4), chunk_size=4, num_items=15, count=3)
  assert picked == invariance.sample_indices(range(2, 4), 4, 15, 3)
  assert picked == sorted(set(picked)) and len(picked) == 3
  assert all(8 <= i < 15 for i in picked)
  assert invariance.sample_indices(range(2, 4), 4, 15, 100) == list(range(8, 15))


def test_groups_checks_merge_to_the_largest_difference():
  checks = [{"items": 8, "max_abs_diff": 2e-7, "worst": {"item_id": "a"}, "compilations": 1,
             "seconds": 3.0, "compositions": ["x"]},
            {"items": 5, "max_abs_diff": 9e-7, "worst": {"item_id": "b"}, "compilations": 2,
             "seconds": 1.0, "compositions": ["x"]}]
  merged = run_report.merge_invariance(checks)
  assert merged == {"items": 13, "max_abs_diff": 9e-7, "worst": {"item_id": "b"},
                    "compilations": 3, "seconds": 3.0, "compositions": ["x"], "groups": 2}

