"""benchmarks.common's `allocator`: the malloc named beside a training benchmark's figures, which
move with it by a tenth or more on a CPU (docs/value_bias_ablation.md)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
LIBRARIES = pathlib.Path("/usr/lib/x86_64-linux-gnu")


def allocator_of(env: dict[str, str]) -> str:
  """`allocator()` as a fresh process with `env` sees it (LD_PRELOAD acts at its start)."""
  done = subprocess.run(
      [sys.executable, "-c", "from benchmarks import common; print(common.allocator())"],
      capture_output=True, text=True, cwd=REPO, check=True,
      env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env})
  return done.stdout.strip()


def test_glibc_and_its_tunables():
  assert allocator_of({}) == "glibc"
  assert (allocator_of({"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"})
          == "glibc (glibc.malloc.arena_max=1)")


@pytest.mark.parametrize("library, env, name", [
    ("libjemalloc.so.2", {"MALLOC_CONF": "narenas:1"}, "jemalloc (narenas:1)"),
    ("libjemalloc.so.2", {}, "jemalloc"),
    ("libtcmalloc_minimal.so.4", {}, "tcmalloc"),
])
def test_a_preloaded_malloc(library, env, name):
  if not (LIBRARIES / library).exists():
    pytest.skip(f"{library} is not installed on this machine")
  assert allocator_of({"LD_PRELOAD": str(LIBRARIES / library), **env}) == name
