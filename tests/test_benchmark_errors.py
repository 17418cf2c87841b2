"""The benchmarks are modules of the `benchmarks` package, run from the repository root as
`python -m benchmarks.FOLDER.NAME`, and report bad input as the commands do (`main/command.py`):
one line naming the flag, exit code 2, no traceback (`train_step_profile --model=/missing` once
printed InputError's traceback and exited 1)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT

REPO = REPO_ROOT
FOLDERS = ("scoring", "training", "gpu", "statistics")
# Scripts that run PyTorch's side of a comparison as a child of their own (`--torch_child`,
# `--scan_torch_child`) or as TRL's trainer: `command.run_command` would import JAX into that
# process (to keep it off absent accelerators), whose seconds and memory are the reference's.
TORCH_PROCESSES = {"benchmarks.gpu.gpu_throughput", "benchmarks.gpu.vocab_scan_throughput",
                   "benchmarks.training.train_throughput_trl"}


def modules() -> dict[str, str]:
  """{dotted module name: its source} of every benchmark script."""
  root = REPO / "benchmarks"
  return {".".join(path.relative_to(REPO).with_suffix("").parts): path.read_text()
          for path in sorted(root.rglob("*.py"))}


def test_the_benchmarks_are_grouped_in_a_package_with_no_path_edits():
  found = modules()
  assert {name.split(".")[1] for name in found if name.count(".") == 2} == set(FOLDERS)
  assert all(f"benchmarks.{folder}.__init__" in found for folder in FOLDERS)
  edits = sorted(name for name, text in found.items() if "sys.path" in text)
  assert not edits, f"benchmarks that edit sys.path (import them as benchmarks.*): {edits}"


def test_every_benchmark_runs_as_a_command():
  found = modules()
  runnable = {name for name, text in found.items() if 'if __name__ == "__main__":' in text}
  assert TORCH_PROCESSES <= runnable
  plain = sorted(name for name in runnable - TORCH_PROCESSES
                 if f'command.run_command("{name}", main)' not in found[name])
  assert not plain, f"benchmarks not run through command.run_command under their name: {plain}"


@pytest.mark.parametrize("module, args, line", [
    ("benchmarks.training.train_step_profile", ["--model=/missing", "--pairs=/missing"],
     "/missing: --model: no such model file or folder"),
    ("benchmarks.scoring.load_time", ["--model=/missing"],
     "/missing: --model: not a folder of safetensors files"),
])
def test_a_missing_model_is_one_line(module, args, line):
  done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                        cwd=REPO, check=False, env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"})
  assert done.returncode == 2, done.stderr
  assert done.stderr.strip().splitlines() == [f"{module}: error: {line}"]
