"""Training checkpoints: `OUTPUT/checkpoints/<step>/`, orbax, one per `--checkpoint_every` steps.

A checkpoint holds the trained parameters and the optimizer state (every leaf of the pair, in
tree order, as `leaves/<i>`: the trees' keys hold slashes, which orbax would take for folders),
the RNG key, and a JSON `position` (optimizer step, micro-batches consumed: the data position,
since epochs are seeded shuffles), restored each leaf straight into the sharding of the fresh
state it replaces. orbax writes a step into a temporary folder and renames it when complete, so a
run killed mid-save resumes from the checkpoint before.
"""

from __future__ import annotations

import logging as std_logging
import os
from typing import Any

import jax
import numpy as np
from absl import logging as absl_logging

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


class Checkpoints:
  """The run's checkpoint folder: `save(step, state, position)`, `latest()`,
  `restore(step, like)`."""

  def __init__(self, output_dir: str, keep: int | None = None):
    ocp = _ocp()
    self.directory = os.path.abspath(os.path.join(output_dir, CHECKPOINTS))
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False,
                                           create=True)
    self.manager = ocp.CheckpointManager(self.directory, options=options)

  def latest(self) -> int | None:
    return self.manager.latest_step()

  def steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def save(self, step: int, state: Any, position: dict) -> None:
    """`state`: a pytree of arrays (trained parameters, optimizer state, RNG key data)."""
    ocp = _ocp()
    leaves = {str(i): leaf for i, leaf in enumerate(jax.tree.leaves(state))}
    self.manager.save(step, args=ocp.args.Composite(
        leaves=ocp.args.StandardSave(leaves), position=ocp.args.JsonSave(position)), force=True)
    self.manager.wait_until_finished()

  def restore(self, step: int, like: Any) -> tuple[Any, dict]:
    """(state shaped and placed as `like`, position) of checkpoint `step`."""
    ocp = _ocp()
    flat, treedef = jax.tree.flatten(like)
    target = {str(i): jax.ShapeDtypeStruct(np.shape(leaf), leaf.dtype,
                                           sharding=getattr(leaf, "sharding", None))
              for i, leaf in enumerate(flat)}
    restored = self.manager.restore(step, args=ocp.args.Composite(
        leaves=ocp.args.StandardRestore(target), position=ocp.args.JsonRestore()))
    leaves = [restored["leaves"][str(i)] for i in range(len(flat))]
    return jax.tree.unflatten(treedef, leaves), dict(restored["position"])

  def close(self) -> None:
    self.manager.close()
