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


def _fake_tool(folder, name: str) -> None:
  """A stand-in for a cluster tool (srun, gcloud) that prints the arguments it was given."""
  tool = folder / name
  tool.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
  tool.chmod(0o755)


def test_cluster_launchers_run_the_command_they_are_given(tmp_path):
  _fake_tool(tmp_path, "srun")
  _fake_tool(tmp_path, "gcloud")
  env = dict(fx.subprocess_env(), PATH=f"{tmp_path}:/usr/bin:/bin", PYTHON="python3",
             TPU_NAME="pod", ZONE="zone")
  slurm = subprocess.run(["bash", str(fx.REPO_ROOT / "launch" / "slurm.sbatch"), "train",
                          "--output_dir=/shared/rm"], capture_output=True, text=True, env=env,
                         check=True, timeout=30).stdout.splitlines()
  assert slurm == ["python3", "-m", "socialrm_jax.main.train", "--distributed",
                   "--output_dir=/shared/rm"]
  pod = subprocess.run(["bash", str(fx.REPO_ROOT / "launch" / "tpu_pod.sh"), "audit",
                        "--config=/mnt/a.py"], capture_output=True, text=True, env=env,
                       check=True, timeout=30).stdout.splitlines()
  assert pod[-1].endswith("python3 -m socialrm_jax.main.audit --distributed --config=/mnt/a.py ")
  for script in ("slurm.sbatch", "tpu_pod.sh"):
    refused = subprocess.run(["bash", str(fx.REPO_ROOT / "launch" / script), "--model=M"],
                             capture_output=True, text=True, env=env, timeout=30)
    assert refused.returncode == 2 and "the command to run" in refused.stderr
