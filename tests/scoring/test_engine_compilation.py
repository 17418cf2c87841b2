"""A scoring run compiles at most MAX_BUCKETS programs, once each, and a rerun finds them in the
persistent compilation cache."""

import json
import subprocess
import time

import pytest

from socialrm_jax.base import tables
from socialrm_jax.scoring import packing
from tests.helpers import scoring_fixtures as fx

# How long the second test holds the weights' load back: well above a tiny model's compile time.
LOAD_DELAY_SECONDS = 3.0


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


def test_the_first_chunks_programs_compile_while_the_weights_load(tmp_path, monkeypatch):
  """socialrm-score compiles the first chunk's batch shapes from the model's abstract twin while
  the weights load (a load held back here, so that the two must overlap to end as they do): its
  run.json's timeline shows the compilations starting before the load ends, each shape is
  compiled once, and the scores are a run's that compiles after the load (a reference model's
  run path, here forced)."""
  from socialrm_jax.models import weights
  from socialrm_jax.scoring import engine
  fx.make_llama(tmp_path / "rm")
  tables.write_rows(tmp_path / "items" / "items.jsonl", fx.many_bbq_items(8) + fx.hh_items())
  options = engine.ScoringOptions(max_length=256, tokens_per_batch=1024, chunk_size=64,
                                  compilation_cache=str(tmp_path / "no_cache"))
  loading = weights.load_params

  def slow_load(*args, **kwargs):
    time.sleep(LOAD_DELAY_SECONDS)
    return loading(*args, **kwargs)

  monkeypatch.setattr(weights, "load_params", slow_load)
  overlapped = engine.score_model_at(str(tmp_path / "rm"), tmp_path / "items",
                                     tmp_path / "overlapped", options=options)
  timeline = overlapped["timeline"]
  load_start, load_end = timeline["load"]
  assert load_end - load_start >= LOAD_DELAY_SECONDS
  assert timeline["compile"][0] < load_end - LOAD_DELAY_SECONDS / 2  # during the load
  assert load_end <= timeline["first_rewards"]
  assert overlapped["compilations"] == len(overlapped["batch_shapes"])  # once each

  monkeypatch.setattr(weights, "load_params", loading)
  monkeypatch.setattr(engine, "first_chunk_shapes", lambda *args: [])  # compiled as batches come
  after = engine.score_model_at(str(tmp_path / "rm"), tmp_path / "items", tmp_path / "after",
                                options=options)
  assert after["compilations"] == overlapped["compilations"]
  scores = tables.read_rows(tmp_path / "overlapped", "scores")
  assert len(scores) > 10 and tables.read_rows(tmp_path / "after", "scores") == scores
