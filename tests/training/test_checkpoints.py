"""Training checkpoints (training/checkpoints.py): leaves saved under their paths in the state,
restored into the fresh state's shapes, and a checkpoint of another tree refused in one line
naming the first leaf that differs. A damaged checkpoint (cut short, files missing, metadata that
does not parse) is passed over for the newest that restores completely, said in one line and set
aside; where none restores, one line names the folder."""

import logging
import os
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from socialrm_jax.base.errors import InputError
from socialrm_jax.training import checkpoints

KERNEL = "layers/attn/q_proj/kernel"


def state(params: dict) -> dict:
  """A run's state as the trainer saves it: parameters, AdamW's moments, the RNG key data."""
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
  return {"params": params, "opt_state": tx.init(params),
          "rng": jax.random.key_data(jax.random.key(0))}


def params(kernel: str = KERNEL, kernel_shape=(2, 3)) -> dict:
  return {kernel: jnp.arange(np.prod(kernel_shape), dtype=jnp.float32).reshape(kernel_shape),
          "score/kernel": jnp.full((3, 1), 0.5, jnp.float32)}


@pytest.fixture(name="store")
def saved_store(tmp_path):
  store = checkpoints.Checkpoints(str(tmp_path))
  store.save(3, state(params()), {"step": 3, "num_tokens": 17})
  yield store
  store.close()


def test_leaves_are_named_by_their_paths_in_the_state():
  names = list(checkpoints.state_names(state(params())))
  assert f"params/{KERNEL}" in names and "params/score/kernel" in names and "rng" in names
  assert f"opt_state/1/0/mu/{KERNEL}" in names and "opt_state/1/0/count" in names


def test_a_saved_state_restores_into_a_fresh_one(store):
  fresh = state({k: jnp.zeros_like(v) for k, v in params().items()})
  restored, position = store.restore(3, fresh)
  assert position == {"step": 3, "num_tokens": 17}
  expected = state(params())
  assert jax.tree.structure(restored) == jax.tree.structure(expected)
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(expected)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("fresh,named", [
    (params(kernel="layers/attn/query/kernel"), "'params/layers/attn/query/kernel' is not in the "
                                                "checkpoint"),
    (params(kernel_shape=(2, 4)), f"'params/{KERNEL}' is [2, 3] in the checkpoint, [2, 4] in the "
                                  "model"),
    ({"score/kernel": params()["score/kernel"]}, f"the checkpoint's 'params/{KERNEL}' is not in "
                                                 "the model"),
])
def test_a_checkpoint_of_another_tree_is_refused_naming_the_first_difference(store, fresh, named):
  with pytest.raises(InputError) as refused:
    store.restore(3, state(fresh))
  message = str(refused.value)
  assert "\n" not in message and named in message, message
  assert f"checkpoint {store.directory}/3 was saved from another model or optimizer" in message


def test_first_difference_by_hand():
  same = {"a": (1,), "b/c": (2, 2)}
  assert checkpoints.first_difference(same, same) is None
  assert checkpoints.first_difference(same, {"a": (1,), "b/d": (2, 2)}) == (
      "'b/d' is not in the checkpoint")
  # A parameter is named before an optimizer moment deeper in the tree, whatever the order.
  assert checkpoints.first_difference({"m/x/w": (1,), "w": (1,)}, {"m/x/v": (1,), "v": (1,)}) == (
      "'v' is not in the checkpoint")


def cut_short(path: pathlib.Path) -> None:
  """As a full disk or a killed copy leaves a file: its first half."""
  size = path.stat().st_size
  with open(path, "r+b") as f:
    f.truncate(size // 2)


def data_files(step: pathlib.Path) -> list[pathlib.Path]:
  return sorted(p for p in (step / "leaves" / "d").iterdir() if p.is_file())


# Each as found after a full disk or a killed copy, and the words the line says it with.
DAMAGE = {
    "sharding cut short": (lambda step: cut_short(step / "leaves" / "_sharding"),
                           "Invalid JSON"),
    "array data cut short": (lambda step: [cut_short(p) for p in data_files(step)],
                             "OUT_OF_RANGE: "),
    "array data missing": (lambda step: [p.unlink() for p in data_files(step)],
                           "NOT_FOUND: "),
    "tree metadata cut short": (lambda step: cut_short(step / "leaves" / "_METADATA"),
                                "its metadata does not read"),
    "tree metadata missing": (lambda step: (step / "leaves" / "_METADATA").unlink(),
                              "its leaves/_METADATA (the saved tree) is missing"),
    "step metadata cut short": (lambda step: cut_short(step / "_CHECKPOINT_METADATA"),
                                "its _CHECKPOINT_METADATA"),
    "commit mark missing": (lambda step: (step / "commit_success.txt").unlink(),
                            "its folder lacks orbax's commit mark (commit_success.txt)"),
    "position cut short": (lambda step: cut_short(step / "position" / "metadata"),
                           "does not restore completely: "),
    "leaves missing": (lambda step: shutil.rmtree(step / "leaves"),
                       "its leaves folder is missing"),
}


def two_checkpoints(tmp_path) -> checkpoints.Checkpoints:
  store = checkpoints.Checkpoints(str(tmp_path))
  store.save(3, state(params()), {"step": 3, "num_tokens": 17})
  store.save(6, state(jax.tree.map(lambda x: x + 1, params())), {"step": 6, "num_tokens": 34})
  return store


def fresh_state() -> dict:
  return state({k: jnp.zeros_like(v) for k, v in params().items()})


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_checkpoint_is_passed_over_for_the_one_before_in_one_line(
    tmp_path, damage, caplog):
  store = two_checkpoints(tmp_path)
  newest = pathlib.Path(store.step_directory(6))
  harm, said = DAMAGE[damage]
  harm(newest)
  with caplog.at_level(logging.WARNING):
    step, restored, position = store.restore_newest(fresh_state())
  assert step == 3 and position == {"step": 3, "num_tokens": 17}
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(state(params()))):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  lines = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
  assert len(lines) == 1 and "\n" not in lines[0], lines
  assert lines[0].startswith(f"checkpoint {newest} does not restore completely: ")
  assert said in lines[0] and "tensorstore_spec" not in lines[0] and lines[0].endswith(
      f"; set aside as {newest}.damaged, resuming from checkpoint 3"), lines[0]
  # Set aside, the step is free to be saved again, and restores.
  assert store.steps() == [3] and not newest.exists() and (tmp_path / "checkpoints" /
                                                           "6.damaged").is_dir()
  store.save(6, state(params()), {"step": 6, "num_tokens": 34})
  assert store.restore_newest(fresh_state())[0] == 6
  store.close()


def test_a_folder_whose_every_checkpoint_is_damaged_is_one_line_naming_it(tmp_path):
  store = two_checkpoints(tmp_path)
  cut_short(tmp_path / "checkpoints" / "6" / "leaves" / "_sharding")
  (tmp_path / "checkpoints" / "3" / "leaves" / "_METADATA").unlink()
  with pytest.raises(checkpoints.InputError) as refused:
    store.restore_newest(fresh_state())
  message = str(refused.value)
  assert "\n" not in message and message.startswith(
      f"{store.directory}: no checkpoint restores completely (checkpoint {store.directory}/6 "
      "does not restore completely: "), message
  assert f"checkpoint {store.directory}/3 does not restore completely: its leaves/_METADATA" in (
      message)
  assert message.endswith("remove the damaged checkpoints to train from the start, or use a new "
                          "--output_dir")
  assert store.steps() == [3, 6] and sorted(os.listdir(store.directory)) == ["3", "6"]
  store.close()


def test_a_checkpoint_of_another_tree_is_refused_not_passed_over(tmp_path):
  """A checkpoint that reads but holds another tree is the user's other run, not damage."""
  store = two_checkpoints(tmp_path)
  with pytest.raises(checkpoints.InputError, match="saved from another model or optimizer"):
    store.restore_newest(state(params(kernel_shape=(2, 4))))
  assert store.steps() == [3, 6]
  store.close()
