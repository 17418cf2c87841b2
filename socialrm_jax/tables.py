"""Reading and writing the project's tables (items, pairs, scores) as parquet or JSON lines.

Every writer writes under a temporary name in the destination folder and renames when the file is
complete, so a crash never leaves a half file that looks whole. Readers accept one file or a folder
of shards (`items.parquet`, `items-00000-of-00004.parquet`, `items.jsonl`, ...).
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from socialrm_jax.errors import InputError

FORMATS = ("parquet", "jsonl")
# Columns that hold a JSON object of varying keys; parquet stores them as a JSON string.
JSON_OBJECT_COLUMNS = ("attributes",)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
  """Writes `data` to `path` through a temporary file in the same folder and a rename."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
  atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode())


def _to_jsonl(rows: Iterable[dict]) -> bytes:
  return b"".join(
      json.dumps(r, ensure_ascii=False, sort_keys=False, separators=(",", ":")).encode() + b"\n"
      for r in rows)


def _to_parquet(rows: Sequence[dict], schema: pa.Schema | None) -> bytes:
  rows = [
      {k: (json.dumps(v, ensure_ascii=False, sort_keys=True) if k in JSON_OBJECT_COLUMNS else v)
       for k, v in r.items()} for r in rows]
  table = pa.Table.from_pylist(rows, schema=schema)
  sink = pa.BufferOutputStream()
  pq.write_table(table, sink, compression="zstd")
  return sink.getvalue().to_pybytes()


def write_rows(path: str | os.PathLike, rows: Sequence[dict], fmt: str | None = None,
               schema: pa.Schema | None = None) -> None:
  """Writes `rows` (dicts with the same keys) to `path` atomically, as parquet or jsonl."""
  path = pathlib.Path(path)
  fmt = fmt or path.suffix.lstrip(".")
  if fmt == "parquet":
    atomic_write_bytes(path, _to_parquet(rows, schema))
  elif fmt == "jsonl":
    atomic_write_bytes(path, _to_jsonl(rows))
  else:
    raise InputError(f"unknown table format {fmt!r}; known: {', '.join(FORMATS)}", path)


def table_files(path: str | os.PathLike, prefix: str) -> list[pathlib.Path]:
  """The files of table `prefix` at `path`: the file itself, or the folder's `prefix*` shards."""
  path = pathlib.Path(path)
  if path.is_file():
    return [path]
  if not path.is_dir():
    raise InputError(f"no such file or folder (looking for the {prefix} table)", path)
  files = sorted(p for p in path.iterdir()
                 if p.name.startswith(prefix) and p.suffix in (".parquet", ".jsonl")
                 and not p.name.startswith("."))
  if not files:
    raise InputError(f"no {prefix}*.parquet or {prefix}*.jsonl files in this folder", path)
  suffixes = {p.suffix for p in files}
  if len(suffixes) > 1:
    raise InputError(f"both parquet and jsonl {prefix} files in this folder; keep one format", path)
  return files


def _decode_row(row: dict) -> dict:
  for k in JSON_OBJECT_COLUMNS:
    if isinstance(row.get(k), str):
      row[k] = json.loads(row[k])
  return row


def read_rows(path: str | os.PathLike, prefix: str) -> list[dict]:
  """Reads every row of table `prefix` at `path` (a file or a folder of shards), in file order."""
  rows: list[dict] = []
  for f in table_files(path, prefix):
    if f.suffix == ".parquet":
      rows.extend(_decode_row(r) for r in pq.read_table(f).to_pylist())
    else:
      with open(f, encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
          if not line.strip():
            continue
          try:
            rows.append(_decode_row(json.loads(line)))
          except json.JSONDecodeError as e:
            raise InputError(f"not valid JSON ({e.msg})", f, i) from None
  return rows
