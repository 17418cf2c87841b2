"""Training curves where users watch them: `--report_to` (TRL's and transformers' name and values)
sends every row of train_metrics.jsonl to TensorBoard and/or Weights & Biases as it is written.

- Names: transformers' `rewrite_logs` (what its TensorBoard and W&B callbacks log, and so what a
  TRL RewardTrainer run shows): `eval_loss` is `eval/loss`, every other key `train/<key>`
  (`train/loss`, `train/rewards/chosen`, `train/learning_rate`), at the row's `step`.
- TensorBoard: an event file under `OUTPUT/logs/` (a resumed run adds one), written by
  tensorboardX (no TensorFlow) and flushed at every row, so a run stopped midway (an error, a
  kill) leaves its curves readable up to its last row. A resumed run's file opens with
  TensorBoard's restart marker (a `SessionLog.START` event at the first step it logs, as
  tensorboardX's `SummaryWriter(purge_step=)` writes), so TensorBoard drops the earlier file's
  points from that step on, which the resumed run logs again: each curve shows one point a step.
- Weights & Biases, when `wandb` is installed (a run that asks for it without is refused before
  training): `wandb.init(project=WANDB_PROJECT or "socialrm_jax", name=run_name, dir=OUTPUT,
  config=settings)`; offline when `WANDB_MODE` is unset and its server cannot be reached (a
  machine without network keeps the run to `wandb sync` later).

Values that are not finite go as they are (NaN, inf: TensorBoard draws them); jsonl keeps them as
null (`divergence.json_row`).
"""

from __future__ import annotations

import importlib.util
import math
import os
import pathlib
import socket
import time
from typing import Any, Mapping, Protocol, Sequence

from absl import logging

from socialrm_jax.base.errors import InputError

TENSORBOARD, WANDB = "tensorboard", "wandb"
REPORT_TO = (TENSORBOARD, WANDB)
# TRL's other values: "none" (nothing, the default) and "all" (every integration installed; here
# both that are).
NONE, ALL = "none", "all"
LOGS_DIR = "logs"
# Row keys that are no curve: the x axis, and divergence's list of non-finite names.
NOT_A_CURVE = ("step", "non_finite")
WANDB_HOST = ("api.wandb.ai", 443)


def metric_name(key: str) -> str:
  """The name transformers' `rewrite_logs` gives a logged key."""
  if key.startswith("eval_"):
    return "eval/" + key[len("eval_"):]
  if key.startswith("test_"):
    return "test/" + key[len("test_"):]
  return "train/" + key


def curves(row: Mapping[str, Any]) -> dict[str, float]:
  """A metrics row's numbers by their tracked names (a null, which jsonl writes for a value that
  was not finite, as NaN)."""
  return {metric_name(k): math.nan if v is None else float(v) for k, v in row.items()
          if k not in NOT_A_CURVE and (v is None or isinstance(v, (int, float)))}


def resolve(report_to: Sequence[str]) -> tuple[str, ...]:
  """`--report_to` as the trackers to run; refuses an unknown value or `wandb` not installed.
  A text (a config file's `report_to="tensorboard,wandb"`, as TRL takes it) is split at commas."""
  if isinstance(report_to, str):
    report_to = report_to.split(",")
  wanted = [v.strip() for v in report_to if v.strip()]
  unknown = sorted(set(wanted) - {*REPORT_TO, NONE, ALL})
  if unknown:
    raise InputError(f"--report_to={unknown[0]}: use {', '.join(REPORT_TO)}, {ALL} or {NONE}")
  if NONE in wanted:
    if len(wanted) > 1:
      raise InputError(f"--report_to={','.join(wanted)}: {NONE} with another tracker")
    return ()
  if ALL in wanted:
    return (TENSORBOARD,) + ((WANDB,) if importlib.util.find_spec("wandb") else ())
  if WANDB in wanted and importlib.util.find_spec("wandb") is None:
    raise InputError("--report_to=wandb: wandb is not installed (pip install wandb)")
  return tuple(dict.fromkeys(wanted))


class Tracker(Protocol):
  def log(self, row: Mapping[str, Any]) -> None: ...
  def close(self) -> None: ...


class TensorBoardTracker:
  """An event file under `folder`, written and flushed row by row (tensorboardX's `EventsWriter`
  and `summary.scalar`: its `SummaryWriter` queues events for a thread, which a run stopped by an
  error or a kill would lose)."""

  def __init__(self, folder: pathlib.Path, purge_from: int | None = None):
    """`purge_from`: a resumed run's first step; TensorBoard hides the points of the folder's
    earlier files from that step on."""
    # Only a run that asks for TensorBoard loads tensorboardX.
    from tensorboardX import event_file_writer, summary
    from tensorboardX.proto import event_pb2
    folder.mkdir(parents=True, exist_ok=True)
    # A resume in the same second gets a file of its own (the name carries the second only).
    self.writer = event_file_writer.EventsWriter(str(folder / "events"),
                                                 filename_suffix=f".{time.time_ns()}")
    self.event, self.scalar = event_pb2.Event, summary.scalar
    if purge_from is not None:
      self.writer.write_event(self.event(
          wall_time=time.time(), step=purge_from,
          session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))
      self.writer.flush()

  def log(self, row: Mapping[str, Any]) -> None:
    for name, value in curves(row).items():
      self.writer.write_event(self.event(wall_time=time.time(), step=int(row["step"]),
                                         summary=self.scalar(name, value)))
    self.writer.flush()

  def close(self) -> None:
    self.writer.close()


def _reachable(host: tuple[str, int], timeout: float = 2.0) -> bool:
  try:
    with socket.create_connection(host, timeout=timeout):
      return True
  except OSError:
    return False


class WandbTracker:
  """One W&B run (`wandb.init`), logged at each row's step."""

  def __init__(self, folder: pathlib.Path, run_name: str, config: Mapping[str, Any]):
    import wandb  # pylint: disable=import-error  (optional: `resolve` checked it is installed)
    mode = os.environ.get("WANDB_MODE")
    if not mode and not _reachable(WANDB_HOST):
      mode = "offline"
      logging.info("W&B: %s:%d cannot be reached; logging offline (wandb sync %s later)",
                   *WANDB_HOST, folder)
    self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "socialrm_jax"),
                          name=run_name or None, dir=str(folder), config=dict(config),
                          mode=mode or None)

  def log(self, row: Mapping[str, Any]) -> None:
    self.run.log({**curves(row), "train/global_step": int(row["step"])}, step=int(row["step"]))

  def close(self) -> None:
    self.run.finish()


def open_trackers(report_to: Sequence[str], output_dir: pathlib.Path, run_name: str,
                  config: Mapping[str, Any], resume_step: int = 0) -> list[Tracker]:
  """The trackers `report_to` names, started for a run writing `output_dir` from the step after
  `resume_step` (0: a fresh run)."""
  out: list[Tracker] = []
  for name in resolve(report_to):
    if name == TENSORBOARD:
      out.append(TensorBoardTracker(output_dir / LOGS_DIR,
                                    purge_from=resume_step + 1 if resume_step else None))
    else:
      out.append(WandbTracker(output_dir, run_name, config))
  return out
