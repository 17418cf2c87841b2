"""Training checkpoints: `OUTPUT/checkpoints/<step>/`, orbax, one per `--checkpoint_every` steps.

A checkpoint holds the trained parameters, the optimizer state and the RNG key (as `leaves`, each
leaf under its path in the state: `params/layers/attn/q_proj/kernel`,
`opt_state/1/0/mu/layers/attn/q_proj/kernel`; `state_names`), and a JSON `position` (optimizer
step, micro-batches consumed: the data position, since epochs are seeded shuffles), restored each
leaf straight into the sharding of the fresh state it replaces. A checkpoint whose names or shapes
differ from the fresh state's (a parameter renamed, added or reshaped) is refused in one line
naming the first that differs, rather than restored into the wrong leaves. orbax writes a step
into a temporary folder and renames it when complete, so a run killed mid-save resumes from the
checkpoint before.
"""

from __future__ import annotations

import logging as std_logging
import os
from typing import Any

import jax
import numpy as np
from absl import logging as absl_logging
from flax import traverse_util

from socialrm_jax.base.errors import InputError

CHECKPOINTS = "checkpoints"


class _QuietOrbax(std_logging.Filter):
  """Drops orbax's INFO lines (a few dozen per save) from the command's log; warnings stay."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    return record.levelno >= std_logging.WARNING or f"{os.sep}orbax{os.sep}" not in record.pathname


def _ocp():
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  handler = absl_logging.get_absl_handler()
  if not any(isinstance(f, _QuietOrbax) for f in handler.filters):
    handler.addFilter(_QuietOrbax())
  return ocp


def state_names(state: Any) -> dict[str, Any]:
  """{path of each leaf of `state` ('params/layers/attn/q_proj/kernel'): the leaf}, in tree
  order."""
  flat, _ = jax.tree_util.tree_flatten_with_path(state)
  return {jax.tree_util.keystr(path, simple=True, separator="/"): leaf for path, leaf in flat}


def first_difference(saved: dict[str, tuple[int, ...]], fresh: dict[str, tuple[int, ...]]
                     ) -> str | None:
  """The first leaf of the fresh state that the checkpoint lacks or holds in another shape, else
  the first the checkpoint holds and the fresh state lacks; None when they agree. Both: {leaf
  path: shape}. Shallower paths first, so that a parameter is named before its optimizer
  moments (`params/score/kernel` before `opt_state/1/0/mu/score/kernel`)."""
  def shallow_first(names):
    return sorted(names, key=lambda name: name.count("/"))  # stable: tree order within a depth

  for name in shallow_first(fresh):
    shape = fresh[name]
    if name not in saved:
      return f"{name!r} is not in the checkpoint"
    if tuple(saved[name]) != tuple(shape):
      return f"{name!r} is {list(saved[name])} in the checkpoint, {list(shape)} in the model"
  extra = next((name for name in shallow_first(saved) if name not in fresh), None)
  return None if extra is None else f"the checkpoint's {extra!r} is not in the model"


class Checkpoints:
  """The run's checkpoint folder: `save(step, state, position)`, `latest()`,
  `restore(step, like)`."""

  def __init__(self, output_dir: str, keep: int | None = None):
    ocp = _ocp()
    self.directory = os.path.abspath(os.path.join(output_dir, CHECKPOINTS))
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False,
                                           create=True)
    self.manager = ocp.CheckpointManager(
        self.directory, options=options,
        item_handlers={"leaves": ocp.StandardCheckpointHandler(),
                       "position": ocp.JsonCheckpointHandler()})

  def latest(self) -> int | None:
    return self.manager.latest_step()

  def steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def save(self, step: int, state: Any, position: dict) -> None:
    """`state`: a pytree of arrays (trained parameters, optimizer state, RNG key data)."""
    ocp = _ocp()
    # Nested by the paths' parts: orbax takes a slash in a key for a folder.
    leaves = traverse_util.unflatten_dict(state_names(state), sep="/")
    self.manager.save(step, args=ocp.args.Composite(
        leaves=ocp.args.StandardSave(leaves), position=ocp.args.JsonSave(position)), force=True)
    self.manager.wait_until_finished()

  def restore(self, step: int, like: Any) -> tuple[Any, dict]:
    """(state shaped and placed as `like`, position) of checkpoint `step`; an `InputError` naming
    the first leaf that differs where the checkpoint's tree is not `like`'s."""
    ocp = _ocp()
    fresh = state_names(like)
    saved = traverse_util.flatten_dict(self.manager.item_metadata(step)["leaves"].tree, sep="/")
    differs = first_difference({name: leaf.shape for name, leaf in saved.items()},
                               {name: np.shape(leaf) for name, leaf in fresh.items()})
    if differs is not None:
      raise InputError(f"checkpoint {os.path.join(self.directory, str(step))} was saved from "
                       f"another model or optimizer: {differs}")
    target = traverse_util.unflatten_dict(
        {name: jax.ShapeDtypeStruct(np.shape(leaf), leaf.dtype,
                                    sharding=getattr(leaf, "sharding", None))
         for name, leaf in fresh.items()}, sep="/")
    restored = self.manager.restore(step, args=ocp.args.Composite(
        leaves=ocp.args.StandardRestore(target), position=ocp.args.JsonRestore()))
    leaves = traverse_util.flatten_dict(restored["leaves"], sep="/")
    return (jax.tree.unflatten(jax.tree.structure(like), [leaves[name] for name in fresh]),
            dict(restored["position"]))

  def close(self) -> None:
    self.manager.close()
