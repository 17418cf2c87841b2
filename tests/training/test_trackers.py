"""`--report_to`'s trackers (training/trackers.py): transformers' metric names, the values TRL
takes and refuses, TensorBoard's event files read back by its own reader, and the calls a W&B run
gets (a stand-in `wandb` module records them: wandb is not a test dependency). The trainer's own
event files: tests/orchestrators/test_train.py."""

import math
import sys
import types

import pytest

from socialrm_jax.base.errors import InputError
from socialrm_jax.training import trackers

ROWS = [{"step": 2, "epoch": 0.5, "loss": 0.69, "accuracy": 0.5, "rewards/chosen": 0.1,
         "learning_rate": 1e-4, "num_tokens": 512},
        {"step": 2, "eval_loss": 0.7, "eval_accuracy": 0.25},
        {"step": 4, "loss": None, "accuracy": 1.0, "non_finite": ["loss"]}]


def test_names_are_transformers_rewrite_logs():
  from transformers.integrations.integration_utils import rewrite_logs
  row = {k: v for r in ROWS[:2] for k, v in r.items() if k != "step"}
  assert {trackers.metric_name(k): v for k, v in row.items()} == rewrite_logs(row)
  curves = trackers.curves(ROWS[2])
  assert set(curves) == {"train/loss", "train/accuracy"} and math.isnan(curves["train/loss"])


def test_report_to_takes_trls_values_and_refuses_others(monkeypatch):
  assert trackers.resolve(("none",)) == () and trackers.resolve(()) == ()
  assert trackers.resolve(("tensorboard",)) == ("tensorboard",)
  assert trackers.resolve("tensorboard,tensorboard") == ("tensorboard",)
  with pytest.raises(InputError, match="--report_to=mlflow: use tensorboard, wandb, all or none"):
    trackers.resolve(("mlflow",))
  with pytest.raises(InputError, match="none with another tracker"):
    trackers.resolve(("none", "tensorboard"))
  monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: None)
  with pytest.raises(InputError, match="wandb is not installed"):
    trackers.resolve(("wandb",))
  assert trackers.resolve(("all",)) == ("tensorboard",)


def test_tensorboard_event_files_read_back_with_tensorboards_reader(tmp_path):
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  (tracker,) = trackers.open_trackers(("tensorboard",), tmp_path, "", {})
  for row in ROWS:
    tracker.log(row)
  # Flushed at every row: readable before the writer closes (a run killed midway).
  events = EventAccumulator(str(tmp_path / trackers.LOGS_DIR))
  events.Reload()
  assert [(e.step, e.value) for e in events.Scalars("eval/loss")] == [(2, pytest.approx(0.7))]
  assert [(e.step, e.value) for e in events.Scalars("train/accuracy")] == [
      (2, 0.5), (4, 1.0)]
  assert math.isnan(events.Scalars("train/loss")[1].value)
  tracker.close()


def test_a_resumed_runs_tensorboard_curves_show_each_step_once(tmp_path):
  """A run killed after step 4 and resumed from its checkpoint at step 2 logs steps 3 and 4
  again, in a file of its own: TensorBoard's reader shows each step once, the resumed run's."""
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  (first,) = trackers.open_trackers(("tensorboard",), tmp_path, "", {})
  for step in (1, 2, 3, 4):
    first.log({"step": step, "loss": float(step)})
  first.close()
  (resumed,) = trackers.open_trackers(("tensorboard",), tmp_path, "", {}, resume_step=2)
  for step in (3, 4, 5):
    resumed.log({"step": step, "loss": 10.0 * step})
  resumed.close()
  events = EventAccumulator(str(tmp_path / trackers.LOGS_DIR))
  events.Reload()
  assert len(list((tmp_path / trackers.LOGS_DIR).iterdir())) == 2
  assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [
      (1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0), (5, 50.0)]


def test_a_wandb_run_gets_each_row_at_its_step(tmp_path, monkeypatch):
  calls = []

  class Run:
    def log(self, data, step):
      calls.append(("log", data, step))

    def finish(self):
      calls.append(("finish",))

  def init(**kwargs):
    calls.append(("init", kwargs))
    return Run()

  monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
  monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: object())
  monkeypatch.setenv("WANDB_MODE", "offline")
  (tracker,) = trackers.open_trackers(("wandb",), tmp_path, "grid-key", {"seed": 0})
  tracker.log(ROWS[0])
  tracker.close()
  assert calls[0] == ("init", {"project": "socialrm_jax", "name": "grid-key", "dir": str(tmp_path),
                               "config": {"seed": 0}, "mode": "offline"})
  assert calls[1] == ("log", {**trackers.curves(ROWS[0]), "train/global_step": 2}, 2)
  assert calls[2] == ("finish",)
