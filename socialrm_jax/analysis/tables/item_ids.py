"""Item ids in compact arrays, and finding ids in them.

The metrics hold an id per item (the items table) and per scored candidate (the scores table). As
Python strings in object arrays, with a dict to find them, a million ids cost ~150 MB. Here ids
are an `IdArray`, their UTF-8 bytes one after the other and where each starts, as Arrow stores a
string column (an id of 20 bytes costs 24), and `IdIndex` finds ids through their sorted hashes
(8 bytes an id) and one comparison of bytes. (numpy 2.4's `StringDType` would cost 40 bytes for
such an id, and its `searchsorted` misorders strings over 15 bytes.)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Sequence

import numpy as np

# Ids converted or looked up at a time: the Python strings of one batch are all that exist at once.
BATCH = 8192


def is_id(value: Any) -> bool:
  """Whether `value` can be an item id: a text that is valid Unicode (a lone surrogate, which a
  JSON file can hold, is not)."""
  if not isinstance(value, str):
    return False
  try:
    value.encode("utf-8")
  except UnicodeEncodeError:
    return False
  return True


def _offsets(lengths: np.ndarray) -> np.ndarray:
  """Where each of strings of `lengths` [n] bytes starts, and the end. # [n + 1]"""
  total = int(lengths.sum())
  out = np.zeros(lengths.size + 1, np.int32 if total < 2**31 else np.int64)
  np.cumsum(lengths, out=out[1:])
  return out


class IdArray:
  """N ids (texts) as their UTF-8 bytes one after the other, `data` [bytes] uint8, and where the
  i-th starts, `offsets` [N + 1]. Reads like a 1-d array of str: `ids[i]` is a str, `ids[index]`
  (a slice, an index array or a bool mask) an `IdArray`, iterating gives strs."""

  __slots__ = ("data", "offsets")

  def __init__(self, data: np.ndarray, offsets: np.ndarray):
    self.data = data
    self.offsets = offsets

  @classmethod
  def of(cls, ids: Sequence[str]) -> "IdArray":
    encoded = [i.encode("utf-8") for i in ids]
    offsets = _offsets(np.fromiter(map(len, encoded), np.int64, len(encoded)))
    return cls(np.frombuffer(b"".join(encoded), np.uint8).copy(), offsets)

  @classmethod
  def concatenate(cls, parts: Sequence["IdArray"]) -> "IdArray":
    lengths = np.concatenate([np.diff(p.offsets).astype(np.int64) for p in parts] or
                             [np.zeros(0, np.int64)])
    return cls(np.concatenate([p.data[int(p.offsets[0]):int(p.offsets[-1])] for p in parts] or
                              [np.zeros(0, np.uint8)]), _offsets(lengths))

  @property
  def size(self) -> int:
    return self.offsets.size - 1

  def __len__(self) -> int:
    return self.size

  def _one(self, i: int) -> str:
    return self.data[self.offsets[i]:self.offsets[i + 1]].tobytes().decode("utf-8")

  def __getitem__(self, key: Any) -> Any:
    if isinstance(key, (int, np.integer)):
      return self._one(int(key) + (self.size if key < 0 else 0))
    if isinstance(key, slice):
      start, stop, step = key.indices(self.size)
      if step == 1:  # a view: the offsets need not start at 0
        return IdArray(self.data, self.offsets[start:max(start, stop) + 1])
    key = np.asarray(key)
    return self.take(np.flatnonzero(key) if key.dtype == bool else key)

  def _spans(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each id of `index` starts in `data`, its length in bytes). -> ([m], [m]) int64"""
    starts = self.offsets[index].astype(np.int64)
    return starts, self.offsets[index + 1] - starts

  def _bytes(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The bytes of spans (starts, lengths) one after the other. # [sum(lengths)] uint8"""
    first = np.cumsum(lengths) - lengths
    return self.data[np.repeat(starts - first, lengths) + np.arange(int(lengths.sum()))]

  def take(self, index: np.ndarray) -> "IdArray":
    """The ids at `index` [m], gathered `1 << 16` at a time (no Python string made)."""
    index = np.asarray(index, dtype=np.int64)
    parts, lengths = [], []
    for start in range(0, index.size, 1 << 16):
      spans = self._spans(index[start:start + (1 << 16)])
      parts.append(self._bytes(*spans))
      lengths.append(spans[1])
    return IdArray(np.concatenate(parts or [np.zeros(0, np.uint8)]),
                   _offsets(np.concatenate(lengths or [np.zeros(0, np.int64)])))

  def matches(self, index: np.ndarray, queries: Sequence[str]) -> np.ndarray:
    """Whether the id at index[j] is queries[j], for each j. # [m] bool"""
    encoded = [q.encode("utf-8") for q in queries]
    wanted = np.fromiter(map(len, encoded), np.int64, len(encoded))          # [m]
    starts, lengths = self._spans(np.asarray(index, dtype=np.int64))
    same = np.flatnonzero(lengths == wanted)                                 # [s]
    theirs = np.frombuffer(b"".join([encoded[j] for j in same.tolist()]), np.uint8)
    differ = self._bytes(starts[same], lengths[same]) != theirs
    wrong = np.bincount(np.repeat(np.arange(same.size), lengths[same]), weights=differ,
                        minlength=same.size)                                 # [s]
    out = np.zeros(len(encoded), dtype=bool)
    out[same] = wrong == 0
    return out

  def __iter__(self) -> Iterator[str]:
    for start in range(0, self.size, BATCH):  # decoded a batch at a time
      yield from self.tolist(start, start + BATCH)

  def tolist(self, start: int = 0, stop: int | None = None) -> list[str]:
    """The ids start:stop as strs."""
    stop = self.size if stop is None else min(stop, self.size)
    if stop <= start:
      return []
    first = int(self.offsets[start])
    text = self.data[first:int(self.offsets[stop])].tobytes()
    ends = (self.offsets[start + 1:stop + 1] - first).tolist()
    return [text[b:e].decode("utf-8") for b, e in zip([0, *ends[:-1]], ends)]

  def __repr__(self) -> str:
    return f"IdArray({self.tolist(0, 5)}{', ...' if self.size > 5 else ''}, n={self.size})"


def _hashes(ids: Sequence[str]) -> np.ndarray:
  # Python's string hash: salted per process, which is all a lookup within one process needs.
  return np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))


def _strings(ids: Any, start: int) -> list[str]:
  if isinstance(ids, IdArray):
    return ids.tolist(start, start + BATCH)
  batch = ids[start:start + BATCH]
  return batch.tolist() if isinstance(batch, np.ndarray) else list(batch)


@dataclasses.dataclass(frozen=True)
class IdIndex:
  """Distinct ids in table order, found by hash: N ids."""
  ids: IdArray         # [N]
  hashes: np.ndarray   # [N] int64, ascending
  order: np.ndarray    # [N] int64: the position in `ids` of the id with hashes[k]

  @classmethod
  def of(cls, ids: IdArray) -> "IdIndex":
    hashes = np.concatenate([_hashes(_strings(ids, s)) for s in range(0, ids.size, BATCH)] or
                            [np.zeros(0, np.int64)])
    order = np.argsort(hashes, kind="stable")
    return cls(ids, hashes[order], order)

  def first_repeat(self) -> int | None:
    """The position of the first id (in table order) that equals an earlier one; None when all
    are distinct. Equal ids have equal hashes, so only runs of equal hashes are compared."""
    same = self.hashes[1:] == self.hashes[:-1]                               # [N - 1]
    if not same.any():
      return None
    in_run = np.zeros(self.hashes.size, dtype=bool)
    in_run[1:] |= same
    in_run[:-1] |= same
    seen: set[str] = set()
    for position in np.sort(self.order[in_run]).tolist():
      if (value := str(self.ids[position])) in seen:
        return position
      seen.add(value)
    return None

  def positions(self, queries: Any) -> np.ndarray:
    """Where each of `queries` (ids, `is_id`) is in `ids`, -1 when absent. # [Q] int64"""
    out = np.full(len(queries), -1, dtype=np.int64)
    n = self.hashes.size
    for start in range(0, len(queries), BATCH):
      strings = _strings(queries, start)
      wanted = _hashes(strings)                                              # [b]
      at = np.searchsorted(self.hashes, wanted)                              # [b]
      found = out[start:start + len(strings)]
      while True:  # along each run of equal hashes: once, unless two ids share a hash
        live = np.flatnonzero((found < 0) & (at < n))
        live = live[self.hashes[at[live]] == wanted[live]]
        if not live.size:
          break
        candidate = self.order[at[live]]
        hit = self.ids.matches(candidate, [strings[q] for q in live.tolist()])
        found[live[hit]] = candidate[hit]
        at[live[~hit]] += 1
    return out
