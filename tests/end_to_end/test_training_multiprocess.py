"""socialrm-train as two processes of 4 CPU devices (launch/local.py) against one process of 8.

- The global batch is the one-process run's (the same seeded order and data position); each
  process places only its own rows of it: the final weights within what the collectives' other
  order of adding allows (fp32, `reordered_training_tolerance`), the metrics rows the same, written
  once (by process 0).
- One of the two processes killed (SIGKILL) after a checkpoint, the launcher stops the other; the
  same command again resumes from the last checkpoint every process wrote, and ends on the
  uninterrupted run's weights bit for bit (the same computation).
"""

import json
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from safetensors.numpy import load_file

from socialrm_jax.orchestrators import train
from tests.helpers.multiprocess import launched
from tests.helpers.preference_fixtures import write_learnable_pairs
from tests.helpers.scoring_fixtures import make_llama, subprocess_env
from tests.helpers.tolerances import float32_tolerance

STEPS, LEARNING_RATE, DATA_AXIS = 12, 1e-3, 8


def command(root: pathlib.Path, out: pathlib.Path) -> list[str]:
  return [sys.executable, "-m", "socialrm_jax.main.train", f"--model={root / 'base'}",
          f"--data=preference:{root / 'pairs.jsonl'}", f"--output_dir={out}",
          f"--max_steps={STEPS}", "--batch_size=8", f"--learning_rate={LEARNING_RATE}", "--seed=1",
          "--checkpoint_every=4", "--max_length=128", "--eval_fraction=0.1", "--log_every=2"]


def weights(out: pathlib.Path) -> dict[str, np.ndarray]:
  return load_file(str(out / train.MODEL_DIR / "model.safetensors"))


def max_difference(a: dict, b: dict) -> float:
  assert set(a) == set(b)
  return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def reordered_training_tolerance(trained: dict) -> float:
  """How far the two-process run's weights may come out from the one-process run's, in float32
  (`tests/helpers/tolerances.py`). Both run the same per-device programs on the same rows; only
  the sums across the data axis differ: one process adds the devices' partial sums in its own
  collectives' order, two processes in gloo's (a ring all-reduce, a halving-doubling
  reduce-scatter). So each step's gradient (and the clipping's global norm) changes by the
  reordered sums' relative error, moving Adam's normalised step (at most the learning rate) by as
  much in relative terms, and rounding each weight's update w - step may then land one ulp of |w|
  apart: per step, lr (2 n eps) + eps max|w|, n the data axis's length. That bound assumes the
  gradients' sums are not cancelled down to their rounding (a flipped sign moves a weight by up
  to twice the learning rate)."""
  largest = max(float(np.abs(v).max()) for v in trained.values())
  return STEPS * (LEARNING_RATE * float32_tolerance(2 * DATA_AXIS) + float32_tolerance(1, largest))


def metric_rows(out: pathlib.Path) -> list[dict]:
  return [json.loads(line) for line in (out / train.METRICS_FILE).read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The same training as one process of 8 devices (`one/`) and as two of 4 (`two/`)."""
  root = tmp_path_factory.mktemp("train_multiprocess")
  make_llama(root / "base", head="lm", seed=0)
  write_learnable_pairs(root / "pairs.jsonl", 80)
  one = subprocess.run(command(root, root / "one"), env=subprocess_env(num_cpu_devices=8),
                       capture_output=True, text=True, timeout=600)
  assert one.returncode == 0, one.stderr[-3000:]
  two = subprocess.run(launched(command(root, root / "two")), env=subprocess_env(),
                       capture_output=True, text=True, timeout=600)
  assert two.returncode == 0, two.stdout[-3000:]
  return root


@pytest.mark.slow  # three trainings as subprocesses
def test_two_processes_train_the_weights_one_process_trains(runs):
  one_weights = weights(runs / "one")
  assert (max_difference(one_weights, weights(runs / "two"))
          <= reordered_training_tolerance(one_weights))
  one, two = metric_rows(runs / "one"), metric_rows(runs / "two")
  assert [r["step"] for r in two] == [r["step"] for r in one]  # each row once: process 0's
  for a, b in zip(one, two):
    for key in ("loss", "accuracy", "grad_norm", "eval_loss", "eval_accuracy"):
      if key in a:
        assert b[key] == pytest.approx(a[key], abs=1e-5)
    assert b.get("num_tokens") == a.get("num_tokens")
  manifest = json.loads((runs / "two" / train.MANIFEST_FILE).read_text())
  assert manifest["mesh"] == "data:8,model:1"
  assert (json.loads((runs / "two" / train.SPLIT_FILE).read_text())
          == json.loads((runs / "one" / train.SPLIT_FILE).read_text()))
  assert sorted(p.name for p in (runs / "two" / "checkpoints").iterdir()) == ["12", "4", "8"]


def _child_with_process_id(launcher: subprocess.Popen, process_id: int) -> int:
  """The pid of the launched process that got `--process_id=<process_id>`."""
  children = pathlib.Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children")
  for pid in children.read_text().split():
    arguments = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if f"--process_id={process_id}".encode() in arguments:
      return int(pid)
  raise AssertionError(f"no launched process {process_id}")


@pytest.mark.slow  # two trainings as subprocesses
def test_a_killed_process_and_the_same_command_again_end_on_the_uninterrupted_weights(runs):
  out = runs / "killed"
  launcher = subprocess.Popen(launched(command(runs, out)), env=subprocess_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  started = time.monotonic()
  deadline = started + 400
  while not (out / "checkpoints" / "4" / "commit_success.txt").exists():
    assert launcher.poll() is None and time.monotonic() < deadline
    time.sleep(0.05)
  pid = _child_with_process_id(launcher, 1)
  subprocess.run(["kill", "-9", str(pid)], check=True)
  assert launcher.wait(timeout=120) != 0  # the launcher stopped process 0 too
  assert not (out / train.MODEL_DIR).exists()
  print(f"killed after {time.monotonic() - started:.1f} s")
  again = subprocess.run(launched(command(runs, out)), env=subprocess_env(),
                         capture_output=True, text=True, timeout=600)
  assert again.returncode == 0, again.stdout[-3000:]
  print(f"resumed run done after {time.monotonic() - started:.1f} s")
  resumed = [line.split("] ", 1)[1] for line in again.stdout.splitlines()
             if re.match(r"\[\d\] resuming from step", line)]
  assert len(resumed) == 2 and resumed[0] == resumed[1]  # both processes, the same step
  step = int(resumed[0].split()[3])
  assert step % 4 == 0 and 4 <= step < 12
  # The same computation: the resumed job restores the checkpoint's bits and runs the same
  # programs, with the same collectives, on the same micro-batches (each a function of its index
  # alone), so it ends on the uninterrupted job's bits.
  assert max_difference(weights(runs / "two"), weights(out)) == 0
  steps = [r["step"] for r in metric_rows(out) if "loss" in r]
  assert steps == sorted(set(steps)) and steps[-1] == 12  # no step logged twice
