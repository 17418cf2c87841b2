"""Reading scores tables (SPEC sec. 2): one row per scored candidate, `item_id`, `candidate`,
`reward`, maybe more columns, which are ignored here.

Parquet shards are read column-wise (a million rows in well under a second); JSON lines row by
row. Every bad value is reported with its file and 1-based row.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import numpy as np

from socialrm_jax import tables
from socialrm_jax.errors import InputError

REQUIRED_COLUMNS = ("item_id", "candidate", "reward")
# A multi-output reward head's whole vector per row (`reward` is its reduction, see
# scoring/proxies.py); read when every row of the set has one, for the per-objective breakdown.
VECTOR_COLUMN = "rewards"


@dataclasses.dataclass(frozen=True)
class Scores:
  """The rows of one scores set, as columns."""
  item_id: np.ndarray    # [R] object (str)
  candidate: np.ndarray  # [R] int64
  reward: np.ndarray     # [R] float64
  path: str
  rewards: np.ndarray | None = None  # [R, L] float64 reward vectors, when every row has one


def _vectors(values: list, path: pathlib.Path) -> np.ndarray | None:
  """Rows' reward vectors [R, L]; None when some row has none; unequal lengths are an error."""
  if not values or any(v is None for v in values):
    return None
  lengths = np.fromiter((len(v) for v in values), np.int64, count=len(values))
  if (lengths != lengths[0]).any():
    row = int(np.flatnonzero(lengths != lengths[0])[0])
    raise InputError(f"{VECTOR_COLUMN} has {lengths[row]} values here but {lengths[0]} in row 1; "
                     "every row of a scores set needs the same number of objectives", path,
                     row + 1)
  return np.asarray(values, dtype=np.float64).reshape(len(values), int(lengths[0]))


def _check_rewards(reward: np.ndarray, item_id: np.ndarray, candidate: np.ndarray,
                   path: pathlib.Path, first_row: int) -> None:
  bad = np.flatnonzero(~np.isfinite(reward))
  if bad.size:
    i = bad[0]
    raise InputError(
        f"reward is {reward[i]} for item {item_id[i]!r} candidate {candidate[i]} "
        f"({bad.size} non-finite rewards in this file); rescore that item", path, first_row + i)


def object_array(values: list) -> np.ndarray:
  """A list as a 1-d object array, whatever its values are (lists included)."""
  out = np.empty(len(values), dtype=object)
  out[:] = values
  return out


def _read_parquet(path: pathlib.Path) -> tuple[np.ndarray, ...]:
  table = tables.read_parquet(path)
  names = table.column_names
  missing = [c for c in REQUIRED_COLUMNS if c not in names]
  if missing:
    raise InputError(f"scores table lacks column(s) {', '.join(missing)}", path)
  for column in REQUIRED_COLUMNS:
    if table.column(column).null_count:
      row = int(np.flatnonzero(table.column(column).is_null().to_numpy(zero_copy_only=False))[0])
      raise InputError(f"{column} is null", path, row + 1)
  # Each distinct id made a Python string once (an item has a row per candidate).
  encoded = table.column("item_id").combine_chunks().dictionary_encode()
  item_id = object_array(encoded.dictionary.to_pylist())[
      encoded.indices.to_numpy(zero_copy_only=False)]
  candidate = table.column("candidate").to_numpy().astype(np.int64)
  reward = table.column("reward").to_numpy().astype(np.float64)
  vectors = (_vectors(table.column(VECTOR_COLUMN).to_pylist(), path)
             if VECTOR_COLUMN in names else None)
  del table, encoded
  tables.release_unused_memory()
  return item_id, candidate, reward, vectors


def _read_jsonl(path: pathlib.Path) -> tuple[np.ndarray, ...]:
  item_id, candidate, reward, vectors = [], [], [], []
  for number, row in tables.jsonl_rows(path):
    if not isinstance(row, dict):
      raise InputError("expected a JSON object", path, number)
    missing = [c for c in REQUIRED_COLUMNS if row.get(c) is None]
    if missing:
      raise InputError(f"scores row lacks {', '.join(missing)}", path, number)
    if not isinstance(row["candidate"], int) or isinstance(row["reward"], (str, bool)):
      raise InputError("candidate must be an integer and reward a number", path, number)
    item_id.append(str(row["item_id"]))
    candidate.append(row["candidate"])
    reward.append(float(row["reward"]))
    vectors.append(row.get(VECTOR_COLUMN))
  return (np.asarray(item_id, dtype=object), np.asarray(candidate, dtype=np.int64),
          np.asarray(reward, dtype=np.float64), _vectors(vectors, path))


def read_scores(path: str | os.PathLike) -> Scores:
  """Reads a scores file or a folder of `scores*` shards; non-finite rewards are an error."""
  parts = []
  for f in tables.table_files(path, "scores"):
    columns = _read_parquet(f) if f.suffix == ".parquet" else _read_jsonl(f)
    _check_rewards(columns[2], columns[0], columns[1], f, first_row=1)
    parts.append(columns)
  item_id, candidate, reward = (np.concatenate([p[i] for p in parts]) for i in range(3))
  vectors = [p[3] for p in parts]
  same = all(v is not None and v.shape[1] == vectors[0].shape[1] for v in vectors)
  return Scores(item_id=item_id, candidate=candidate, reward=reward, path=str(path),
                rewards=np.concatenate(vectors) if vectors and same else None)


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


