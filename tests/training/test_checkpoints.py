"""Training checkpoints (training/checkpoints.py): leaves saved under their paths in the state,
restored into the fresh state's shapes, and a checkpoint of another tree refused in one line
naming the first leaf that differs."""

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
