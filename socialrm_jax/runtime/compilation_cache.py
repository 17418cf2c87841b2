"""JAX's persistent compilation cache, for every command that compiles (`--compilation_cache`).

A compiled program is kept on disk under its computation, shapes and compiler version, so a rerun,
or the next model of the same shapes, loads it instead of compiling. `hits` counts the programs
this process took from the cache (run.json's `compilation_cache_hits`).
"""

from __future__ import annotations

import os
import pathlib
import threading

import jax

HIT_EVENT = "/jax/compilation_cache/cache_hits"


def default_dir() -> str:
  """Where compiled programs persist between runs: the user's cache directory."""
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "socialrm_jax", "xla")


_hits = 0
_listener_lock = threading.Lock()
_listening = False


def _count_hit(event: str, **kwargs) -> None:
  del kwargs
  global _hits
  if event == HIT_EVENT:
    _hits += 1


def enable(cache_dir: str | None) -> None:
  """Turns JAX's persistent compilation cache on in `cache_dir` (None or "" leaves it off).

  Every program is cached, however fast it compiled: a run's few programs are what a rerun or
  the next model of the same shape needs.
  """
  global _listening
  with _listener_lock:
    if not _listening:
      jax.monitoring.register_event_listener(_count_hit)
      _listening = True
  if not cache_dir:
    return
  pathlib.Path(cache_dir).mkdir(parents=True, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", str(cache_dir))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def hits() -> int:
  """Programs this process has taken from the persistent cache so far."""
  return _hits
