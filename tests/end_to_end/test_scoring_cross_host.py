"""A model axis that spans two processes: one data-parallel group, the same scores as one process."""

import json

import pytest

from socialrm_jax.base import tables
from tests.helpers import scoring_fixtures as fx


@pytest.mark.slow
def test_model_axis_across_two_processes_matches_one_process(tmp_path):
  items = fx.many_bbq_items(12) + fx.hh_items()
  fx.score_here_and_launched(tmp_path, items, ("--num_processes=2", "--devices_per_process=4"),
                             ("--mesh=data:1,model:8",))
  one = fx.scores_by_key(tables.read_rows(tmp_path / "one", "scores"))
  two = fx.scores_by_key(tables.read_rows(tmp_path / "two", "scores"))
  assert two.keys() == one.keys()
  assert fx.max_abs_diff({k: r["reward"] for k, r in one.items()},
                         {k: r["reward"] for k, r in two.items()}) <= 1e-5
  # One group: its first process wrote every shard and run.json; nothing was gathered elsewhere.
  writers = {p.name.split("-")[1] for p in (tmp_path / "two").glob("scores-*.parquet")}
  assert writers == {"00000"}
  run = json.loads((tmp_path / "two" / "run.json").read_text())
  assert run["mesh"] == "data:1,model:8" and run["devices"] == 8
  assert run["process_count"] == 1 and run["items"] == len(items)
