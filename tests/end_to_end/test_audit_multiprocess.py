"""socialrm-audit as two processes of 4 CPU devices (launch/local.py) against one process of 8, on
a tiny random reward model and a few items of every bundled dataset: each process scores its own
chunks (the model's, the probe's and the identity swaps'), process 0 alone writes the metrics and
the report, and metrics.json is the one-process run's (values and intervals)."""

import json
import pathlib
import subprocess
import sys

import pytest

from tests.end_to_end.test_audit import make_small_suite
from tests.helpers.multiprocess import json_differences, launched
from tests.helpers.scoring_fixtures import REPO_ROOT, make_llama, subprocess_env

N_RESAMPLES = 50
# Rewards of the two runs agree within the scorer's repacking bound (1e-5,
# tests/end_to_end/test_scoring_multiprocess.py); what the metrics compute from them within this.
TOLERANCE = 1e-5


def audit_command(root: pathlib.Path, out: pathlib.Path) -> list[str]:
  return [sys.executable, "-m", "socialrm_jax.main.audit",
          f"--config=configs/bundled_suite.py:hf_model={root / 'rm'},name=rm,output_dir={out}",
          f"--config.data_dir={root / 'data'}", f"--config.metrics.n_resamples={N_RESAMPLES}",
          "--config.models.rm.max_length=512", "--config.models.rm.tokens_per_batch=2048",
          "--config.models.rm.chunk_size=4", "--config.probe.words_per_category=1",
          f"--config.probe.n_resamples={N_RESAMPLES}",
          f"--config.probe.n_permutations={N_RESAMPLES}"]


@pytest.mark.slow  # two audits as subprocesses
def test_two_processes_write_the_metrics_one_process_writes(tmp_path):
  make_llama(tmp_path / "rm", seed=3)
  make_small_suite(tmp_path / "data")
  one = subprocess.run(audit_command(tmp_path, tmp_path / "one"), cwd=REPO_ROOT,
                       env=subprocess_env(num_cpu_devices=8), capture_output=True, text=True,
                       timeout=600)
  assert one.returncode == 0, one.stderr[-3000:]
  two = subprocess.run(launched(audit_command(tmp_path, tmp_path / "two")), cwd=REPO_ROOT,
                       env=subprocess_env(), capture_output=True, text=True, timeout=600)
  assert two.returncode == 0, two.stdout[-3000:]
  # The same but for the folders they name (one/..., two/...).
  metrics = [json.loads((tmp_path / run / "rm" / "metrics.json").read_text().replace(
      str(tmp_path / run), "RUN")) for run in ("one", "two")]
  assert not json_differences(*metrics, TOLERANCE), json_differences(*metrics, TOLERANCE)[:10]
  # Both processes scored: each wrote shards of the model's items; process 0 alone the report.
  writers = {p.name.split("-")[1] for p in (tmp_path / "two" / "scores" / "rm").glob("scores-*")}
  assert writers == {"00000", "00001"}
  assert (tmp_path / "two" / "report.md").is_file()
  assert sum("Report: " in line for line in two.stdout.splitlines()) == 1
  assert (json.loads((tmp_path / "two" / "probe" / "rm" / "probe.json").read_text())["n_words"]
          == json.loads((tmp_path / "one" / "probe" / "rm" / "probe.json").read_text())["n_words"])
