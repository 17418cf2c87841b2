"""Commands as a job of several local processes (launch/local.py), and the comparison of what a
job wrote with what one process wrote."""

from __future__ import annotations

import math
import sys

from tests.helpers.paths import REPO_ROOT


def launched(command: list[str], num_processes: int = 2, devices_per_process: int = 4
             ) -> list[str]:
  """`command` as `num_processes` processes of `devices_per_process` CPU devices each."""
  return [sys.executable, str(REPO_ROOT / "launch" / "local.py"),
          f"--num_processes={num_processes}", f"--devices_per_process={devices_per_process}",
          "--", *command]


def json_differences(a, b, tolerance: float, path: str = "") -> list[str]:
  """Where two JSON values differ: numbers beyond `tolerance` (relative or absolute), anything
  else at all; [] when they agree."""
  if isinstance(a, dict) and isinstance(b, dict):
    if a.keys() != b.keys():
      return [f"{path}: keys {sorted(a.keys() ^ b.keys())}"]
    return [d for k in a for d in json_differences(a[k], b[k], tolerance, f"{path}/{k}")]
  if isinstance(a, list) and isinstance(b, list):
    if len(a) != len(b):
      return [f"{path}: {len(a)} vs {len(b)} entries"]
    return [d for i, (x, y) in enumerate(zip(a, b))
            for d in json_differences(x, y, tolerance, f"{path}[{i}]")]
  numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
  if numbers and isinstance(a, float) and (
      (math.isnan(a) and math.isnan(b))
      or math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)):
    return []
  return [] if a == b else [f"{path}: {a!r} vs {b!r}"]
