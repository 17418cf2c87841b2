"""Reading and writing the project's tables (items, pairs, scores) as parquet, JSON lines, or
HF `datasets` folders (`datasets.Dataset.save_to_disk`).

Every writer writes under a temporary name and renames when the table is complete, so a crash
never leaves a half table that looks whole; `staged_folder` does the same for a set of outputs
written together (the converter's items, pairs and report). `TableWriter` takes rows in batches,
so a table of millions of rows is never held whole in memory. Readers accept one file, a folder
of shards (`items.parquet`, `items-00000-of-00004.parquet`, `items.jsonl`, ...) or a folder
holding an `items/` dataset folder (or that dataset folder itself).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import pathlib
import secrets
import shutil
import tempfile
from typing import Any, Callable, Collection, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from socialrm_jax.base import records
from socialrm_jax.base.errors import InputError

FORMATS = ("parquet", "jsonl", "hf")
# Columns that hold a JSON object of varying keys; parquet and Arrow store them as a JSON string.
JSON_OBJECT_COLUMNS = ("attributes",)
# Rows per written batch: a parquet row group, an Arrow record batch, a JSON-lines write.
BATCH_ROWS = 8192
# What `datasets.Dataset.save_to_disk` writes beside the data files.
_HF_MARKERS = ("state.json", "dataset_info.json")


def _new_temporary(path: pathlib.Path) -> tuple[int, pathlib.Path]:
  """A new, empty file beside `path` (`.NAME.<random>.tmp`), open for writing, with the mode
  `open` gives (0666 less the user's umask): `tempfile.mkstemp` makes 0600 files, which would stay
  unreadable to everyone else once renamed."""
  tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
  return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp


# Bytes a file digest reads at a time: hashlib releases the GIL for buffers this large, so a
# digest can run in a thread beside other work.
_DIGEST_BLOCK = 8 << 20


def file_sha256(path: str | os.PathLike) -> str:
  """The sha256 of a file's bytes (what `sha256sum` prints and the HF Hub lists for LFS files)."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(_DIGEST_BLOCK), b""):
      digest.update(block)
  return digest.hexdigest()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
  """Writes `data` to `path` through a temporary file in the same folder and a rename."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = _new_temporary(path)
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
  text = json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
  atomic_write_bytes(path, text.encode())


def read_json_object(path: str | os.PathLike) -> dict:
  """The object a JSON file holds (a config, a manifest, an index); a file that cannot be read,
  is not JSON, or holds another kind of value is an error naming it."""
  try:
    value = json.loads(pathlib.Path(path).read_bytes())
  except OSError as e:
    raise InputError(f"cannot read: {e.strerror}", path) from None
  except ValueError as e:  # not UTF-8, or not JSON
    raise InputError(f"cannot read as JSON: {e}", path) from None
  if not isinstance(value, dict):
    raise InputError(f"expected a JSON object, found {type(value).__name__}", path)
  return value


def _to_jsonl(rows: Iterable[dict]) -> bytes:
  return b"".join(
      json.dumps(r, ensure_ascii=False, sort_keys=False, separators=(",", ":")).encode() + b"\n"
      for r in rows)


def _to_arrow(rows: Sequence[dict], schema: pa.Schema | None) -> pa.Table:
  rows = [
      {k: (json.dumps(v, ensure_ascii=False, sort_keys=True) if k in JSON_OBJECT_COLUMNS else v)
       for k, v in r.items()} for r in rows]
  return pa.Table.from_pylist(rows, schema=schema)


def table_name(prefix: str, fmt: str) -> str:
  """`items.parquet`, `items.jsonl`, or `items` (an HF dataset folder)."""
  if fmt not in FORMATS:
    raise InputError(f"unknown table format {fmt!r}; known: {', '.join(FORMATS)}")
  return prefix if fmt == "hf" else f"{prefix}.{fmt}"


def hf_datasets():
  """HF `datasets`, imported where a table is in its format (the import takes a second), quiet:
  its progress bars and log lines would break a command's one-line errors. (It logs while it is
  imported, so its logger is quietened first.)"""
  logging.getLogger("datasets").setLevel(logging.CRITICAL)
  import datasets
  datasets.disable_progress_bars()
  datasets.logging.set_verbosity(datasets.logging.CRITICAL)
  return datasets


class TableWriter:
  """One table written at `path` in `fmt`, rows added in batches of any size.

  `hf_columns` recasts each batch before it is stored in the HF format (how pairs take TRL's
  column types: `records.pairs_to_trl`; `read_rows` undoes it). Used as a context manager, a block
  that raises removes what was written; `close` finishes the table. The path is written in place:
  callers write into a temporary name or a `staged_folder`."""

  def __init__(self, path: str | os.PathLike, fmt: str, schema: pa.Schema | None = None,
               hf_columns: Callable[[pa.Table], pa.Table] | None = None):
    table_name("", fmt)  # checks the format
    self.path = pathlib.Path(path)
    self.fmt = fmt
    self.schema = schema
    self.hf_columns = hf_columns
    self.rows = 0
    self._buffer: list[dict] = []
    self._file = None
    self._writer = None
    self.path.parent.mkdir(parents=True, exist_ok=True)
    # An HF dataset is staged as one Arrow stream, then saved as a dataset folder by `close`.
    self._stream = self.path.with_name(f".{self.path.name}.arrow") if fmt == "hf" else self.path

  def add(self, rows: Sequence[dict]) -> None:
    self._buffer.extend(rows)
    if len(self._buffer) >= BATCH_ROWS:
      self._flush()

  def _flush(self) -> None:
    rows, self._buffer = self._buffer, []
    if self._file is None:
      self._file = open(self._stream, "wb")
    self.rows += len(rows)
    if self.fmt == "jsonl":
      self._file.write(_to_jsonl(rows))
      return
    table = _to_arrow(rows, self.schema)
    if self.fmt == "hf" and self.hf_columns is not None:
      table = self.hf_columns(table)
    if self._writer is None:
      self._writer = (pq.ParquetWriter(self._file, table.schema, compression="zstd")
                      if self.fmt == "parquet" else pa.ipc.new_stream(self._file, table.schema))
    if table.num_rows:
      self._writer.write_table(table)

  def _close_file(self) -> None:
    if self._writer is not None:
      self._writer.close()
    if self._file is not None:
      self._file.close()

  def close(self) -> None:
    if self._file is None or self._buffer:
      self._flush()  # an empty table still gets its schema
    self._close_file()
    if self.fmt == "hf":
      datasets = hf_datasets()
      # The fingerprint (HF's content id, random by default here) is the data's own hash, so the
      # same rows give the same folder, byte for byte.
      digest = hashlib.blake2b(digest_size=8)
      with open(self._stream, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
          digest.update(block)
      dataset = datasets.Dataset(datasets.table.MemoryMappedTable.from_file(str(self._stream)),
                                 fingerprint=digest.hexdigest())
      # With no rows, `save_to_disk` writes no data file unless asked for one shard.
      dataset.save_to_disk(str(self.path), num_shards=1 if not len(dataset) else None)
      del dataset
      self._stream.unlink()

  def abort(self) -> None:
    self._close_file()
    for path in (self._stream, self.path):
      remove(path)

  def __enter__(self) -> TableWriter:
    return self

  def __exit__(self, kind, value, traceback) -> None:
    if kind is None:
      self.close()
    else:
      self.abort()


def remove(path: pathlib.Path) -> None:
  """Removes a file or a folder, if there is one."""
  if path.is_dir() and not path.is_symlink():
    shutil.rmtree(path)
  elif path.exists() or path.is_symlink():
    path.unlink()


def _replace(source: pathlib.Path, target: pathlib.Path) -> None:
  """Moves `source` to `target`, replacing a file or a folder there."""
  if target.is_dir() and not target.is_symlink():
    old = target.with_name(f".{target.name}.old")
    remove(old)
    os.replace(target, old)
    os.replace(source, target)
    shutil.rmtree(old)
  else:
    os.replace(source, target)


@contextlib.contextmanager
def staged_folder(output_dir: str | os.PathLike) -> Iterator[pathlib.Path]:
  """A hidden folder beside `output_dir` to write a set of outputs into. When the block ends, each
  entry moves into `output_dir` (made if needed), replacing one of the same name; when it raises,
  the staged folder is removed and `output_dir` is left as it was (not even made)."""
  output_dir = pathlib.Path(output_dir)
  output_dir.parent.mkdir(parents=True, exist_ok=True)
  stage = pathlib.Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}."))
  try:
    yield stage
    output_dir.mkdir(exist_ok=True)
    for entry in sorted(stage.iterdir()):
      _replace(entry, output_dir / entry.name)
  finally:
    shutil.rmtree(stage, ignore_errors=True)


def write_rows(path: str | os.PathLike, rows: Sequence[dict], fmt: str | None = None,
               schema: pa.Schema | None = None) -> None:
  """Writes `rows` (dicts with the same keys) to `path` atomically, in `fmt` (default: the
  path's suffix)."""
  path = pathlib.Path(path)
  fmt = fmt or path.suffix.lstrip(".")
  path.parent.mkdir(parents=True, exist_ok=True)
  temporary = pathlib.Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.")) / path.name
  try:
    with TableWriter(temporary, fmt, schema) as writer:
      writer.add(rows)
    _replace(temporary, path)
  finally:
    shutil.rmtree(temporary.parent, ignore_errors=True)


def _is_hf_folder(path: pathlib.Path) -> bool:
  return path.is_dir() and all((path / marker).is_file() for marker in _HF_MARKERS)


def table_files(path: str | os.PathLike, prefix: str) -> list[pathlib.Path]:
  """The parts of table `prefix` at `path`: the file itself, an HF dataset folder (the path, or
  its `prefix/`), or the folder's `prefix*` shards."""
  path = pathlib.Path(path)
  if path.is_file() or _is_hf_folder(path):
    return [path]
  if not path.is_dir():
    raise InputError(f"no such file or folder (looking for the {prefix} table)", path)
  files = sorted(p for p in path.iterdir()
                 if p.name.startswith(prefix) and p.suffix in (".parquet", ".jsonl")
                 and not p.name.startswith("."))
  if _is_hf_folder(path / prefix):
    files.append(path / prefix)
  if not files:
    raise InputError(f"no {prefix}*.parquet, {prefix}*.jsonl or {prefix}/ (a saved HF dataset) "
                     "in this folder", path)
  if len({p.suffix for p in files}) > 1:
    raise InputError(f"{prefix} tables of two formats in this folder; keep one", path)
  return files


def _decode_row(row: Any, path: pathlib.Path, number: int) -> dict:
  """A read row with its JSON-object columns (`JSON_OBJECT_COLUMNS`) decoded; `number` (1-based)
  names the row in an error."""
  if not isinstance(row, dict):
    raise InputError(f"expected a JSON object, got {type(row).__name__}", path, number)
  for k in JSON_OBJECT_COLUMNS:
    if isinstance(row.get(k), str):
      try:
        row[k] = json.loads(row[k])
      except json.JSONDecodeError as e:
        raise InputError(f"column {k!r} is not valid JSON ({e.msg})", path, number) from None
  return row


def jsonl_rows(path: pathlib.Path) -> Iterator[tuple[int, Any]]:
  """Each non-empty line of a JSON-lines file, parsed, with its 1-based line number; a line that
  is not JSON or not UTF-8 is an error naming the file and the line."""
  with open(path, "rb") as f:
    for number, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        yield number, json.loads(line.decode("utf-8"))
      except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text ({e.reason} at byte {e.start})", path, number) from None
      except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON ({e.msg})", path, number) from None


def _glibc() -> ctypes.CDLL | None:
  try:
    library = ctypes.CDLL("libc.so.6")
    library.malloc_trim  # pylint: disable=pointless-statement
  except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
    return None
  return library


_GLIBC = _glibc()


def release_unused_memory() -> None:
  """Gives pyarrow's freed buffers back to the system: its allocator keeps them for reuse, so the
  buffers of a large table read and turned into arrays would count in the process's memory for
  the rest of its life."""
  pa.default_memory_pool().release_unused()
  if _GLIBC is not None:
    # And glibc's: freed chunks amid live ones stay in the process, a table's worth of them
    # after a table is read in batches, until malloc_trim returns their pages.
    _GLIBC.malloc_trim(0)


def read_parquet(path: pathlib.Path, columns: Sequence[str] | None = None) -> pa.Table:
  """A parquet file's rows (only `columns`, if given); a file pyarrow cannot read (truncated,
  not parquet) is an error naming it."""
  try:
    return pq.read_table(path, columns=None if columns is None else list(columns))
  except (pa.ArrowException, OSError) as e:
    raise InputError(f"cannot read as parquet: {e}", path) from None


def parquet_row_groups(path: pathlib.Path, columns: Sequence[str],
                       dictionary: Sequence[str] = ()) -> Iterator[pa.Table]:
  """A parquet file's `columns` (`dictionary` ones dictionary-encoded), a row group at a time."""
  try:
    file = pq.ParquetFile(path, read_dictionary=list(dictionary) or None)
    for group in range(file.num_row_groups):
      yield file.read_row_group(group, columns=list(columns))
  except (pa.ArrowException, OSError) as e:
    raise InputError(f"cannot read as parquet: {e}", path) from None


def parquet_columns(path: pathlib.Path) -> list[str]:
  """The names of a parquet file's columns, read from its footer alone."""
  try:
    return pq.read_schema(path).names
  except (pa.ArrowException, OSError) as e:
    raise InputError(f"cannot read as parquet: {e}", path) from None


def read_hf_table(folder: pathlib.Path) -> pa.Table:
  """A saved HF dataset's rows as an Arrow table, memory-mapped."""
  try:
    dataset = hf_datasets().load_from_disk(str(folder))
  except Exception as e:  # a damaged folder fails deep inside datasets or pyarrow
    raise InputError(f"not a readable saved HF dataset ({type(e).__name__}: {e})", folder) from None
  if not hasattr(dataset, "data"):
    raise InputError(f"a DatasetDict ({', '.join(dataset)}); name one split's folder", folder)
  return dataset.data.table


def iter_rows(path: str | os.PathLike, prefix: str, columns: Sequence[str] | None = None,
              item_ids: Collection[str] | None = None) -> Iterator[dict]:
  """Every row of table `prefix` at `path` (see `table_files`), in file order, read `BATCH_ROWS`
  at a time: a table of any size costs one batch of rows. Pairs saved as an HF dataset come back
  with `chosen` and `rejected` as text, as in the other formats. `columns`: a parquet file reads
  only those of them it has (the other formats give whole rows), so the texts a caller does not
  need are never decoded. `item_ids`: only the rows whose item_id is one of them (picked before
  a row of an Arrow batch becomes Python objects)."""
  for f in table_files(path, prefix):
    if f.is_dir():
      try:
        table = records.pairs_from_trl(read_hf_table(f))
      except ValueError as e:
        raise InputError(str(e), f) from None
      batches = _numbered(table.to_batches(BATCH_ROWS))
    elif f.suffix == ".parquet":
      batches = _parquet_batches(f, columns, item_ids)
    else:
      for number, row in jsonl_rows(f):
        row = _decode_row(row, f, number)
        if item_ids is None or _has_id(row, item_ids):
          yield row
      continue
    for first, batch in batches:
      numbers = np.arange(first, first + batch.num_rows)
      if item_ids is not None:
        picked = _with_ids(batch, item_ids)
        batch, numbers = batch.filter(pa.array(picked)), numbers[picked]
      for number, row in zip(numbers.tolist(), batch.to_pylist()):
        row = _decode_row(row, f, number)
        if item_ids is None or _has_id(row, item_ids):
          yield row


def _has_id(row: dict, item_ids: Collection[str]) -> bool:
  return isinstance(row.get("item_id"), str) and row["item_id"] in item_ids


def _numbered(batches: Iterable[pa.RecordBatch],
              first: int = 1) -> Iterator[tuple[int, pa.RecordBatch]]:
  """(number of its first row, batch) for each of `batches`, rows numbered from `first`."""
  for batch in batches:
    yield first, batch
    first += batch.num_rows


def _with_ids(batch: pa.RecordBatch | pa.Table, item_ids: Collection[str]) -> np.ndarray:
  """Which rows of `batch` may have one of `item_ids` (all, where Arrow cannot tell: no such
  column, or not text; the caller checks each row it gets). # [rows] bool"""
  names = batch.schema.names
  column = batch.column(names.index("item_id")) if "item_id" in names else None
  if column is None or not (pa.types.is_string(column.type) or pa.types.is_large_string(
      column.type)):
    return np.ones(batch.num_rows, dtype=bool)
  # As Python strings, a batch at a time: Arrow's is_in would load its compute kernels (~40 MB)
  # for a look-up this small.
  return np.fromiter((i in item_ids for i in column.to_pylist()), dtype=bool,
                     count=len(column))


def _parquet_batches(path: pathlib.Path, columns: Sequence[str] | None = None,
                     item_ids: Collection[str] | None = None
                     ) -> Iterator[tuple[int, pa.RecordBatch]]:
  """A parquet file's rows (the ones of `columns` it has, if given), `BATCH_ROWS` at a time, as
  (number of the batch's first row, batch). With `item_ids`, a row group none of whose rows has
  one of them is skipped, found from its item_id column alone. A file pyarrow cannot read
  (truncated, not parquet) is an error naming it."""
  try:
    file = pq.ParquetFile(path)
    names = file.schema_arrow.names
    if columns is not None:
      columns = [c for c in columns if c in names]
    first = 1
    for group in range(file.num_row_groups):
      start, first = first, first + file.metadata.row_group(group).num_rows
      if item_ids is not None and not _with_ids(file.read_row_group(
          group, columns=[c for c in ("item_id",) if c in names]), item_ids).any():
        continue
      yield from _numbered(file.iter_batches(BATCH_ROWS, row_groups=[group], columns=columns),
                           start)
  except (pa.ArrowException, OSError) as e:
    raise InputError(f"cannot read as parquet: {e}", path) from None


def read_rows(path: str | os.PathLike, prefix: str) -> list[dict]:
  """Every row of table `prefix` at `path`, in file order (`iter_rows`)."""
  return list(iter_rows(path, prefix))
