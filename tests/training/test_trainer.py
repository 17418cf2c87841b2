"""The training loop's hooks (`training/trainer.py`): when each is called, what it sees, and the
loop stopping at a micro-batch gone non-finite; with a step function that counts instead of
training (the jitted step is tested in test_train_step.py, the whole run in
tests/orchestrators/test_train.py)."""

import dataclasses

import pytest

from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import train
from socialrm_jax.training import divergence, optimizer, trainer


@dataclasses.dataclass
class _Block:
  micro: int
  sequence_tokens: int = 10

  def arrays(self):
    return {"micro": self.micro}


class _CountingStep:
  """`trained` counts the micro-batches stepped on; the loss is the micro-batch's index, or NaN
  at `nan_at`."""

  def __init__(self, nan_at: int | None = None):
    self.nan_at = nan_at

  def step(self, trained, opt_state, frozen, arrays):
    del frozen
    (block,) = arrays
    loss = float("nan") if block["micro"] == self.nan_at else float(block["micro"])
    return {"count": trained["count"] + 1}, opt_state, {"loss": loss, "grad_norm": 1.0}


class _Recorder(trainer.Hook):

  def __init__(self, name: str, calls: list, reads_metrics: bool = False):
    self.name, self.calls, self.reads_metrics = name, calls, reads_metrics

  def begin(self, state):
    self.calls.append((self.name, "begin", state.step))

  def step(self, info):
    self.calls.append((self.name, "step", info.step, [m["loss"] for m in info.metrics]))

  def diverged(self, info):
    self.calls.append((self.name, "diverged", info.step, [m["loss"] for m in info.metrics]))

  def end(self, state):
    self.calls.append((self.name, "end", state.step))


def _loop(step_fn, calls, total_steps=7, accumulation=2):
  loop = trainer.Trainer(step_fn, {}, lambda micro: [_Block(micro)], total_steps=total_steps,
                         accumulation=accumulation)
  loop.add_hook(_Recorder("log", calls, reads_metrics=True), every=3, at_end=True)
  loop.add_hook(_Recorder("eval", calls), every=7)  # due at the last step: left to its `end`
  loop.add_hook(_Recorder("save", calls), every=0, steps=(0, 5), at_end=True)
  return loop


def test_hooks_run_when_due_in_order_and_end_in_reverse():
  calls = []
  state = _loop(_CountingStep(), calls).run(trainer.TrainState({"count": 0}, None, None))
  assert state.trained["count"] == 14 and state.step == 7 and state.num_tokens == 140
  assert calls == [
      ("log", "begin", 0), ("eval", "begin", 0), ("save", "begin", 0),
      # The metrics of every micro-batch since the hook's last call: two a step.
      ("log", "step", 3, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
      ("save", "step", 5, []),
      ("log", "step", 6, [6.0, 7.0, 8.0, 9.0, 10.0, 11.0]),
      ("log", "step", 7, [12.0, 13.0]), ("save", "step", 7, []),
      ("save", "end", 7), ("eval", "end", 7), ("log", "end", 7)]


def test_a_resumed_loop_starts_at_the_states_step():
  calls = []
  state = _loop(_CountingStep(), calls).run(
      trainer.TrainState({"count": 0}, None, None, step=5, num_tokens=100))
  assert state.trained["count"] == 4 and state.num_tokens == 140
  assert [c[:3] for c in calls if c[1] == "step"] == [("log", "step", 6), ("log", "step", 7),
                                                     ("save", "step", 7)]


def test_a_non_finite_micro_batch_stops_the_loop_naming_the_step_and_last_checkpoint():
  calls = []
  with pytest.raises(divergence.TrainingDivergedError) as stopped:
    # Micro-batch 9 is step 5's second: step 5 goes no further, and nothing after it runs.
    _loop(_CountingStep(nan_at=9), calls).run(
        trainer.TrainState({"count": 0}, None, None, last_checkpoint="OUT/checkpoints/4"))
  assert str(stopped.value).startswith("step 5: the training diverged (loss nan, grad_norm 1.0)")
  assert "The last checkpoint, every step before it finite: OUT/checkpoints/4" in str(
      stopped.value)
  diverged = [c for c in calls if c[1] == "diverged"]
  assert diverged[0][:3] == ("log", "diverged", 5)
  assert diverged[0][3][:3] == [6.0, 7.0, 8.0] and diverged[0][3][3] != diverged[0][3][3]  # nan
  assert [c[0] for c in diverged] == ["log", "eval", "save"]
  assert not [c for c in calls if c[1] == "end"] and calls[-1][1] == "diverged"


def test_the_optimizer_config_takes_socialrm_trains_fields_and_refuses_a_bad_one():
  config = train.TrainConfig(optimizer=optimizer.OptimizerConfig(learning_rate=3e-4,
                                                                  warmup_steps=2)).optimizer
  assert config.learning_rate == 3e-4 and config.gradient_accumulation_steps == 1
  _, schedule = config.build(total_steps=10)
  assert float(schedule(0)) == 0.0 and float(schedule(2)) == pytest.approx(3e-4)
  with pytest.raises(InputError, match="^--learning_rate must be positive, got 0.0$"):
    optimizer.OptimizerConfig(learning_rate=0.0).check()
