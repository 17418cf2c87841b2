"""One output folder holds one model's scores: other weights of the same shapes, a changed
checkpoint at the same path, other item contents, and a second concurrent writer are refused."""

import shutil

import pytest

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import engine, shards
from tests.helpers import scoring_fixtures as fx

OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=512, chunk_size=2)


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
  """Model A and model B: same architecture, shapes, config and tokenizer; other weights."""
  folder = tmp_path_factory.mktemp("models")
  fx.make_llama(folder / "a", seed=0)
  fx.make_llama(folder / "b", seed=1)
  return folder / "a", folder / "b"


def _rows(folder):
  return fx.scores_by_key(tables.read_rows(folder, "scores"))


def test_model_b_cannot_resume_model_a_partial_run(two_models, tmp_path):
  a, b = two_models
  items = fx.bbq_items()
  out = tmp_path / "scores"
  engine.score_items(load_reward_model(a), items[:2], out, options=OPTIONS, model_path=str(a))
  partial = _rows(out)
  # The same items under B's weights: A's identity is its bytes, not its names and shapes.
  assert shards.model_identity(a)["sha256"] != shards.model_identity(b)["sha256"]
  with pytest.raises(InputError, match="another model"):
    engine.score_items(load_reward_model(b), items[:2], out, options=OPTIONS, model_path=str(b))
  assert _rows(out) == partial  # The folder keeps only A's scores.


def test_changed_weights_at_the_same_path_are_refused(two_models, tmp_path):
  a, b = two_models
  model_dir = tmp_path / "rm"
  shutil.copytree(a, model_dir)
  items = fx.bbq_items()[:2]
  engine.score_items(load_reward_model(model_dir), items, tmp_path / "s", options=OPTIONS,
                     model_path=str(model_dir))
  shutil.copy(b / "model.safetensors", model_dir / "model.safetensors")  # Fine-tuned further.
  with pytest.raises(InputError, match="files have changed"):
    engine.score_items(load_reward_model(model_dir), items, tmp_path / "s", options=OPTIONS,
                       model_path=str(model_dir))


def test_a_copied_model_keeps_its_identity(two_models, tmp_path):
  a, _ = two_models
  shutil.copytree(a, tmp_path / "copy")
  assert shards.model_identity(a)["sha256"] == shards.model_identity(tmp_path / "copy")["sha256"]


def test_large_files_are_told_apart_by_a_sample(tmp_path, monkeypatch):
  monkeypatch.setattr(shards, "FULL_HASH_BYTES", 1000)
  monkeypatch.setattr(shards, "SAMPLE_BLOCK_BYTES", 16)
  for name, fill in (("x", 1), ("y", 2)):
    (tmp_path / name).mkdir()
    (tmp_path / name / "model.safetensors").write_bytes(bytes([fill]) * 5000)
  assert shards.model_identity(tmp_path / "x")["sha256"] != shards.model_identity(tmp_path / "y")["sha256"]


def test_other_item_contents_under_the_same_ids_are_refused(two_models, tmp_path):
  a, _ = two_models
  items = fx.bbq_items()[:2]
  engine.score_items(load_reward_model(a), items, tmp_path, options=OPTIONS, model_path=str(a))
  edited = [dict(items[0], candidates=list(items[0]["candidates"])[::-1])] + items[1:]
  with pytest.raises(InputError, match="another item set"):
    engine.score_items(load_reward_model(a), edited, tmp_path, options=OPTIONS, model_path=str(a))


def test_a_second_concurrent_writer_fails_at_once(tmp_path):
  identity = dict(model={"sha256": "m", "path": "rm"}, items=shards.items_identity([]),
                  settings={}, chunk_size=1)
  first = shards.ShardStore(tmp_path, **identity)
  with pytest.raises(InputError, match=r"another scoring run \(host .* pid \d+\)"):
    shards.ShardStore(tmp_path, **identity)
  first.close()
  shards.ShardStore(tmp_path, **identity).close()  # Free again once the first is done.
  # Writers of other numbers (the processes of one multi-process run) share the folder.
  one, two = shards.ShardStore(tmp_path, **identity), shards.ShardStore(tmp_path, **identity,
                                                                        writer=1)
  one.close()
  two.close()


def test_rerunning_a_complete_folder_changes_nothing(two_models, tmp_path):
  a, _ = two_models
  items = fx.bbq_items()
  engine.score_items(load_reward_model(a), items, tmp_path, options=OPTIONS, model_path=str(a))
  before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.startswith(".")}
  run = engine.score_items(load_reward_model(a), items, tmp_path, options=OPTIONS,
                           model_path=str(a))
  after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.startswith(".")}
  assert after == before  # run.json too: it still describes the run that scored the folder.
  assert run["items"] == len(items)


def test_temporaries_of_a_killed_run_are_removed_on_reopen(tmp_path):
  identity = dict(model={"sha256": "m", "path": "rm"}, items=shards.items_identity([]),
                  settings={}, chunk_size=1)
  shards.ShardStore(tmp_path, **identity).close()
  (tmp_path / ".manifest.json.abc123.tmp").write_text("{")  # Killed inside an atomic write.
  (tmp_path / ".scores-00000-00002.parquet.xyz").mkdir()     # ... and inside a shard's.
  (tmp_path / ".scores-00001-00002.parquet.xyz").mkdir()     # Another writer's: left alone.
  shards.ShardStore(tmp_path, **identity).close()
  assert sorted(p.name for p in tmp_path.iterdir() if ".tmp" in p.name or ".parquet." in p.name) \
      == [".scores-00001-00002.parquet.xyz"]
