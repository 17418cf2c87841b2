"""Item ids as numpy string arrays, and finding ids in them.

The metrics hold an id per item (the items table) and per scored candidate (the scores table). As
Python strings in object arrays, with a dict to find them, a million ids cost ~150 MB; numpy's
variable-width `StringDType` keeps an id of up to 15 bytes in the array's own 16 bytes an entry
(longer ones in one arena), and `IdIndex` finds ids through their sorted hashes (8 bytes an id)
and one string comparison. (numpy 2.4's `searchsorted` on `StringDType` misorders ids over 15
bytes, so the strings themselves are never binary-searched.)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

ID_DTYPE = np.dtypes.StringDType()
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


def id_array(ids: Sequence[str]) -> np.ndarray:
  """Ids (texts, `is_id`) as one numpy string array. # [n] StringDType"""
  return np.asarray(ids, dtype=ID_DTYPE) if len(ids) else np.zeros(0, ID_DTYPE)


def _hashes(ids: Sequence[str]) -> np.ndarray:
  # Python's string hash: salted per process, which is all a lookup within one process needs.
  return np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))


def _strings(ids: Any, start: int) -> list[str]:
  batch = ids[start:start + BATCH]
  return batch.tolist() if isinstance(batch, np.ndarray) else list(batch)


@dataclasses.dataclass(frozen=True)
class IdIndex:
  """Distinct ids in table order, found by hash: N ids."""
  ids: np.ndarray      # [N] StringDType
  hashes: np.ndarray   # [N] int64, ascending
  order: np.ndarray    # [N] int64: the position in `ids` of the id with hashes[k]

  @classmethod
  def of(cls, ids: np.ndarray) -> "IdIndex":
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
      wanted, query = _hashes(strings), id_array(strings)                    # [b], [b]
      at = np.searchsorted(self.hashes, wanted)                              # [b]
      found = out[start:start + len(strings)]
      while True:  # along each run of equal hashes: once, unless two ids share a hash
        live = np.flatnonzero((found < 0) & (at < n))
        live = live[self.hashes[at[live]] == wanted[live]]
        if not live.size:
          break
        candidate = self.order[at[live]]
        hit = self.ids[candidate] == query[live]
        found[live[hit]] = candidate[hit]
        at[live[~hit]] += 1
    return out
