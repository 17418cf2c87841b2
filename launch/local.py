"""Runs one command as N cooperating JAX processes on this machine (multi-host, simulated).

  python launch/local.py --num_processes=2 [--devices_per_process=4] -- \
      python -m socialrm_jax.main.score --model=M --items=I --output_dir=S

Each process gets `--coordinator_address=localhost:<free port> --num_processes=N
--process_id=<i>` appended (what `socialrm_jax.main.score` passes to `jax.distributed.initialize`), and,
with --devices_per_process, that many CPU devices (JAX_NUM_CPU_DEVICES). Output lines are
prefixed with the process id. If one process fails the others are stopped (SIGTERM, then SIGKILL
after STOP_GRACE_SECONDS) and its exit status is returned.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time

POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 5.0


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _relay(stream, process_id: int) -> None:
  for line in iter(stream.readline, b""):
    sys.stdout.write(f"[{process_id}] {line.decode(errors='replace')}")
    sys.stdout.flush()


def launch(command: list[str], num_processes: int, devices_per_process: int | None = None) -> int:
  port = free_port()
  env = dict(os.environ)
  if devices_per_process:
    env["JAX_NUM_CPU_DEVICES"] = str(devices_per_process)
  processes, relays = [], []
  for i in range(num_processes):
    args = command + [f"--coordinator_address=localhost:{port}",
                      f"--num_processes={num_processes}", f"--process_id={i}"]
    p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    relay = threading.Thread(target=_relay, args=(p.stdout, i), daemon=True)
    relay.start()
    processes.append(p)
    relays.append(relay)
  status = 0
  while any(p.poll() is None for p in processes):
    failed = [p for p in processes if p.poll() not in (None, 0)]
    if failed:
      status = failed[0].returncode
      for p in processes:
        if p.poll() is None:
          p.send_signal(signal.SIGTERM)
      # A process that joined a JAX job takes SIGTERM as a preemption notice (jax.distributed's
      # preemption sync) and goes on, blocked on its lost peer until the coordination service
      # times out (about 100 s); the rest get a few seconds, then SIGKILL.
      deadline = time.monotonic() + STOP_GRACE_SECONDS
      while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
      for p in processes:
        if p.poll() is None:
          p.kill()
      break
    time.sleep(POLL_SECONDS)
  for p in processes:
    p.wait()
    status = status or p.returncode
  for relay in relays:
    relay.join()
  return status


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--num_processes", type=int, required=True)
  parser.add_argument("--devices_per_process", type=int, default=None)
  parser.add_argument("command", nargs=argparse.REMAINDER,
                      help="the command, after --, to which process flags are appended")
  args = parser.parse_args()
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  if not command:
    parser.error("give the command to run after --")
  sys.exit(launch(command, args.num_processes, args.devices_per_process))


if __name__ == "__main__":
  main()
