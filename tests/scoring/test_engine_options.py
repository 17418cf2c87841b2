"""Scoring options: every bad value refused naming its flag; the batch bounded by the chunk."""

import subprocess

import pytest

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.scoring import engine, packing
from socialrm_jax.runtime import mesh as mesh_lib
from tests.helpers import scoring_fixtures as fx


@pytest.mark.parametrize("field, value", [("chunk_size", -2), ("chunk_size", 0), ("max_length", 0),
                                          ("tokens_per_batch", -1), ("objective", -1),
                                          ("truncation", "right"), ("check_invariance", -1)])
def test_bad_values_are_refused_naming_the_flag(field, value):
  with pytest.raises(InputError, match=f"--{field}"):
    engine.ScoringOptions(**{field: value}).validate()


def test_a_huge_token_budget_is_bounded_by_what_a_chunk_fills():
  options = engine.ScoringOptions(tokens_per_batch=10**9, chunk_size=4, max_length=256)
  assert options.batch_tokens() == 4 * 256
  assert engine.ScoringOptions().batch_tokens() == engine.ScoringOptions().tokens_per_batch


def test_a_cpu_batch_is_capped_at_cpu_batch_tokens_or_one_longest_row():
  huge = engine.ScoringOptions(tokens_per_batch=10**9)
  assert huge.batch_tokens("cpu") == engine.CPU_BATCH_TOKENS < huge.batch_tokens("gpu")
  long_rows = engine.ScoringOptions(tokens_per_batch=10**9, max_length=65536)
  assert long_rows.batch_tokens("cpu") == 65536


def test_a_cpu_run_batches_for_its_caches_and_sizes_rows_by_attention_cost():
  batcher = engine.make_batcher(engine.ScoringOptions(), "score", mesh_lib.make_mesh(None))
  assert batcher.batch_tokens == engine.CPU_BATCH_TOKENS < engine.DEFAULT_TOKENS_PER_BATCH
  assert batcher.groups_per_row == packing.CPU_GROUPS_PER_ROW
  assert batcher.attention_length == packing.CPU_ATTENTION_LENGTH


def test_score_cli_refuses_a_negative_chunk_size_before_any_work(tmp_path):
  tables.write_rows(tmp_path / "items" / "items.jsonl", fx.bbq_items())
  done = subprocess.run(fx.score_command("no-such-model", tmp_path / "items", tmp_path / "out",
                                         "--chunk_size=-2"),
                        env=fx.subprocess_env(), capture_output=True, text=True, timeout=120)
  assert done.returncode == 2
  assert "--chunk_size must be positive" in done.stderr and "Traceback" not in done.stderr
  assert not (tmp_path / "out").exists()
