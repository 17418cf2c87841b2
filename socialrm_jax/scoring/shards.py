"""Output shards, the manifest, and resuming into the same folder.

Items are cut into chunks of `chunk_size` (chunk j = items [j*C, (j+1)*C)); a chunk's scores go to
`scores-<process>-<chunk>.parquet`, written under a temporary name and renamed, so a shard that
exists is complete. `manifest.json` records what the scores belong to: the model (its path and a
hash of its config, tokenizer files and weight files' names, sizes and safetensors headers), the
items (a hash of their ids, in order), the settings that change a score, the chunk size, and the
chunks done. A rerun into the same folder keeps finished shards and scores the rest; a folder that
holds another model's, another item set's or other settings' scores is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import re
import struct
from typing import Sequence

import pyarrow as pa

from socialrm_jax import tables
from socialrm_jax.errors import InputError

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
SHARD_PATTERN = re.compile(r"^scores-(\d{5})-(\d{5})\.parquet$")
# A safetensors header is 8 bytes of length, then JSON; larger is not a safetensors file.
MAX_SAFETENSORS_HEADER = 100 << 20


def shard_name(process: int, chunk: int) -> str:
  return f"scores-{process:05d}-{chunk:05d}.parquet"


def num_chunks(num_items: int, chunk_size: int) -> int:
  return -(-num_items // chunk_size)


def process_chunks(num_items: int, chunk_size: int, process: int, process_count: int) -> range:
  """The contiguous chunks process `process` of `process_count` scores."""
  total = num_chunks(num_items, chunk_size)
  return range(process * total // process_count, (process + 1) * total // process_count)


def _hash_file(digest, path: pathlib.Path) -> None:
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)


def _safetensors_header(path: pathlib.Path) -> bytes:
  with open(path, "rb") as f:
    prefix = f.read(8)
    (length,) = struct.unpack("<Q", prefix) if len(prefix) == 8 else (0,)
    return prefix + f.read(min(length, MAX_SAFETENSORS_HEADER))


def model_identity(path: str | os.PathLike) -> dict:
  """The model's path and a hash of what decides its outputs, cheap to compute for big models.

  Small JSON files (config, tokenizer) are hashed whole; weight files by name and size, plus the
  header for safetensors (names, dtypes, shapes, offsets) and the modification time otherwise.
  """
  path = pathlib.Path(path).resolve()
  digest = hashlib.sha256()
  files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
  for f in files:
    name = str(f.relative_to(path)) if f != path else f.name
    stat = f.stat()
    digest.update(f"{name}\0{stat.st_size}\0".encode())
    if f.suffix in (".json", ".jinja", ".model", ".txt") and stat.st_size < (64 << 20):
      _hash_file(digest, f)
    elif f.suffix == ".safetensors":
      digest.update(_safetensors_header(f))
    else:
      digest.update(str(stat.st_mtime_ns).encode())
  return {"path": str(path), "sha256": digest.hexdigest()}


def items_identity(item_ids: Sequence[str]) -> dict:
  digest = hashlib.sha256()
  for item_id in item_ids:
    digest.update(item_id.encode() + b"\0")
  return {"count": len(item_ids), "sha256": digest.hexdigest()}


@contextlib.contextmanager
def _locked(folder: pathlib.Path):
  """Serialises manifest updates of several processes writing into one folder."""
  with open(folder / ".manifest.lock", "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)


class ShardStore:
  """One output folder: checks or creates its manifest, says which chunks are done, writes shards."""

  def __init__(self, folder: str | os.PathLike, *, model: dict, items: dict, settings: dict,
               chunk_size: int):
    self.folder = pathlib.Path(folder)
    self.folder.mkdir(parents=True, exist_ok=True)
    self.chunk_size = chunk_size
    self.identity = {"format": MANIFEST_FORMAT, "model": model, "items": items,
                     "settings": settings, "chunk_size": chunk_size,
                     "num_chunks": num_chunks(items["count"], chunk_size)}
    with _locked(self.folder):
      manifest = self._read()
      if manifest is None:
        tables.atomic_write_json(self.folder / MANIFEST, {**self.identity, "chunks_done": []})
      else:
        self._check(manifest)
        # A run killed between a shard's rename and the manifest update left a complete shard
        # the manifest does not list: the shards on disk are the record, so bring it up to date.
        done = sorted(set(manifest.get("chunks_done", [])) | self.done_chunks())
        if done != manifest.get("chunks_done"):
          tables.atomic_write_json(self.folder / MANIFEST, {**manifest, "chunks_done": done})

  def _read(self) -> dict | None:
    path = self.folder / MANIFEST
    if not path.exists():
      stray = sorted(p.name for p in self.folder.iterdir() if SHARD_PATTERN.match(p.name))
      if stray:
        raise InputError(f"score shards ({stray[0]}, ...) but no {MANIFEST}: this folder's "
                         "scores cannot be matched to a model; use an empty output folder",
                         self.folder)
      return None
    try:
      return json.loads(path.read_text())
    except json.JSONDecodeError as e:
      raise InputError(f"unreadable manifest ({e.msg}); use a new output folder", path) from None

  def _check(self, manifest: dict) -> None:
    where = self.folder / MANIFEST
    if manifest.get("model", {}).get("sha256") != self.identity["model"]["sha256"]:
      raise InputError(
          f"this folder holds scores of another model ({manifest.get('model', {}).get('path')}); "
          "use a new --output_dir for this one", where)
    if manifest.get("items") != self.identity["items"]:
      raise InputError("this folder holds scores of another item set (different item ids, "
                       "--datasets or --limit); use a new --output_dir", where)
    if manifest.get("settings") != self.identity["settings"]:
      raise InputError(f"this folder was scored with other settings {manifest.get('settings')}, "
                       f"not {self.identity['settings']}; use a new --output_dir", where)
    if manifest.get("chunk_size") != self.chunk_size:
      raise InputError(f"this folder was scored in chunks of {manifest.get('chunk_size')} items; "
                       f"pass --chunk_size={manifest.get('chunk_size')} to resume it", where)

  def done_chunks(self) -> set[int]:
    """Chunks with a complete shard on disk (whoever wrote it)."""
    return {int(m.group(2)) for p in self.folder.iterdir() if (m := SHARD_PATTERN.match(p.name))}

  def write(self, process: int, chunk: int, rows: list[dict], schema: pa.Schema) -> pathlib.Path:
    path = self.folder / shard_name(process, chunk)
    tables.write_rows(path, rows, "parquet", schema=schema)
    with _locked(self.folder):
      manifest = self._read()
      manifest["chunks_done"] = sorted(set(manifest.get("chunks_done", [])) | {chunk})
      tables.atomic_write_json(self.folder / MANIFEST, manifest)
    return path
