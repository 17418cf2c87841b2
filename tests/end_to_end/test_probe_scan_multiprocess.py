"""socialrm-probe and socialrm-vocab-scan as two processes of 4 CPU devices (launch/local.py)
against one process of 8, on a tiny random reward model: the processes divide the chunks (the
probe's prompts, the scan's token slices; `--chunk_size`) and each writes its own shards; process
0 alone writes the ranking, the same as the one process's."""

import json
import pathlib
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tests.helpers.multiprocess import json_differences, launched
from tests.helpers.scoring_fixtures import make_llama, subprocess_env

TOLERANCE = 1e-5  # the scorer's repacking bound (tests/end_to_end/test_scoring_multiprocess.py)
# Run-specific, not results: where and how long.
RUN_FIELDS = ("model_path", "seconds", "scoring_seconds", "scoring", "settings")


def run_both(tmp_path: pathlib.Path, command: list[str]) -> None:
  """`command` (its output folder last) into one/ as one process of 8 devices, into two/ as two
  of 4."""
  one = subprocess.run([*command, f"--output_dir={tmp_path / 'one'}"],
                       env=subprocess_env(num_cpu_devices=8), capture_output=True, text=True,
                       timeout=600)
  assert one.returncode == 0, one.stderr[-3000:]
  two = subprocess.run(launched([*command, f"--output_dir={tmp_path / 'two'}"]),
                       env=subprocess_env(), capture_output=True, text=True, timeout=600)
  assert two.returncode == 0, two.stdout[-3000:]
  for process in ("00000", "00001"):  # both scored chunks
    assert list((tmp_path / "two" / "scores").glob(f"scores-{process}-*"))


def results(path: pathlib.Path) -> dict:
  return {k: v for k, v in json.loads(path.read_text()).items() if k not in RUN_FIELDS}


@pytest.mark.slow  # four commands as subprocesses
def test_probe_and_scan_rankings_of_two_processes_are_one_process_rankings(tmp_path):
  make_llama(tmp_path / "rm", seed=5)
  probe, scan = tmp_path / "probe", tmp_path / "scan"
  run_both(probe, [sys.executable, "-m", "socialrm_jax.main.probe", f"--model={tmp_path / 'rm'}",
                   "--words_per_category=2", "--n_resamples=50", "--n_permutations=50",
                   "--chunk_size=1"])
  one, two = results(probe / "one" / "probe.json"), results(probe / "two" / "probe.json")
  assert not json_differences(one, two, TOLERANCE), json_differences(one, two, TOLERANCE)[:10]
  run_both(scan, [sys.executable, "-m", "socialrm_jax.main.vocab_scan",
                  f"--model={tmp_path / 'rm'}", "--n_resamples=50", "--n_permutations=50",
                  "--chunk_size=64"])
  one, two = (pq.read_table(scan / run / "vocab_scores.parquet").to_pylist()
              for run in ("one", "two"))
  assert len(one) > 2 * 64  # several chunks a prompt
  assert ([(r["prompt_id"], r["token_id"], r["rank"]) for r in two]
          == [(r["prompt_id"], r["token_id"], r["rank"]) for r in one])
  one, two = results(scan / "one" / "scan.json"), results(scan / "two" / "scan.json")
  assert not json_differences(one, two, TOLERANCE), json_differences(one, two, TOLERANCE)[:10]
