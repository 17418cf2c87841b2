"""Reading scores tables (docs/spec.md sec. 2): one row per scored candidate, `item_id`,
`candidate`, `reward`, maybe more columns, which are ignored here.

Parquet shards are read column-wise (a million rows in well under a second); JSON lines row by
row. Every bad value is reported with its file and 1-based row.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from socialrm_jax.base import tables
from socialrm_jax.analysis.tables import item_ids
from socialrm_jax.analysis.tables.item_ids import IdArray
from socialrm_jax.base.errors import InputError

REQUIRED_COLUMNS = ("item_id", "candidate", "reward")
# A multi-output reward head's whole vector per row (`reward` is its reduction, see
# scoring/proxies.py); read when every row of the set has one, for the per-objective breakdown.
VECTOR_COLUMN = "rewards"


@dataclasses.dataclass(frozen=True)
class Scores:
  """The rows of one scores set, as columns. A row's item id is names[item]: an item has a row
  per candidate, and its id is kept once, as a parquet file stores it."""
  names: IdArray         # [U] item ids
  item: np.ndarray       # [R] int32 index into names
  candidate: np.ndarray  # [R] int64
  reward: np.ndarray     # [R] float64
  path: str
  rewards: np.ndarray | None = None  # [R, L] float64 reward vectors, when every row has one
  first_row: int | None = None  # the number of row 0 in its file (a part of one, `score_parts`)

  def row_number(self, row: int) -> int | None:
    """The number of `row` in its file, for an error (None when the rows are not one file's)."""
    return None if self.first_row is None else self.first_row + row

  @classmethod
  def of(cls, item_id: Sequence[str], candidate: Sequence[int], reward: Sequence[float],
         path: str, rewards: np.ndarray | None = None, first_row: int | None = None) -> "Scores":
    """Scores from one item id per row (texts), each distinct one kept once."""
    code: dict[str, int] = {}
    item = np.fromiter((code.setdefault(i, len(code)) for i in item_id), np.int32, len(item_id))
    return cls(IdArray.of(list(code)), item, np.asarray(candidate, dtype=np.int64),
               np.asarray(reward, dtype=np.float64), path, rewards, first_row)

  @property
  def item_id(self) -> IdArray:
    """Each row's item id (made on each call). # [R]"""
    return self.names[self.item]

  def row_id(self, row: int) -> str:
    return self.names[int(self.item[row])]


def _vectors(values: list, path: pathlib.Path, first_row: int,
             length: int | None = None) -> np.ndarray | None:
  """Rows' reward vectors [R, L], the rows numbered from `first_row`; None when some row has
  none. Every vector is as long as `length` (earlier rows' vectors), else as the first: another
  length is an error."""
  if not values or any(v is None for v in values):
    return None
  lengths = np.fromiter((len(v) for v in values), np.int64, count=len(values))
  length = int(lengths[0]) if length is None else length
  if (lengths != length).any():
    row = int(np.flatnonzero(lengths != length)[0])
    raise InputError(f"{VECTOR_COLUMN} has {lengths[row]} values here but {length} in an earlier "
                     "row; every row of a scores set needs the same number of objectives", path,
                     first_row + row)
  return np.asarray(values, dtype=np.float64).reshape(len(values), length)


def _check_rewards(scores: Scores) -> None:
  bad = np.flatnonzero(~np.isfinite(scores.reward))
  if bad.size:
    i = bad[0]
    raise InputError(
        f"reward is {scores.reward[i]} for item {scores.row_id(i)!r} candidate "
        f"{scores.candidate[i]} ({bad.size} non-finite rewards here); rescore that item",
        scores.path, scores.row_number(i))


def _ids(column: pa.ChunkedArray, path: pathlib.Path) -> tuple[IdArray, np.ndarray]:
  """An item_id column as (its chunks' distinct ids # [U], each row's index into them # [R]
  int32): each distinct id converted once (an item has a row per candidate)."""
  names, item = [], [np.zeros(0, np.int32)]
  for chunk in column.chunks:
    if not pa.types.is_dictionary(chunk.type):
      chunk = chunk.dictionary_encode()
    distinct = chunk.dictionary
    if not (pa.types.is_string(distinct.type) or pa.types.is_large_string(distinct.type)):
      raise InputError(f"item_id must be text, not {distinct.type}", path)
    item.append(chunk.indices.to_numpy(zero_copy_only=False).astype(np.int32)
                + np.int32(sum(n.size for n in names)))
    names += [IdArray.of(distinct.slice(start, item_ids.BATCH).to_pylist())
              for start in range(0, len(distinct), item_ids.BATCH)]
  return IdArray.concatenate(names), np.concatenate(item)


def _parquet_parts(path: pathlib.Path, vectors: bool) -> Iterator[Scores]:
  """A parquet scores file a row group at a time (`Scores.first_row` numbering its rows)."""
  columns = tables.parquet_columns(path)
  missing = [c for c in REQUIRED_COLUMNS if c not in columns]
  if missing:
    raise InputError(f"scores table lacks column(s) {', '.join(missing)}", path)
  vectors = vectors and VECTOR_COLUMN in columns
  first_row, length = 1, None
  wanted = [*REQUIRED_COLUMNS, VECTOR_COLUMN] if vectors else list(REQUIRED_COLUMNS)
  for table in tables.parquet_row_groups(path, wanted, dictionary=["item_id"]):
    for column in REQUIRED_COLUMNS:
      if table.column(column).null_count:
        row = int(np.flatnonzero(table.column(column).is_null().to_numpy(
            zero_copy_only=False))[0])
        raise InputError(f"{column} is null", path, first_row + row)
    group_vectors = (_vectors(table.column(VECTOR_COLUMN).to_pylist(), path, first_row, length)
                     if vectors else None)
    if group_vectors is not None:  # one length in the whole file, as within a group
      length = group_vectors.shape[1]
    yield Scores(*_ids(table.column("item_id"), path),
                 table.column("candidate").to_numpy().astype(np.int64),
                 table.column("reward").to_numpy().astype(np.float64), str(path), group_vectors,
                 first_row)
    first_row += table.num_rows


def _read_jsonl(path: pathlib.Path) -> Scores:
  item_id, candidate, reward, vectors = [], [], [], []
  for number, row in tables.jsonl_rows(path):
    if not isinstance(row, dict):
      raise InputError("expected a JSON object", path, number)
    missing = [c for c in REQUIRED_COLUMNS if row.get(c) is None]
    if missing:
      raise InputError(f"scores row lacks {', '.join(missing)}", path, number)
    if not isinstance(row["candidate"], int) or isinstance(row["reward"], (str, bool)):
      raise InputError("candidate must be an integer and reward a number", path, number)
    if not item_ids.is_id(str(row["item_id"])):
      raise InputError("item_id is not valid Unicode text", path, number)
    item_id.append(str(row["item_id"]))
    candidate.append(row["candidate"])
    reward.append(float(row["reward"]))
    vectors.append(row.get(VECTOR_COLUMN))
  return Scores.of(item_id, candidate, reward, str(path), _vectors(vectors, path, 1), first_row=1)


def score_parts(path: str | os.PathLike, vectors: bool = True) -> Iterator[Scores]:
  """A scores file or a folder of `scores*` shards, in parts (a parquet file's row groups, a
  JSON-lines file whole), each checked as it comes (non-finite rewards are an error): a set of
  any size costs one part at a time. `vectors`: read the reward vectors where there are some."""
  for f in tables.table_files(path, "scores"):
    for part in _parquet_parts(f, vectors) if f.suffix == ".parquet" else [_read_jsonl(f)]:
      _check_rewards(part)
      yield part
  tables.release_unused_memory()


def read_scores(path: str | os.PathLike) -> Scores:
  """A scores file or a folder of `scores*` shards, whole (`score_parts`, concatenated)."""
  parts = list(score_parts(path))
  # A part's rows index its own names: past the names of the parts before it.
  offsets = np.cumsum([0, *(p.names.size for p in parts)])
  item = np.concatenate([p.item + np.int32(o) for p, o in zip(parts, offsets)] or
                        [np.zeros(0, np.int32)])
  vectors = [p.rewards for p in parts]
  same = all(v is not None and v.shape[1] == vectors[0].shape[1] for v in vectors)

  def joined(field: str, dtype) -> np.ndarray:
    return np.concatenate([getattr(p, field) for p in parts] or [np.zeros(0, dtype)])
  return Scores(IdArray.concatenate([p.names for p in parts]), item, joined("candidate", np.int64),
                joined("reward", np.float64), str(path),
                np.concatenate(vectors) if vectors and same else None)


def model_name(path: str | os.PathLike) -> str:
  """The display name of a scores set: `run.json`'s `model` beside it, else the folder or file
  stem (a file named `scores*` takes its folder's name)."""
  path = pathlib.Path(path)
  folder = path if path.is_dir() else path.parent
  run_json = folder / "run.json"
  if run_json.is_file():
    try:
      model = json.loads(run_json.read_text(encoding="utf-8")).get("model")
    except (json.JSONDecodeError, AttributeError):
      model = None
    if isinstance(model, str) and model:
      return pathlib.Path(model.rstrip("/")).name or model
  if path.is_dir() or path.stem.startswith("scores"):
    return folder.resolve().name
  return path.stem


