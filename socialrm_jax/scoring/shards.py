"""Output shards, the manifest, and resuming into the same folder.

Items are cut into chunks of `chunk_size` (chunk j = items [j*C, (j+1)*C)); a chunk's scores go to
`scores-<process>-<chunk>.parquet`, written under a temporary name and renamed, so a shard that
exists is complete. `manifest.json` records what the scores belong to: the model (its path and a
hash of its files' names, sizes and bytes: whole, or a fixed sample for very large files), the
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
import shutil
from typing import Iterable

import pyarrow as pa

from socialrm_jax.base import tables
from socialrm_jax.base.writer_lock import WriterLock
from socialrm_jax.scoring import item_source
from socialrm_jax.base.errors import InputError

MANIFEST = "manifest.json"
# 2: the model hashed by its files' bytes, the items by their contents.
MANIFEST_FORMAT = 2
SHARD_PATTERN = re.compile(r"^scores-(\d{5})-(\d{5})\.parquet$")
# Model files up to this size are hashed whole, larger ones by a sample (see model_identity).
FULL_HASH_BYTES = 1 << 30
SAMPLE_BLOCKS = 1024
SAMPLE_BLOCK_BYTES = 16 << 10


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


def _hash_sample(digest, path: pathlib.Path, size: int) -> None:
  """`SAMPLE_BLOCKS` blocks of `SAMPLE_BLOCK_BYTES` spread evenly over the file, its first and
  last included: two checkpoints of one fine-tuning run differ in nearly every block."""
  with open(path, "rb") as f:
    for i in range(SAMPLE_BLOCKS):
      f.seek((size - SAMPLE_BLOCK_BYTES) * i // (SAMPLE_BLOCKS - 1))
      digest.update(f.read(SAMPLE_BLOCK_BYTES))


def model_identity(path: str | os.PathLike) -> dict:
  """The model's path and a hash of what decides its outputs: every file's name, size and bytes.

  Files up to `FULL_HASH_BYTES` (config, tokenizer, the weights of models up to a few hundred
  million parameters) are hashed whole; a larger weight file by a fixed sample of its bytes
  (`_hash_sample`), so an 8B checkpoint is told apart in well under a second. Copying a folder
  keeps its identity; other weights with the same names and shapes do not.
  """
  path = pathlib.Path(path).resolve()
  digest = hashlib.sha256()
  files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
  for f in files:
    name = str(f.relative_to(path)) if f != path else f.name
    size = f.stat().st_size
    digest.update(f"{name}\0{size}\0".encode())
    if size <= FULL_HASH_BYTES:
      _hash_file(digest, f)
    else:
      _hash_sample(digest, f, size)
  return {"path": str(path), "sha256": digest.hexdigest()}


def items_identity(items: Iterable[dict]) -> dict:
  """The count and a hash of the items' ids, prompts and candidates, in order."""
  digest = item_source.ItemsDigest()
  for item in items:
    digest.update(item)
  return digest.identity()


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
               chunk_size: int, writer: int | None = 0):
    self.folder = pathlib.Path(folder)
    self.folder.mkdir(parents=True, exist_ok=True)
    self.lock = None
    # Taken before the manifest is read, so a concurrent run of another model fails here.
    self.lock = WriterLock(self.folder, f".writer-{writer:05d}.lock",
                           "scoring run") if writer is not None else None
    self.chunk_size = chunk_size
    self.identity = {"format": MANIFEST_FORMAT, "model": model, "items": items,
                     "settings": settings, "chunk_size": chunk_size,
                     "num_chunks": num_chunks(items["count"], chunk_size)}
    try:
      with _locked(self.folder):
        self._remove_stale_temporaries(writer)
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
    except BaseException:
      self.close()
      raise

  def _remove_stale_temporaries(self, writer: int | None) -> None:
    """Temporary files a killed run left: the manifest's (written only under the manifest lock,
    which this process holds) and this writer's shards' (whose lock it holds)."""
    stale = list(self.folder.glob(f".{MANIFEST}.*.tmp"))
    if writer is not None:
      stale += self.folder.glob(f".{shard_name(writer, 0).rsplit('-', 1)[0]}-*")
    for path in stale:
      shutil.rmtree(path) if path.is_dir() else path.unlink()

  def close(self) -> None:
    """Lets another writer in (also when the process ends, or the store is dropped)."""
    lock = getattr(self, "lock", None)  # None too when __init__ failed before taking it
    if lock is not None:
      lock.close()

  def __del__(self):
    self.close()

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
    if manifest.get("format") != MANIFEST_FORMAT:
      raise InputError(f"this folder was written by another version of socialrm_jax (manifest "
                       f"format {manifest.get('format')}, not {MANIFEST_FORMAT}); its scores "
                       "cannot be checked against this model: use a new --output_dir", where)
    theirs = manifest.get("model", {})
    if theirs.get("sha256") != self.identity["model"]["sha256"]:
      if theirs.get("path") == self.identity["model"]["path"]:
        raise InputError(
            f"this folder holds scores of the model at {theirs.get('path')} as it was: its files "
            "have changed since (other weights, config or tokenizer); use a new --output_dir",
            where)
      raise InputError(
          f"this folder holds scores of another model ({theirs.get('path')}); "
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
