"""A scoring run compiles at most MAX_BUCKETS programs, once each, and a rerun finds them in the
persistent compilation cache."""

import json
import subprocess

import pytest

from socialrm_jax.base import tables
from socialrm_jax.scoring import packing
from tests.helpers import scoring_fixtures as fx


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_few_compilations_and_the_persistent_cache(tmp_path):
  fx.make_llama(tmp_path / "rm")
  items = fx.many_bbq_items(24) + fx.hh_items()
  tables.write_rows(tmp_path / "items" / "items.jsonl", items)
  cache = tmp_path / "xla_cache"
  runs = []
  for name in ("first", "second"):
    command = fx.score_command(tmp_path / "rm", tmp_path / "items", tmp_path / name,
                               f"--compilation_cache={cache}", "--max_length=1024",
                               "--tokens_per_batch=2048")
    subprocess.run(command, env=fx.subprocess_env(), check=True, timeout=300,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs.append(json.loads((tmp_path / name / "run.json").read_text()))
  first, second = runs
  assert len(first["buckets"]) == packing.MAX_BUCKETS  # 128 .. 1024: more lengths were possible.
  assert 1 <= first["compilations"] <= packing.MAX_BUCKETS
  assert first["batches"] > first["compilations"]  # Batches reuse their shape's program.
  assert first["compile_seconds"] > 0 and first["compilation_cache_hits"] == 0
  assert any(cache.iterdir())
  # The same shapes in a new process: every program comes from the cache.
  assert second["compilations"] == first["compilations"]
  assert second["compilation_cache_hits"] == second["compilations"]
