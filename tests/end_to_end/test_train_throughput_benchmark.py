"""benchmarks/train_throughput.py still runs end to end: `--preset=tiny` (a random Llama of hidden
64 on the bundled slice's first 16 pairs) trains with the project's trainer and with TRL's
RewardTrainer, each as its own process, prints the table, both trainers count the same tokens
(the same templated sequences) and their losses are the same step by step. Run as a subprocess, as it is used (absl flags)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from tests.helpers.paths import REPO_ROOT

REPO = REPO_ROOT
SCRIPT = REPO / "benchmarks" / "train_throughput.py"


@pytest.mark.slow
def test_tiny_preset_trains_with_both_and_prints_the_table(tmp_path):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  done = subprocess.run([sys.executable, str(SCRIPT), "--preset=tiny", f"--work_dir={tmp_path}"],
                        capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  for title in ("socialrm_jax (socialrm-train)", "TRL RewardTrainer", "speed-up, whole process"):
    assert any(line.startswith(title) for line in done.stdout.splitlines()), done.stdout
  report = json.loads((tmp_path / "results-tiny.json").read_text())
  ours, trl = report["results"]["ours"], report["results"]["trl"]
  assert report["pairs"] == 16
  assert ours["counted_tokens"] == trl["counted_tokens"] == report["tokens"]
  # 16 pairs in batches of 4, one epoch: 4 steps each, from the same weights, each step on the
  # same pairs (TRL reads them in our order): the same losses, step by step, but for rounding.
  assert len(ours["losses"]) == len(trl["losses"]) == 4
  assert max(abs(a - b) for a, b in zip(ours["losses"], trl["losses"])) < 1e-4
  assert ours["peak_rss_mib"] > 0 and trl["peak_rss_mib"] > 0
