"""The hooks of a training run (`trainer.Trainer.add_hook`): the metrics rows (`LogMetrics`, into
`MetricsLog`: train_metrics.jsonl and the `--report_to` trackers), the held-out evaluation
(`Evaluate`) and the checkpoints (`SaveCheckpoints`, which also restores the latest).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
from typing import Any, Sequence

import jax
import numpy as np
from absl import logging

from socialrm_jax.base import tables
from socialrm_jax.training import checkpoints as checkpoints_lib
from socialrm_jax.training import divergence, pair_batches, trackers
from socialrm_jax.training import train_step as train_step_lib
from socialrm_jax.training.trainer import Hook, StepInfo, TrainState

LN2 = math.log(2.0)
# The loss "stays at ln 2" when its mean over this many logged steps is within LN2_TOLERANCE.
LN2_WINDOW_STEPS = 20
LN2_TOLERANCE = 0.005
# Seconds between two progress lines in the log.
PROGRESS_EVERY_SECONDS = 10


def _json_line(row: dict) -> str:
  """A metrics row as one line of strict JSON: a non-finite value is null, named in
  `"non_finite"` (training/divergence.py)."""
  return json.dumps(divergence.json_row(row), allow_nan=False) + "\n"


class MetricsLog:
  """train_metrics.jsonl, appended a row at a time; a resume first drops rows after its step.
  Each row goes to the `--report_to` trackers too (training/trackers.py). Of a multi-process
  job's processes, the coordinator writes (`writes`); the others only keep the rows."""

  def __init__(self, path: pathlib.Path, resume_step: int,
               to: Sequence[trackers.Tracker] = (), writes: bool = True):
    self.path, self.writes = path, writes
    self.trackers = list(to)
    rows = []
    if resume_step and path.exists():
      rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
      rows = [r for r in rows if r.get("step", 0) <= resume_step]
    if writes:
      tables.atomic_write_bytes(path, "".join(map(_json_line, rows)).encode())
    self.rows = rows

  def add(self, row: dict) -> None:
    self.rows.append(row)
    if not self.writes:
      return
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(_json_line(row))
    for tracker in self.trackers:
      tracker.log(row)

  def close(self) -> None:
    for tracker in self.trackers:
      tracker.close()


def mean_rows(rows: Sequence[dict]) -> dict[str, float]:
  """The mean of each metric over the steps' rows (TRL's names; the pair count left out)."""
  return {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "pairs"}


class LogMetrics(Hook):
  """A row of the steps' mean metrics (TRL's names), the learning rate, the tokens and their rate
  since the run began; a warning when the loss stays at ln 2; a progress line every
  `PROGRESS_EVERY_SECONDS`. The diverged step's row too. Closes the log at the end."""
  reads_metrics = True

  def __init__(self, log: MetricsLog, schedule: Any, micro_batches_per_epoch: int,
               accumulation: int):
    self.log, self.schedule = log, schedule
    self.per_epoch, self.accumulation = micro_batches_per_epoch, accumulation
    self.losses: list[float] = []
    self.warned = False
    self.last_line: float | None = None

  def step(self, info: StepInfo) -> None:
    done, state = info.step, info.state
    elapsed = time.monotonic() - info.started
    row = {"step": done, "epoch": round(done * self.accumulation / self.per_epoch, 4),
           **mean_rows(info.metrics), "learning_rate": float(self.schedule(done - 1)),
           "num_tokens": state.num_tokens,
           "tokens_per_second": round((state.num_tokens - info.start_tokens)
                                      / max(elapsed, 1e-9), 1)}
    self.log.add(row)
    self.losses.extend(r["loss"] for r in info.metrics)
    if (not self.warned and len(self.losses) >= LN2_WINDOW_STEPS
        and abs(np.mean(self.losses[-LN2_WINDOW_STEPS:]) - LN2) < LN2_TOLERANCE):
      self.warned = True
      logging.warning(
          "the training loss has stayed at ln 2 = %.4f for %d steps: chosen and rejected get "
          "the same reward, as when the reward is read inside the prompt or the learning rate "
          "is too small to move it", LN2, LN2_WINDOW_STEPS)
    now = time.monotonic()
    if now - (self.last_line or info.started) >= PROGRESS_EVERY_SECONDS or (
        done == info.total_steps):
      self.last_line = now
      rate = (done - info.start_step) / max(now - info.started, 1e-9)
      logging.info("step %d/%d | loss %.4f | accuracy %.3f | %.0f tokens/s | ETA %.0fs", done,
                   info.total_steps, row["loss"], row["accuracy"], row["tokens_per_second"],
                   (info.total_steps - done) / max(rate, 1e-9))

  def diverged(self, info: StepInfo) -> None:
    self.log.add({"step": info.step, **mean_rows(info.metrics),
                  "learning_rate": float(self.schedule(info.step - 1)),
                  "num_tokens": info.state.num_tokens})

  def end(self, state: TrainState) -> None:
    self.log.close()


class Evaluate(Hook):
  """A row of pooled metrics over the held-out pairs (every pair weighted alike), at the steps it
  is due and at the end (`final`, for the manifest); nothing when there are none."""

  def __init__(self, log: MetricsLog, step_fn: train_step_lib.TrainStep, frozen: dict,
               pairs: pair_batches.EncodedPairs, layout: dict):
    self.log, self.step_fn, self.frozen = log, step_fn, frozen
    self.pairs, self.layout = pairs, layout
    self.final: dict[str, float] = {}

  def evaluate(self, state: TrainState) -> dict[str, float]:
    blocks = self.pairs.blocks(self.layout)
    metrics = jax.device_get(self.step_fn.evaluate(state.trained, self.frozen,
                                                   [b.arrays() for b in blocks]))
    out = {f"eval_{k}": float(metrics[k]) for k in (
        "loss", "accuracy", "margin", "rewards/chosen", "rewards/rejected", "mean_reward",
        "min_reward", "max_reward")}
    out["eval_pairs"] = int(metrics["pairs"])
    return out

  def step(self, info: StepInfo) -> None:
    if self.pairs.items:
      self.log.add({"step": info.step, **self.evaluate(info.state)})

  def end(self, state: TrainState) -> None:
    if self.pairs.items:
      self.final = self.evaluate(state)
      self.log.add({"step": state.step, **self.final})


class SaveCheckpoints(Hook):
  """A checkpoint of the state (once checked finite) at the steps it is due, at step 0 of a fresh
  run when `initial`; `restore_latest` resumes from the newest that restores completely. Closes
  the store at the end."""

  def __init__(self, store: checkpoints_lib.Checkpoints, accumulation: int, initial: bool):
    self.store, self.accumulation, self.initial = store, accumulation, initial

  def restore_latest(self, fresh: TrainState) -> TrainState:
    """The state of the newest checkpoint that restores completely (a damaged newer one said and
    set aside: `Checkpoints.restore_newest`), restored into `fresh`'s shapes and places."""
    step, restored, position = self.store.restore_newest(fresh.tree())
    return TrainState(restored["params"], restored["opt_state"], restored["rng"],
                      int(position["step"]), int(position["num_tokens"]),
                      self.store.step_directory(step))

  def save(self, state: TrainState) -> None:
    if not bool(divergence.all_finite((state.trained, state.opt_state))):
      self.store.close()
      raise divergence.not_finite_state(state.step, state.last_checkpoint)
    self.store.save(state.step, state.tree(),
                    {"step": state.step, "num_tokens": state.num_tokens,
                     "micro_batches": state.step * self.accumulation})
    state.last_checkpoint = os.path.join(self.store.directory, str(state.step))

  def begin(self, state: TrainState) -> None:
    if self.initial and state.step == 0 and state.last_checkpoint is None:
      self.save(state)

  def step(self, info: StepInfo) -> None:
    self.save(info.state)

  def diverged(self, info: StepInfo) -> None:
    self.store.close()

  def end(self, state: TrainState) -> None:
    self.store.close()
