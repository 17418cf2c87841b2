"""The training loop as a library, with hooks (as levanter's `Trainer.add_hook` and the flax
examples' `train_and_evaluate`).

`Trainer.run(state)` takes the optimizer steps from `state.step` to `total_steps`, each over its
`accumulation` micro-batches (`micro_batches(i)`: the packed blocks of micro-batch i, the data
position) through the jitted step (`train_step.TrainStep`), and after each step calls the hooks
due there. Everything else a run does is a hook its caller registers (`add_hook`: every N steps,
at given steps, at the last step or never there): the metrics rows, evaluation and checkpoints
(`training/loop_hooks.py`; `orchestrators/train.py` wires them).

A micro-batch whose loss or gradient norm is NaN or infinite ends the loop at once
(`divergence.py`): every hook's `diverged` sees the step (the metrics row is written, the
checkpoints closed), then `TrainingDivergedError` names it and the last checkpoint.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Sequence

import jax

from socialrm_jax.models import reward_model
from socialrm_jax.training import divergence, pair_batches, trainable
from socialrm_jax.training import train_step as train_step_lib
from socialrm_jax.training.config import TrainConfig


@dataclasses.dataclass
class TrainState:
  """What a step changes and a checkpoint holds (`tree`), the data position (`step`,
  `num_tokens`), and the newest checkpoint there is (what a diverged run names)."""
  trained: dict
  opt_state: Any
  rng: Any
  step: int = 0  # optimizer steps done
  num_tokens: int = 0  # TRL's num_tokens: both full sequences of every pair trained on
  last_checkpoint: str | None = None

  def tree(self) -> dict[str, Any]:
    return {"params": self.trained, "opt_state": self.opt_state, "rng": self.rng}


@dataclasses.dataclass(frozen=True)
class StepInfo:
  """What a hook is called with after a step."""
  step: int  # optimizer steps done (the metrics rows' step)
  state: TrainState
  # The micro-batches' metrics since the hook's last call (when it `reads_metrics`).
  metrics: list[dict[str, float]]
  started: float  # time.monotonic() when this run's loop began
  start_step: int  # the step this run (a resume) began at
  start_tokens: int  # num_tokens then
  total_steps: int


class Hook:
  """A trainer's hook: `begin` before the first step, `step` after each step it is due at,
  `diverged` on the step that went non-finite, `end` after the last step (the hooks' ends in
  reverse order of registration, as nested context managers close)."""
  reads_metrics = False  # whether `StepInfo.metrics` is kept for it

  def begin(self, state: TrainState) -> None:
    del state

  def step(self, info: StepInfo) -> None:
    del info

  def diverged(self, info: StepInfo) -> None:
    del info

  def end(self, state: TrainState) -> None:
    del state


@dataclasses.dataclass
class _Registered:
  hook: Hook
  every: int
  steps: frozenset[int]
  at_end: bool
  window: list[dict[str, float]]

  def due(self, done: int, total_steps: int) -> bool:
    due = bool(self.every and done % self.every == 0) or done in self.steps
    return due or done == total_steps if self.at_end else due and done != total_steps


class Trainer:
  """The loop: `add_hook`, then `run(state)`."""

  def __init__(self, step_fn: train_step_lib.TrainStep, frozen: dict,
               micro_batches: Callable[[int], list[pair_batches.PairBlock]], *,
               total_steps: int, accumulation: int):
    self.step_fn, self.frozen, self.micro_batches = step_fn, frozen, micro_batches
    self.total_steps, self.accumulation = total_steps, accumulation
    self._hooks: list[_Registered] = []

  def add_hook(self, hook: Hook, *, every: int = 0, steps: Sequence[int] = (),
               at_end: bool = False) -> None:
    """Calls `hook.step` after every `every`-th step (0: none) and after `steps`; at the last
    step too when `at_end`, else never there (its `end` covers it). Hooks run in this order."""
    self._hooks.append(_Registered(hook, every, frozenset(steps), at_end, []))

  def _info(self, step: int, state: TrainState, metrics: list, started: tuple) -> StepInfo:
    return StepInfo(step, state, metrics, *started, self.total_steps)

  def run(self, state: TrainState) -> TrainState:
    """Trains `state` on to `total_steps`; returns it trained."""
    for registered in self._hooks:
      registered.hook.begin(state)
    started = (time.monotonic(), state.step, state.num_tokens)
    for step in range(state.step, self.total_steps):
      for k in range(self.accumulation):
        blocks = self.micro_batches(step * self.accumulation + k)
        state.trained, state.opt_state, metrics = self.step_fn.step(
            state.trained, state.opt_state, self.frozen, [b.arrays() for b in blocks])
        state.num_tokens += sum(b.sequence_tokens for b in blocks)
        # The metrics come to the host to be logged: that is where divergence is checked.
        row = {key: float(v) for key, v in jax.device_get(metrics).items()}
        for registered in self._hooks:
          if registered.hook.reads_metrics:
            registered.window.append(row)
        if divergence.non_finite(row):
          for registered in self._hooks:
            registered.hook.diverged(self._info(step + 1, state, registered.window, started))
          raise divergence.diverged(step + 1, row, state.last_checkpoint)
      state.step = step + 1
      for registered in self._hooks:
        if registered.due(state.step, self.total_steps):
          window, registered.window = registered.window, []
          registered.hook.step(self._info(state.step, state, window, started))
    for registered in reversed(self._hooks):
      registered.hook.end(state)
    return state


@dataclasses.dataclass
class RunSetup:
  """What a run trains with: the jitted step, the optimizer's learning-rate schedule, the frozen
  parameters, and the fresh state (what a checkpoint's restore replaces)."""
  step_fn: train_step_lib.TrainStep
  schedule: Any
  frozen: dict
  state: TrainState


def build_step(config: TrainConfig, model: trainable.TrainModel, mesh,
               total_steps: int) -> tuple[train_step_lib.TrainStep, Any]:
  """(the jitted step, its learning-rate schedule) of a run of `total_steps` optimizer steps: the
  optimizer `config.optimizer` builds, LoRA's scale, the compute dtype. The one derivation of the
  step, for the run (`run_setup`) and for `socialrm-plan --train`, which compiles it."""
  tx, schedule = config.optimizer.build(total_steps)
  step_fn = train_step_lib.TrainStep(
      model, tx, mesh, dtype=reward_model.model_dtype(config.dtype), lora_scale=config.lora.scale,
      center_rewards_coefficient=config.center_rewards_coefficient)
  return step_fn, schedule


def run_setup(config: TrainConfig, model: trainable.TrainModel, mesh,
              total_steps: int) -> RunSetup:
  """The step and fresh state of a run of `total_steps` steps: the trained parameters in float32,
  LoRA's adapters (A drawn from `config.seed`, B zero) where it trains, the frozen rest."""
  lora = config.lora
  trained, frozen = trainable.split_trainable(model.params, lora.enabled)
  adapters = {}
  if lora.enabled:
    targets = trainable.lora_targets(model, lora.lora_targets)
    adapters = trainable.init_lora(model, targets, lora.lora_rank, config.seed)
  step_fn, schedule = build_step(config, model, mesh, total_steps)
  trained.update(step_fn.replicated(adapters))
  trained, frozen = step_fn.place(trained), step_fn.place(frozen)  # FSDP: split over the mesh
  rng = step_fn.replicated(jax.random.key_data(jax.random.key(config.seed)))
  return RunSetup(step_fn, schedule, frozen, TrainState(trained, step_fn.init(trained), rng))
