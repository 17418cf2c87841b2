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

A checkpoint damaged after it was complete (files cut short by a full disk or a killed copy,
files missing, metadata that does not parse) is a `DamagedCheckpointError`, found by orbax's own
marks first (the `commit_success.txt` it writes as it commits a step, the step's metadata with its
commit time, each item's metadata) and otherwise by the restore itself failing to read a file.
`restore_newest` resumes from the newest checkpoint that restores completely: each newer one is
said in one line and set aside (renamed `<step>.damaged`, so the run can save that step again);
when none restores, one line names the folder.
"""

from __future__ import annotations

import json
import logging as std_logging
import os
import re
import sys
from typing import Any

import jax
import numpy as np
from absl import logging as absl_logging
from flax import traverse_util

from socialrm_jax.base.errors import InputError, one_line
from socialrm_jax.runtime import distributed

CHECKPOINTS = "checkpoints"
ITEMS = ("leaves", "position")
DAMAGED_SUFFIX = ".damaged"


class DamagedCheckpointError(InputError):
  """A checkpoint that does not restore completely: what is missing or unreadable, in one line."""


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


def _drop_closed_loop_echoes() -> None:
  """Keeps a failed restore's echoes off stderr. orbax reads a checkpoint's arrays concurrently on
  an event loop of its own and closes it as the first read fails; reads still in flight then
  finish into the closed loop, and Python prints each `RuntimeError('Event loop is closed')` as an
  unraisable exception's traceback, whenever it arrives (after the restore has returned, too).
  Those say nothing the restore's own error does not, so from the first failed restore on they are
  dropped; every other unraisable exception goes to the hook there was."""
  previous = sys.unraisablehook
  if getattr(previous, "drops_closed_loop_echoes", False):
    return

  def hook(unraisable):
    if not (isinstance(unraisable.exc_value, RuntimeError)
            and str(unraisable.exc_value) == "Event loop is closed"):
      previous(unraisable)

  hook.drops_closed_loop_echoes = True
  sys.unraisablehook = hook


def _reason(error: BaseException) -> str:
  """`error` in one line, without the spec tensorstore appends (its whole JSON configuration)."""
  if isinstance(error, json.JSONDecodeError):  # which file, the error does not say
    return f"one of its JSON files does not parse ({error})"
  return re.sub(r"\s*\[tensorstore_spec='.*'\]", "", one_line(str(error)))


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

  def step_directory(self, step: int) -> str:
    return os.path.join(self.directory, str(step))

  def _damage(self, step: int) -> str | None:
    """What orbax's own marks say is wrong with checkpoint `step`, else None: the commit mark it
    writes into the step's folder and each item's as it commits them, the step's metadata (which
    carries the commit time), the leaves' metadata (their tree)."""
    ocp = _ocp()
    atomicity = ocp.path.atomicity
    for where in ("", *ITEMS):
      folder = os.path.join(self.step_directory(step), where)
      if not ocp.path.step.is_path_finalized(
          folder, temporary_path_cls=atomicity.CommitFileTemporaryPath):
        what = f"its {where} folder" if where else "its folder"
        return (f"{what} lacks orbax's commit mark ({atomicity.COMMIT_SUCCESS_FILE})"
                if os.path.isdir(folder) else f"{what} is missing")
    metadata = self.manager.metadata(step)
    if metadata.commit_timestamp_nsecs is None:
      return "its _CHECKPOINT_METADATA (orbax's record of the commit) is missing or does not parse"
    if (metadata.item_metadata or {}).get("leaves") is None:
      return "its leaves/_METADATA (the saved tree) is missing or does not parse"
    return None

  def restore(self, step: int, like: Any) -> tuple[Any, dict]:
    """(state shaped and placed as `like`, position) of checkpoint `step`; an `InputError` naming
    the first leaf that differs where the checkpoint's tree is not `like`'s, a
    `DamagedCheckpointError` saying what is wrong where it does not restore completely."""
    ocp = _ocp()
    fresh = state_names(like)
    try:
      damage = self._damage(step)
      saved = None if damage else traverse_util.flatten_dict(
          self.manager.item_metadata(step)["leaves"].tree, sep="/")
    except (OSError, ValueError, KeyError) as error:
      _drop_closed_loop_echoes()
      damage = f"its metadata does not read: {_reason(error)}"
    if damage:
      raise DamagedCheckpointError(f"checkpoint {self.step_directory(step)} does not restore "
                                   f"completely: {damage}")
    differs = first_difference({name: leaf.shape for name, leaf in saved.items()},
                               {name: np.shape(leaf) for name, leaf in fresh.items()})
    if differs is not None:
      raise InputError(f"checkpoint {self.step_directory(step)} was saved from "
                       f"another model or optimizer: {differs}")
    target = traverse_util.unflatten_dict(
        {name: jax.ShapeDtypeStruct(np.shape(leaf), leaf.dtype,
                                    sharding=getattr(leaf, "sharding", None))
         for name, leaf in fresh.items()}, sep="/")
    try:
      restored = self.manager.restore(step, args=ocp.args.Composite(
          leaves=ocp.args.StandardRestore(target), position=ocp.args.JsonRestore()))
    except (OSError, ValueError, KeyError) as error:  # tensorstore's read errors are ValueErrors
      _drop_closed_loop_echoes()
      raise DamagedCheckpointError(f"checkpoint {self.step_directory(step)} does not restore "
                                   f"completely: {_reason(error)}") from error
    leaves = traverse_util.flatten_dict(restored["leaves"], sep="/")
    return (jax.tree.unflatten(jax.tree.structure(like), [leaves[name] for name in fresh]),
            dict(restored["position"]))

  def restore_newest(self, like: Any) -> tuple[int, Any, dict]:
    """(step, state, position) of the newest checkpoint that restores completely (`restore`).
    Each newer one is said in one line and set aside (`set_aside`); an `InputError` naming the
    folder where none restores (nothing set aside then: the folder is as it was)."""
    damaged = []
    for step in reversed(self.steps()):
      try:
        restored, position = self.restore(step, like)
      except DamagedCheckpointError as error:
        damaged.append((step, str(error)))
        continue
      for bad, why in damaged:
        aside = self.set_aside(bad)
        absl_logging.warning("%s; set aside as %s, resuming from checkpoint %d", why, aside, step)
      return step, restored, position
    raise InputError(f"{self.directory}: no checkpoint restores completely ("
                     + "; ".join(why for _, why in damaged) + "); remove the damaged checkpoints "
                     "to train from the start, or use a new --output_dir")

  def set_aside(self, step: int) -> str:
    """Renames checkpoint `step` to `<step>.damaged` (orbax's step names are digits alone, so it
    lists it no more), that the run may save that step anew; returns the new path."""
    aside = self.step_directory(step) + DAMAGED_SUFFIX
    count = 1
    while os.path.exists(aside):  # a step damaged before, and set aside then
      count += 1
      aside = f"{self.step_directory(step)}{DAMAGED_SUFFIX}.{count}"
    distributed.barrier(f"checkpoint {step} named aside")  # every process names the same path
    if distributed.is_coordinator():  # the folder is the job's, shared as orbax's saves expect
      os.rename(self.step_directory(step), aside)
    distributed.barrier(f"checkpoint {step} set aside")
    self.manager.reload()
    return aside

  def close(self) -> None:
    self.manager.close()
