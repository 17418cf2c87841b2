"""A run killed midway (SIGKILL, or SIGTERM as a scheduler sends it), then rerun into the same
folder, gives the uninterrupted scores."""

import json
import os
import signal
import subprocess
import time

import pyarrow as pa
import pytest

from socialrm_jax.base import tables
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import engine, shards
from tests.helpers import scoring_fixtures as fx

NUM_ITEMS = 160
CHUNK = 4
POLL_SECONDS = 0.005


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_killed_run_resumes_to_the_uninterrupted_scores(tmp_path, stop):
  fx.make_llama(tmp_path / "rm")
  items = fx.many_bbq_items(NUM_ITEMS)
  tables.write_rows(tmp_path / "items" / "items.jsonl", items)
  out = tmp_path / "scores"
  command = fx.score_command(tmp_path / "rm", tmp_path / "items", out)
  child = subprocess.Popen(command, env=fx.subprocess_env(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + 300
  while not list(out.glob("scores-*.parquet")) and child.poll() is None:
    assert time.monotonic() < deadline, "no shard appeared"
    time.sleep(POLL_SECONDS)
  os.kill(child.pid, stop)
  assert child.wait() != 0
  written = len(list(out.glob("scores-*.parquet")))
  total = NUM_ITEMS // CHUNK
  assert 1 <= written < total, f"the kill came too late to test resuming ({written}/{total})"

  subprocess.run(command, env=fx.subprocess_env(), check=True, timeout=300,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  run = json.loads((out / "run.json").read_text())
  assert run["items_resumed"] >= written * CHUNK and run["items"] + run["items_resumed"] == NUM_ITEMS
  assert len(list(out.glob("scores-*.parquet"))) == total
  assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]

  engine.score_items(load_reward_model(tmp_path / "rm"), items, tmp_path / "uninterrupted",
                     options=engine.ScoringOptions(max_length=256, tokens_per_batch=1024,
                                                   chunk_size=CHUNK),
                     model_path=str(tmp_path / "rm"))
  resumed = tables.read_rows(out, "scores")
  reference = tables.read_rows(tmp_path / "uninterrupted", "scores")
  assert len(resumed) == len(reference) == 3 * NUM_ITEMS  # No duplicates, nothing missing.
  assert fx.scores_by_key(resumed) == fx.scores_by_key(reference)
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["chunks_done"] == list(range(total))


def test_shard_renamed_before_the_manifest_update_is_recorded_on_reopen(tmp_path):
  """A kill can land between a shard's rename and the manifest update: reopening the folder
  brings the manifest in line with the complete shards on disk."""
  identity = dict(model={"sha256": "m", "path": "rm"},
                  items=shards.items_identity([{"item_id": "a"}, {"item_id": "b"}]),
                  settings={"proxy": "none"}, chunk_size=1)
  shards.ShardStore(tmp_path, **identity)
  schema = pa.schema([("item_id", pa.string()), ("candidate", pa.int32()), ("reward", pa.float64())])
  # What `ShardStore.write` does before it takes the lock: the complete shard, renamed in place.
  tables.write_rows(tmp_path / shards.shard_name(0, 1), [{"item_id": "b", "candidate": 0,
                                                          "reward": 1.0}], "parquet", schema)
  assert json.loads((tmp_path / "manifest.json").read_text())["chunks_done"] == []
  store = shards.ShardStore(tmp_path, **identity)
  assert store.done_chunks() == {1}
  assert json.loads((tmp_path / "manifest.json").read_text())["chunks_done"] == [1]
