"""What any run's numbers trace back to beyond its inputs, shared by scoring's run.json manifest
(`scoring/run_manifest.py`) and training's train_manifest.json: the versions of the packages that
decide the numbers, and the sha256 of every file of the model it read.
"""

from __future__ import annotations

import concurrent.futures
import importlib.metadata
import os
import pathlib
import platform

from socialrm_jax.base import tables

# Whose versions decide the numbers: the compiler and runtime, the model code, the tokenizer.
PACKAGES = ("jax", "jaxlib", "flax", "numpy", "tokenizers", "socialrm_jax")


def package_versions() -> dict[str, str | None]:
  """The installed version of each of `PACKAGES` (None: not installed)."""
  versions: dict[str, str | None] = {"python": platform.python_version()}
  for name in PACKAGES:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = None
  return versions


def start_file_digests(path: str | os.PathLike) -> concurrent.futures.Future:
  """Starts hashing each of the model's files whole, in a thread, while the run computes: {file
  name (relative to the folder; a single file's own name): sha256 of its bytes}, the digest the
  HF Hub lists for each LFS file and `sha256sum` prints. The scoring folder's identity
  (`scoring.shards.model_identity`) samples weight files above a GiB to stay fast; these digests
  read every byte, overlapped with the run instead of before it. The future's `result` waits."""
  root = pathlib.Path(path).resolve()
  files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
  names = [p.name if p == root else str(p.relative_to(root)) for p in files]
  pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="file-digests")
  future = pool.submit(lambda: {name: tables.file_sha256(p) for name, p in zip(names, files)})
  pool.shutdown(wait=False)
  return future
