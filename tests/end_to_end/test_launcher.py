"""The local launcher passes each process its coordinator and id, and reports failures."""

import subprocess
import sys

from tests.helpers import scoring_fixtures as fx

LAUNCHER = str(fx.REPO_ROOT / "launch" / "local.py")


def test_each_process_gets_its_flags():
  out = subprocess.run(
      [sys.executable, LAUNCHER, "--num_processes=3", "--devices_per_process=2", "--",
       sys.executable, "-c", "import os, sys; print(os.environ['JAX_NUM_CPU_DEVICES'], *sys.argv[1:])"],
      capture_output=True, text=True, check=True, timeout=60).stdout
  lines = sorted(out.splitlines())
  assert len(lines) == 3
  for i, line in enumerate(lines):
    assert line.startswith(f"[{i}] 2 --coordinator_address=localhost:")
    assert line.endswith(f"--num_processes=3 --process_id={i}")


def test_a_failing_process_stops_the_others_and_sets_the_status():
  script = ("import sys, time\n"
            "if sys.argv[-1] == '--process_id=1': sys.exit(7)\n"
            "time.sleep(60)\n")
  result = subprocess.run([sys.executable, LAUNCHER, "--num_processes=2", "--", sys.executable,
                           "-c", script], capture_output=True, text=True, timeout=30)
  assert result.returncode == 7
