"""Running commands with `--help`, as a user would, and reading the flags their help lists.

Shared by the console-script and README tests. Each command runs in its own Python (absl flags
are global: two commands in one process would clash), several at a time.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import re
import subprocess
import tomllib

from tests.helpers.paths import REPO_ROOT as REPO
# A flag as absl's help lists it, at the start of a line: `  --name:` or `  --[no]name:`.
_LISTED = re.compile(r"^\s+--(?:\[no\])?([\w.-]+):", re.M)


def env() -> dict[str, str]:
  """CPU only, this checkout's package first (ahead of an installed one)."""
  out = dict(os.environ, JAX_PLATFORMS="cpu")
  out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
  return out


def run_all(commands: list[list[str]], timeout: int = 300) -> list[subprocess.CompletedProcess]:
  """Runs each command (from the repository root), a few at a time; results in order."""
  def one(command):
    return subprocess.run(command, capture_output=True, text=True, env=env(), cwd=REPO,
                          timeout=timeout)

  with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
    return list(pool.map(one, commands))


def listed_flags(help_text: str) -> set[str]:
  """The flags a `--help` output lists."""
  return set(_LISTED.findall(help_text))


def console_scripts() -> dict[str, str]:
  """{script name: "module:function"}, from pyproject.toml's [project.scripts]."""
  with open(REPO / "pyproject.toml", "rb") as f:
    return tomllib.load(f)["project"]["scripts"]
