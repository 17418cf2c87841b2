"""The items a scoring run reads, without holding them all: one streaming pass counts, checks and
hashes them, and each chunk is read again when the producer needs it.

A run's host memory then grows with a chunk (`--chunk_size` items), not with the items file: a
million-item file costs one chunk's rows plus 8 bytes an item (the id hashes that find a
repeated id). A list of items (tests, the library) goes through the same interface.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Callable, Collection, Iterable, Iterator, Sequence

import numpy as np

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError


class ItemsDigest:
  """The items' identity in an output folder's manifest: their count and a hash of their ids,
  prompts and candidates, in order (`shards.items_identity`), fed one item at a time."""

  def __init__(self):
    self.count = 0
    self._digest = hashlib.sha256()

  def update(self, item: dict) -> None:
    self.count += 1
    self._digest.update(json.dumps([str(item["item_id"]), item.get("prompt"),
                                    item.get("candidates")], sort_keys=True,
                                   default=str).encode() + b"\0")

  def identity(self) -> dict:
    return {"count": self.count, "sha256": self._digest.hexdigest()}


# Ids hashed at a time before their hashes become an array.
_HASH_BLOCK = 1 << 16


def id_hash(item_id: str) -> int:
  """An id's 64-bit hash (blake2b), the same in every process."""
  return int.from_bytes(hashlib.blake2b(item_id.encode(), digest_size=8).digest(), "little")


class ItemSource:
  """The selected items (`--datasets`, then the first `--limit`) of a table or a list.

  Construction reads them once: `count`, `identity` (the manifest's), `first` (the manifest's
  rendered example); an unknown dataset name or a repeated item_id is an InputError then, before
  any work. `chunks` and `take` read them again.
  """

  def __init__(self, read: Callable[[], Iterable[dict]], datasets: Sequence[str] = (),
               limit: int | None = None, name: str = "the items"):
    self._read, self.name = read, name
    self.datasets = set(datasets)
    self.limit = limit if limit is not None and limit >= 0 else None
    digest, first, known, id_hashes, hash_blocks = ItemsDigest(), None, set(), [], []
    for number, item in enumerate(self._read(), start=1):
      if not item.get("item_id"):
        raise InputError("the item has no item_id", self.name, number)
      dataset = str(item.get("dataset"))
      known.add(dataset)
      if self.datasets and dataset not in self.datasets:
        continue
      if self.limit is not None and digest.count >= self.limit:
        if not self.datasets:
          break  # Nothing left to learn: the names are only checked against a filter.
        continue
      first = item if first is None else first
      digest.update(item)
      id_hashes.append(id_hash(str(item["item_id"])))
      if len(id_hashes) == _HASH_BLOCK:  # a block as an array: 8 bytes an id, not 40
        hash_blocks.append(np.asarray(id_hashes, np.uint64))
        id_hashes = []
    unknown = sorted(self.datasets - known)
    if unknown:
      raise InputError(f"--datasets names {', '.join(unknown)}, not in the items "
                       f"(they hold: {', '.join(sorted(known))})")
    self.count, self.identity, self.first = digest.count, digest.identity(), first
    hashes = np.sort(np.concatenate([*hash_blocks, np.asarray(id_hashes, np.uint64)]))
    if hashes.size and np.any(hashes[1:] == hashes[:-1]):
      raise InputError(f"duplicate item_id values in {self.name} (first: "
                       f"{self._first_repeated_id()!r}): every item must have its own id")

  @classmethod
  def from_table(cls, path: str | os.PathLike, datasets: Sequence[str] = (),
                 limit: int | None = None) -> "ItemSource":
    """The items table at `path` (a file or the converter's folder), streamed."""
    return cls(lambda: tables.iter_rows(path, "items"), datasets, limit, name=str(path))

  @classmethod
  def from_rows(cls, rows: Sequence[dict], datasets: Sequence[str] = (),
                limit: int | None = None) -> "ItemSource":
    return cls(lambda: iter(rows), datasets, limit)

  def __len__(self) -> int:
    return self.count

  def __iter__(self) -> Iterator[dict]:
    """The selected items, in order, read again."""
    selected = 0
    for item in self._read():
      if self.limit is not None and selected >= self.limit:
        return
      if self.datasets and str(item.get("dataset")) not in self.datasets:
        continue
      selected += 1
      yield item

  def _first_repeated_id(self) -> str:
    seen: set[str] = set()
    for item in self:
      item_id = str(item["item_id"])
      if item_id in seen:
        return item_id
      seen.add(item_id)
    raise AssertionError("two ids share a 64-bit hash but no id repeats")  # ~never: 2^-64 a pair

  def chunks(self, chunk_size: int, wanted: Collection[int]) -> Iterator[tuple[int, list[dict]]]:
    """(chunk number, its items) of every chunk in `wanted`, in order; the others are skipped
    as they are read."""
    wanted = set(wanted)
    last = max(wanted, default=-1)
    chunk: list[dict] = []
    number = 0
    for i, item in enumerate(self):
      number = i // chunk_size
      if number > last:
        return  # The rest of the file holds no wanted chunk.
      if number in wanted:
        chunk.append(item)
        if len(chunk) == chunk_size:
          yield number, chunk
          chunk = []
    if chunk:
      yield number, chunk

  def take(self, indices: Collection[int]) -> list[dict]:
    """The items at these positions, in order of position."""
    indices = set(indices)
    return [item for i, item in enumerate(self) if i in indices]


def as_source(items: Any) -> ItemSource:
  """An ItemSource as it is, a list of items wrapped."""
  return items if isinstance(items, ItemSource) else ItemSource.from_rows(items)
