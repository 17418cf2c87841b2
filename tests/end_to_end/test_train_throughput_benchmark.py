"""benchmarks.training.train_throughput still runs end to end: `--preset=tiny` (a random Llama of
hidden 64 on the bundled slice's first 16 pairs) trains with the project's trainer and with TRL's
RewardTrainer, each as its own process, prints the table, both trainers count the same tokens
(the same templated sequences) and their losses are the same step by step. Run as a subprocess, as it is used (absl flags)."""

import json
import os
import subprocess
import sys

import pytest
from tests.helpers.paths import REPO_ROOT

REPO = REPO_ROOT
MODULE = "benchmarks.training.train_throughput"


@pytest.mark.slow
def test_tiny_preset_trains_with_both_and_prints_the_table(tmp_path):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  done = subprocess.run([sys.executable, "-m", MODULE, "--preset=tiny", f"--work_dir={tmp_path}"],
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


def test_the_table_measures_a_run_stopped_early_on_its_own_tokens():
  """TRL stopped after 2 of 4 steps (`--trl_steps`): its tokens/s are the tokens it counted over
  its seconds, not the whole run's; its seconds per slot are not shown (the slots are the whole
  run's); the speed-ups are ratios of tokens/s. Figures by hand."""
  from benchmarks.training import train_comparison  # pylint: disable=import-outside-toplevel
  results = {"ours": {"wall_seconds": 100.0, "train_seconds": 50.0, "peak_rss_mib": 1000.0,
                      "losses": [0.7, 0.6, 0.5, 0.4], "counted_tokens": 4000},
             "trl": {"wall_seconds": 40.0, "train_seconds": 20.0, "peak_rss_mib": 2000.0,
                     "losses": [0.7, 0.6], "counted_tokens": 1000}}
  lines = train_comparison.table(results, 4000, {"ours": 2000, "trl": 8000})
  ours_row, trl_row = lines[1].split(), lines[2].split()
  assert ours_row[-5:-3] == ["40", "80"]           # 4000 / 100, 4000 / 50
  assert trl_row[2:4] == ["25", "50"]              # 1000 / 40, 1000 / 20, not 4000 / ...
  assert "stopped after 2 steps" in lines[2]
  assert "ours 2,000 (0.50 a counted token, 25.00 s per 1k slots)" in lines[3]
  assert "trl 8,000 (2.00 a counted token)" in lines[3]
  assert "speed-up, whole process: 1.60x" in lines[5]  # 40 / 25
  assert "speed-up, training alone: 1.60x" in lines[6]  # 80 / 50
  assert "losses step by step, 2 steps" in lines[7]
