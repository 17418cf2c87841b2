"""Two processes started by the local launcher give the same scores as one process."""

import json
import subprocess

import pytest

from socialrm_jax.base import tables
from tests.helpers import scoring_fixtures as fx


@pytest.mark.slow
def test_two_launched_processes_match_one(tmp_path):
  items = fx.many_bbq_items(20) + fx.hh_items()
  launched = fx.score_here_and_launched(tmp_path, items, ("--num_processes=2",))
  one = tables.read_rows(tmp_path / "one", "scores")
  two = tables.read_rows(tmp_path / "two", "scores")
  assert len(two) == len(one) == sum(len(it["candidates"]) for it in items)
  # The same readouts; each process's rows share batches with its own chunks' rows, so a row may
  # be repacked into a longer one at a flush: equal within the row-length bound of
  # tests/scoring/test_engine_invariance.py.
  rewards = [{k: r["reward"] for k, r in fx.scores_by_key(rows).items()} for rows in (one, two)]
  assert fx.max_abs_diff(*rewards) <= 1e-5
  assert ({k: r["sequence_tokens"] for k, r in fx.scores_by_key(two).items()}
          == {k: r["sequence_tokens"] for k, r in fx.scores_by_key(one).items()})
  writers = {p.name.split("-")[1] for p in (tmp_path / "two").glob("scores-*.parquet")}
  assert writers == {"00000", "00001"}
  run = json.loads((tmp_path / "two" / "run.json").read_text())
  assert run["process_count"] == 2 and run["items"] == len(items)
  # A rerun finds every chunk done and changes nothing, run.json included: it still describes
  # the run that scored the folder.
  before = (tmp_path / "two" / "run.json").read_bytes()
  subprocess.run(launched, env=fx.subprocess_env(), check=True, timeout=400)
  assert (tmp_path / "two" / "run.json").read_bytes() == before
