"""The benchmarks report bad input as the commands do (`main/command.py`): one line naming the
flag, exit code 2, no traceback (`python benchmarks/train_step_profile.py --model=/missing` once
printed InputError's traceback and exited 1)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]

# Scripts that run PyTorch's side of a comparison as a child of their own (`--torch_child`,
# `--scan_torch_child`) or as TRL's trainer: `command.run_command` would import JAX into that
# process (to keep it off absent accelerators), whose seconds and memory are the reference's.
TORCH_PROCESSES = {"gpu_throughput.py", "vocab_scan_throughput.py", "train_throughput_trl.py"}


def test_every_benchmark_runs_as_a_command():
  scripts = {path.name: path.read_text() for path in (REPO / "benchmarks").glob("*.py")}
  runnable = {name for name, text in scripts.items() if 'if __name__ == "__main__":' in text}
  assert TORCH_PROCESSES <= runnable
  plain = sorted(name for name in runnable - TORCH_PROCESSES
                 if f'command.run_command("benchmarks/{name}", main)' not in scripts[name])
  assert not plain, f"benchmarks not run through command.run_command: {plain}"


def test_a_missing_model_is_one_line():
  done = subprocess.run(
      [sys.executable, str(REPO / "benchmarks" / "train_step_profile.py"), "--model=/missing",
       "--pairs=/missing"], capture_output=True, text=True, cwd=REPO, check=False,
      env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"})
  assert done.returncode == 2, done.stderr
  assert done.stderr.strip().splitlines() == [
      "benchmarks/train_step_profile.py: error: /missing: --model: no such model file or folder"]
