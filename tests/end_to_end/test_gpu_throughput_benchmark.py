"""benchmarks.gpu.gpu_throughput still runs end to end: `--preset=tiny` on CPU (a 336k-parameter
random Llama reward model, 6 items, 9 pairs) times our scorer and both PyTorch loops, prints the
table, agrees with transformers in float32, and reuses its built model on a rerun.

The script runs as a subprocess, as it is used: it defines absl flags that would clash with other
modules' in this process.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT

REPO = REPO_ROOT
MODULE = "benchmarks.gpu.gpu_throughput"
TITLES = ("socialrm_jax (cold cache)", "PyTorch, dataset order", "PyTorch, sorted by length")


def _run(work_dir, *flags):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  return subprocess.run([sys.executable, "-m", MODULE, "--preset=tiny", "--device=cpu",
                         f"--work_dir={work_dir}", *flags],
                        capture_output=True, text=True, env=env, timeout=300, cwd=REPO)


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_tiny_preset_times_every_run_and_agrees_with_transformers(tmp_path):
  result = _run(tmp_path)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  for title in TITLES:
    row = next((line for line in result.stdout.splitlines() if line.startswith(title)), None)
    assert row is not None, f"no table row {title!r} in:\n{result.stdout}"
    assert "FAILED" not in row and "INCOMPLETE" not in row, row

  report = json.loads((tmp_path / "report-tiny" / "results.json").read_text())
  assert report["pairs"] == 9 and report["dtype"] == "float32"
  rows = {row["run"]: row for row in report["rows"]}
  assert set(rows) == {"ours", "torch", "torch_sorted"}
  for row in rows.values():
    assert row["ok"] and row["pairs_per_second"] > 0 and row["tokens_per_pair"] > 0
  # Prefix sharing: ours runs fewer tokens than the loops, which run every sequence whole.
  assert rows["ours"]["real_tokens"] < rows["torch"]["real_tokens"]
  # Weights written with numpy load into transformers with nothing missing or left over.
  for keys in report["torch_loading"].values():
    assert keys == {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": []}
  for name in ("ours vs torch", "ours vs torch_sorted"):
    agreement = report["agreement"][name]
    assert agreement["sequences"] == 18 and agreement["missing"] == 0, agreement
    assert agreement["max_abs_diff"] <= 1e-3, agreement
  assert "agreement ours vs torch: max |diff|" in result.stdout

  rerun = _run(tmp_path, "--runs=")
  assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
  assert "model: reusing" in rerun.stdout
