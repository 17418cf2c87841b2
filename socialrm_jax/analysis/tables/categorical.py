"""Columns of strings with few distinct values (dataset, subset, role, ...) as small integer codes.

The metrics keep a dozen such columns per item; as object arrays they cost 8 bytes an item each
(and a Python string each unless interned), which at a million items is most of the metrics'
memory. A `Categorical` stores one code per item (1 byte while there are at most 127 distinct
values) and its distinct values once, as pandas' Categorical does, and reads like an array of
strings where the metrics use one: `column == "gold"` is a bool array, `column[i]` a string,
`column[index]` another `Categorical`, and iterating it gives strings.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np


def smallest_code_dtype(n_values: int) -> np.dtype:
  """The narrowest signed integer that numbers `n_values` values."""
  for dtype in (np.int8, np.int16, np.int32):
    if n_values <= np.iinfo(dtype).max:
      return np.dtype(dtype)
  return np.dtype(np.int64)


class Categorical:
  """Strings as codes into `categories` (object [C]): the string at i is categories[codes[i]].
  `codes` has any shape ([N] for an item column, [N, K] for a per-candidate one)."""

  __slots__ = ("codes", "categories")

  def __init__(self, codes: np.ndarray, categories: np.ndarray):
    self.codes = codes
    self.categories = categories

  @property
  def shape(self) -> tuple[int, ...]:
    return self.codes.shape

  def __len__(self) -> int:
    return len(self.codes)

  def __getitem__(self, key: Any) -> Any:
    codes = self.codes[key]
    if np.ndim(codes) == 0:
      return self.categories[codes]
    return Categorical(codes, self.categories)

  def __eq__(self, value: Any) -> np.ndarray:  # type: ignore[override]
    """Where the strings equal `value`, one string (to compare with an array of strings, take
    `strings()`). # [same shape] bool"""
    if isinstance(value, (np.ndarray, list, tuple, Categorical)):
      raise TypeError("a Categorical compares with one value; compare strings() with an array")
    found = [i for i, c in enumerate(self.categories.tolist()) if c == value]
    return (self.codes == found[0] if found else np.zeros(self.codes.shape, dtype=bool))

  def __ne__(self, value: Any) -> np.ndarray:  # type: ignore[override]
    return ~(self == value)

  __hash__ = None  # type: ignore[assignment]

  def strings(self) -> np.ndarray:
    """The column as an object array of its strings. # [same shape]"""
    return self.categories[self.codes]

  def __iter__(self) -> Iterator[Any]:
    return iter(self.strings().tolist())

  def tolist(self) -> list:
    return self.strings().tolist()

  def distinct(self) -> list[Any]:
    """The values that occur, in order of first occurrence (row-major)."""
    present, first = np.unique(self.codes.ravel(), return_index=True)
    return [self.categories[c] for c in present[np.argsort(first, kind="stable")]]

  def __repr__(self) -> str:
    return f"Categorical({self.strings()!r})"


class Coder:
  """Numbers the values of one column as it is read, a batch at a time, so that the codes of
  every batch share one set of categories."""

  def __init__(self):
    self.index: dict[Any, int] = {}

  def codes(self, values: Any) -> np.ndarray:
    """Codes of `values` (a list, or a list of equally long lists). # int32 [len(values), ...]"""
    index = self.index

    def code(value):
      found = index.get(value)
      if found is None:
        found = index[value] = len(index)
      return found
    array = np.asarray(values, dtype=object)
    if array.size == 0:
      return np.zeros(array.shape, dtype=np.int32)
    return np.fromiter((code(v) for v in array.ravel().tolist()), dtype=np.int32,
                       count=array.size).reshape(array.shape)

  def finish(self, blocks: list[np.ndarray]) -> Categorical:
    """One Categorical of the code blocks (concatenated along their first axis)."""
    categories = np.empty(len(self.index), dtype=object)
    categories[:] = list(self.index)
    dtype = smallest_code_dtype(len(self.index))
    codes = (np.concatenate(blocks) if blocks else np.zeros(0, np.int32)).astype(dtype)
    return Categorical(codes, categories)
