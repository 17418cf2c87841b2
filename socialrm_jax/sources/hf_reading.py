"""Reading a user's table through HF `datasets`: JSON lines, JSON, CSV and parquet files (each
also gzipped, `NAME.jsonl.gz` as HH-RLHF ships: decompressed into the temporary cache first, and
read as `NAME.jsonl`, messages naming the `.gz` file), and folders saved with
`datasets.Dataset.save_to_disk` (each split of a saved `DatasetDict` is a table of its own).

Files are loaded into HF's memory-mapped Arrow format, in a temporary cache removed afterwards,
and rows are handed out in batches: a file of ten million rows is never held in Python objects at
once. Rows are numbered from 1 as the source counts them: a JSON-lines row by its line, a CSV row
by its record after the header (blank lines not counted), a JSON, parquet or saved-dataset row by
its position.

A row that cannot be read is a malformed row (`SourceReader.bad_row`: an error naming the file
and the row, or skipped and counted under `unparsed` with `on_error="skip"`): a line that is not
UTF-8 or not a JSON object, a CSV record that is not UTF-8 or has the wrong number of fields, a
value that is not UTF-8 in any table. A file that cannot be read at all (a truncated parquet
file, a damaged folder, an empty file) is an error naming the file, whatever `on_error` says.
When HF's loader refuses a JSON-lines or CSV file, the file is read again line by line to name
the rows that made it fail; when skipping, the readable rows are written to a temporary file for
the loader, each keeping its row number.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import gzip
import json
import pathlib
import shutil
import tempfile
import zlib
from typing import Any, Iterator, Sequence

import numpy as np

from socialrm_jax.sources.reading import SourceReader
from socialrm_jax.base.errors import InputError

# File suffix -> HF loader.
LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
GZIP = ".gz"  # a file of one of LOADERS' kinds, gzipped
UNPARSED = "unparsed"  # the subset unreadable rows are counted under: theirs cannot be read
BATCH_ROWS = 4096


@dataclasses.dataclass
class Table:
  """One table of a source: its rows in HF's Arrow format, and their row numbers."""
  path: pathlib.Path  # the file or folder, for messages
  split: str | None  # a saved DatasetDict's split name
  dataset: Any  # datasets.Dataset, memory-mapped
  numbers: np.ndarray | None = None  # [rows] each row's number in the source; None: position + 1
  suffix: str | None = None  # a file's kind (a LOADERS key; `.jsonl` for `x.jsonl.gz`)

  @property
  def columns(self) -> list[str]:
    return list(self.dataset.column_names)

  def number(self, index: int) -> int:
    return int(self.numbers[index]) if self.numbers is not None else index + 1

  def rows(self, reader: SourceReader, columns: Sequence[str]) -> Iterator[tuple[int, dict]]:
    """(row number, {column: value}) for each row, in order, `columns` only. A row holding a
    value that is not UTF-8 is counted as read and bad (under `UNPARSED`); the caller counts the
    rows it is given."""
    dataset = self.dataset.select_columns(list(columns))
    for start in range(0, len(dataset), BATCH_ROWS):
      stop = min(start + BATCH_ROWS, len(dataset))
      try:
        batch = dataset[start:stop]
        rows = [{c: batch[c][k] for c in columns} for k in range(stop - start)]
      except UnicodeDecodeError:
        rows = [self._decoded(reader, dataset, i) for i in range(start, stop)]
      for k, row in enumerate(rows):
        if row is not None:
          yield self.number(start + k), row

  def _decoded(self, reader: SourceReader, dataset, index: int) -> dict | None:
    try:
      return dataset[index]
    except UnicodeDecodeError as e:
      reader.count_row(UNPARSED)
      reader.bad_row(self.path, self.number(index),
                     f"a value is not UTF-8 text ({e.reason} at byte {e.start})", UNPARSED)
      return None


def _hf():
  from socialrm_jax.base import tables  # its quiet import of HF datasets
  return tables.hf_datasets()


def _first_line(error: BaseException) -> str:
  cause = error.__cause__ or error
  text = str(cause).strip().splitlines()
  return f"{type(cause).__name__}: {text[0] if text else ''}"


def _saved_tables(path: pathlib.Path) -> list[Table]:
  try:
    saved = _hf().load_from_disk(str(path))
  except Exception as e:  # a folder that is not, or no longer, a saved dataset
    raise InputError("not a folder saved with datasets' save_to_disk, or a damaged one "
                     f"({_first_line(e)})", path) from None
  if hasattr(saved, "column_names") and isinstance(saved.column_names, dict):  # a DatasetDict
    return [Table(path / split, split, saved[split]) for split in saved]
  return [Table(path, None, saved)]


def _line_numbers(path: pathlib.Path, n_rows: int) -> np.ndarray | None:
  """Each row's line in a JSON-lines file the loader read whole: None when rows are lines one for
  one (no blank lines), else the numbers of the non-blank lines."""
  lines, last = 0, b"\n"
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 22), b""):
      lines += block.count(b"\n")
      last = block[-1:]
  lines += last != b"\n"
  if lines == n_rows:
    return None
  with open(path, "rb") as f:
    numbers = np.fromiter((n for n, line in enumerate(f, start=1) if line.strip()), np.int64)
  return numbers if len(numbers) == n_rows else None


def _jsonl_rows(lines: Iterator[bytes]) -> Iterator[tuple[int, str | None, bytes]]:
  """(line number, what is wrong or None, line) for each non-blank line."""
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      row = json.loads(line.decode("utf-8"))
      problem = None if isinstance(row, dict) else (
          f"expected a JSON object, got {type(row).__name__}")
    except UnicodeDecodeError as e:
      problem = f"not UTF-8 text ({e.reason} at byte {e.start} of the line)"
    except json.JSONDecodeError as e:
      problem = f"broken JSON line ({e.msg})"
    yield number, problem, line.rstrip(b"\r\n") + b"\n"


def _csv_rows(records: Iterator[list[str]],
              header: list[str]) -> Iterator[tuple[int, str | None, list[str]]]:
  """(record number, what is wrong or None, fields) for each non-blank record after the header,
  read with errors="surrogateescape"."""
  number = 0
  for fields in records:
    if not fields:
      continue
    number += 1
    problem = None
    if _undecoded(fields):
      problem = "not UTF-8 text"
    elif len(fields) != len(header):
      problem = f"expected {len(header)} fields ({','.join(header)}), got {len(fields)}"
    yield number, problem, fields


def _csv_header(source: pathlib.Path, path: pathlib.Path) -> list[str]:
  """The header of CSV file `source` (`path` itself, or its decompressed copy: messages name
  `path`)."""
  with open(source, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
    header = next(csv.reader(f), None)
  if not header:
    raise InputError("empty file (no header row)", path)
  if _undecoded(header):
    raise InputError("the header row is not UTF-8 text", path)
  return header


def _undecoded(fields: Sequence[str]) -> bool:
  """Whether text read with errors="surrogateescape" held bytes that are not UTF-8."""
  return any("\udc80" <= ch <= "\udcff" for field in fields for ch in field)


def _salvaged(reader: SourceReader, path: pathlib.Path, readable: pathlib.Path,
              target: pathlib.Path, refusal: BaseException) -> np.ndarray:
  """After the loader refused a JSON-lines or CSV file (`path`, read from `readable`): names each
  unreadable row (a bad row), copies the readable ones to `target` and returns their row
  numbers."""
  numbers, bad = [], 0
  if readable.suffix.lower() == ".jsonl":
    source, out = open(readable, "rb"), open(target, "wb")
    rows, write = _jsonl_rows(source), out.write
  else:
    source = open(readable, encoding="utf-8-sig", errors="surrogateescape", newline="")
    out = open(target, "w", encoding="utf-8", newline="")
    records, writer = csv.reader(source), csv.writer(out)
    header = next(records)
    writer.writerow(header)
    rows, write = _csv_rows(records, header), writer.writerow
  with source, out:
    for number, problem, row in rows:
      if problem:
        bad += 1
        reader.count_row(UNPARSED)
        reader.bad_row(path, number, problem, UNPARSED)
      else:
        write(row)
        numbers.append(number)
  if not bad:
    raise InputError(f"HF's loader refused it ({_first_line(refusal)}), though every row reads",
                     path)
  return np.asarray(numbers, dtype=np.int64)


def _load(loader: str, source: pathlib.Path, path: pathlib.Path, cache: pathlib.Path) -> Any:
  """HF's `loader` on file `source` (`path`, or its decompressed copy)."""
  options: dict[str, Any] = {}
  if loader == "csv":  # every field as text: no numbers guessed, no empty field made NaN
    hf = _hf()
    options = {"keep_default_na": False, "features": hf.Features(
        {name: hf.Value("string") for name in _csv_header(source, path)})}
  return _hf().load_dataset(loader, data_files=str(source), split="train", cache_dir=str(cache),
                            **options)


def _kind(path: pathlib.Path) -> str:
  """The file's kind, a LOADERS key: its suffix, or the one before `.gz`."""
  suffixes = [s.lower() for s in path.suffixes]
  if suffixes[-1:] == [GZIP]:
    return suffixes[-2] if len(suffixes) > 1 else GZIP
  return suffixes[-1] if suffixes else ""


def _gunzipped(path: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
  """`path` decompressed into `target`; a file that is not gzip, or is cut short, is an error."""
  try:
    with gzip.open(path, "rb") as source, open(target, "wb") as out:
      shutil.copyfileobj(source, out, 1 << 22)
  except (OSError, EOFError, zlib.error) as e:
    raise InputError(f"not a readable gzip file ({e})", path) from None
  return target


def _file_table(reader: SourceReader, path: pathlib.Path, cache: pathlib.Path) -> Table:
  kind = _kind(path)
  loader = LOADERS.get(kind)
  if loader is None:
    raise InputError(f"cannot read a {''.join(path.suffixes) or 'suffix-less'} file; give a "
                     f"{', '.join(LOADERS)} file (or one gzipped: {GZIP}) or a folder saved with "
                     "save_to_disk", path)
  if path.stat().st_size == 0:
    raise InputError("empty file", path)
  readable = _gunzipped(path, cache / f"gunzipped{kind}") if path.suffix.lower() == GZIP else path
  if readable.stat().st_size == 0:
    raise InputError("empty file (once decompressed)", path)
  try:
    dataset = _load(loader, readable, path, cache / "loaded")
  except InputError:
    raise
  except Exception as refusal:  # the loaders fail with errors of many kinds
    if kind not in (".jsonl", ".csv"):
      raise InputError(f"cannot be read as {kind[1:]} ({_first_line(refusal)})",
                       path) from None
    target = cache / f"readable{kind}"
    numbers = _salvaged(reader, path, readable, target, refusal)
    try:
      return Table(path, None, _load(loader, target, path, cache / "salvaged"), numbers, kind)
    except Exception as e:
      raise InputError(f"cannot be read even without its unreadable rows ({_first_line(e)})",
                       path) from None
  numbers = _line_numbers(readable, len(dataset)) if kind == ".jsonl" else None
  return Table(path, None, dataset, numbers, kind)


@contextlib.contextmanager
def open_tables(reader: SourceReader) -> Iterator[list[Table]]:
  """The tables of the reader's source (a file, or a saved dataset folder), readable inside the
  block; the loader's cache is removed after it."""
  with tempfile.TemporaryDirectory(prefix="socialrm-hf-") as cache:
    if reader.source.is_dir():
      yield _saved_tables(reader.source)
    else:
      yield [_file_table(reader, reader.source, pathlib.Path(cache))]
