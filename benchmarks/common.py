"""What several benchmarks share: the machine's name and allocator printed beside their figures,
a child process timed as a whole (wall and CPU seconds, peak RSS), a progress line and a plain
table. Standard library only: the allocator's test imports it into a bare process."""

from __future__ import annotations

import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def module_command(module: str, *args: str) -> list[str]:
  """The argv that runs benchmark or project `module` (`benchmarks.gpu.gpu_throughput`) with this
  Python; `child_env` puts the repository on its path, wherever the child starts."""
  return [sys.executable, "-m", module, *args]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
  """This process's environment with the repository first on PYTHONPATH, and `extra`."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
  env.update(extra or {})
  return env


def log(message: str) -> None:
  """A progress line, prefixed with the running benchmark's name and the time."""
  name = pathlib.Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "benchmark"
  print(f"[{name} {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_process(argv: list[str], log_path: pathlib.Path) -> dict:
  """Runs `argv` to its end from the repository root, its output to `log_path`: wall seconds and
  peak RSS (MiB) of that process alone. A failure stops the benchmark with the log's tail."""
  start = time.perf_counter()
  with open(log_path, "w") as log_file:
    process = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, env=child_env(),
                               cwd=REPO)
    _, status, usage = os.wait4(process.pid, 0)
  wall = time.perf_counter() - start
  code = os.waitstatus_to_exitcode(status)
  if code:
    tail = log_path.read_text(errors="replace")[-3000:]
    raise SystemExit(f"{argv[1:3]} exited {code}:\n{tail}")
  return {"wall_seconds": wall, "peak_rss_mib": usage.ru_maxrss / 1024}


def timed_with_cpu(name: str, command: list[str], env: dict[str, str], log_path: pathlib.Path):
  """Runs `command` to its exit; returns (succeeded, wall seconds, CPU seconds: user + system of
  the process and its children). On a machine other work shares, what a run costs moves much
  less with the load than its wall time."""
  log(f"{name}: {' '.join(command)}")
  with open(log_path, "w") as out:
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
  code = os.waitstatus_to_exitcode(status)
  cpu_seconds = usage.ru_utime + usage.ru_stime
  if code:
    tail = "".join(log_path.read_text(errors="replace").splitlines(True)[-25:])
    log(f"{name}: FAILED with exit code {code} after {seconds:.1f} s; log {log_path}:\n{tail}")
  else:
    log(f"{name}: {seconds:.1f} s ({cpu_seconds:.1f} CPU s)")
  return code == 0, seconds, cpu_seconds


# Runs the command as its own child and writes (peak RSS KiB, exit code) to argv[1]. A child's
# ru_maxrss starts from the RSS of the process that forked it (Linux carries the high-water mark
# across fork and exec), so the measured child is forked from this small process, not from the
# benchmark, which may hold hundreds of MB.
_LAUNCHER = ("import os, subprocess, sys; child = subprocess.Popen(sys.argv[2:]); "
             "_, status, usage = os.wait4(child.pid, 0); "
             "open(sys.argv[1], 'w').write(f'{usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}')")


def peak_rss_mib(command: list[str]) -> tuple[float, float]:
  """(peak RSS of the command's process in MiB, wall seconds); it must succeed. Its output goes
  to a temporary file (a pipe nobody reads would stop a long run when it fills), shown when it
  fails."""
  start = time.perf_counter()
  with tempfile.TemporaryDirectory() as folder:
    result, log_file = pathlib.Path(folder) / "result", pathlib.Path(folder) / "log"
    with open(log_file, "wb") as out:
      subprocess.run([sys.executable, "-c", _LAUNCHER, str(result), *command], stdout=out,
                     stderr=subprocess.STDOUT, check=False, env=child_env())
    kib, code = (int(v) for v in result.read_text().split())
    if code != 0:
      raise SystemExit(f"failed ({code}): {' '.join(command)}\n"
                       f"{log_file.read_text(errors='replace')[-4000:]}")
  return kib / 1024, time.perf_counter() - start  # ru_maxrss is in KiB on Linux.


def print_table(rows: list[dict], columns: dict[str, str]) -> None:
  """The rows' `columns` (key: heading), right-aligned under their headings."""
  widths = {key: max(len(heading), *(len(str(row[key])) for row in rows))
            for key, heading in columns.items()}
  print("\n" + " ".join(f"{heading:>{widths[key]}}" for key, heading in columns.items()))
  for row in rows:
    print(" ".join(f"{row[key]!s:>{widths[key]}}" for key in columns))


def print_peak_ratio(rows: list[dict], key: str = "peak_rss_mib", what: str = "") -> None:
  """The largest `key` of the rows over the smallest: the memory benchmarks' bound is on it."""
  peaks = [row[key] for row in rows]
  print(f"\n{what}largest / smallest peak RSS: {max(peaks) / min(peaks):.2f}")


def on_gpu() -> bool:
  """Whether this machine has an NVIDIA GPU (and JAX is not told to use the CPU)."""
  return shutil.which("nvidia-smi") is not None and os.environ.get("JAX_PLATFORMS") != "cpu"


def cpu_name() -> str:
  """The CPU's model name (lscpu's), printed beside every figure: they do not carry across CPUs."""
  try:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True,
                               check=False).stdout.splitlines():
      if line.startswith("Model name:"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown CPU"


def device_name() -> str:
  if on_gpu():
    names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, check=False).stdout.split("\n")
    return f"{names[0].strip()} GPU (host CPU: {cpu_name()})"
  return f"CPU: {cpu_name()}"


def allocator() -> str:
  """The malloc this process runs on, which the processes it starts inherit (`LD_PRELOAD`,
  `MALLOC_CONF`, `GLIBC_TUNABLES`): XLA:CPU allocates each call's buffers afresh, so a CPU's
  figures move with it by a tenth or more (docs/value_bias_ablation.md, the allocator)."""
  try:
    maps = pathlib.Path("/proc/self/maps").read_text()
  except OSError:
    return "unknown allocator"
  for name, settings in (("tcmalloc", "TCMALLOC_RELEASE_RATE"), ("jemalloc", "MALLOC_CONF")):
    if f"lib{name}" in maps:
      return name + (f" ({os.environ[settings]})" if settings in os.environ else "")
  tunables = os.environ.get("GLIBC_TUNABLES")
  return "glibc" + (f" ({tunables})" if tunables else "")
