"""Finding a dataset's original files and reading their rows, with counting and clear errors.

Every adapter reads through a `SourceReader`: it finds files by their original names at any depth
under the dataset's folder (`<data_dir>/<dataset>/`), yields rows with their 1-based row numbers,
and keeps the counts the conversion report needs (rows read, drops by reason, per subset). A
malformed row either stops the conversion with an `InputError` naming the file and the row
(`on_error="raise"`, the default) or is skipped and counted as `malformed_row`
(`on_error="skip"`). (A path source, `hf_reading`, reads its file through HF `datasets` and
reports its rows through the same reader.)
"""

from __future__ import annotations

import collections
import csv
import gzip
import json
import pathlib
from typing import Any, Iterator, Mapping

from socialrm_jax.base.errors import InputError
from socialrm_jax.base.templates import PromptTemplate

ON_ERROR = ("raise", "skip")
MALFORMED = "malformed_row"
_MAX_ERRORS_KEPT = 20  # messages of skipped rows kept in the report; all are counted


class SourceReader:
  """One dataset's reading session: file discovery, row iteration and accounting."""

  def __init__(self, name: str, source: pathlib.Path, template: PromptTemplate,
               on_error: str = "raise", options: Mapping[str, Any] | None = None):
    """`name` names the items (`dataset`); `source` is the dataset's folder, or the file or folder
    a path spec names; `template` the prompt template (one of the adapter's); `options` the
    spec's options."""
    if on_error not in ON_ERROR:
      raise InputError(f"on_error must be one of {ON_ERROR}, not {on_error!r}")
    self.name = name
    self.source = source
    self.on_error = on_error
    self.template = template
    self.options = dict(options or {})
    self.rows_read: collections.Counter[str] = collections.Counter()
    self.drops: collections.Counter[tuple[str, str]] = collections.Counter()
    self.errors: list[str] = []
    self.details: dict[str, Any] = {}  # what the adapter found, for the report (tables, layout)

  # -- files ---------------------------------------------------------------------------------

  def find(self, pattern: str, *, required: bool = True) -> list[pathlib.Path]:
    """Files under the dataset folder, at any depth, whose name matches `pattern` (a glob),
    sorted by their path relative to the folder so the order never depends on the file system."""
    found = sorted((p for p in self.source.rglob(pattern) if p.is_file()),
                   key=lambda p: p.relative_to(self.source).as_posix())
    if required and not found:
      raise InputError(f"no file named {pattern!r} found at any depth", self.source)
    return found

  # -- accounting ----------------------------------------------------------------------------

  def count_row(self, subset: str, n: int = 1) -> None:
    self.rows_read[subset] += n

  def drop(self, subset: str, reason: str, n: int = 1) -> None:
    self.drops[(subset, reason)] += n

  def bad_row(self, path: pathlib.Path, row: int | None, message: str, subset: str) -> None:
    """A malformed row: raise, or count it as skipped (with its message kept for the report)."""
    error = InputError(message, path, row)
    if self.on_error == "raise":
      raise error
    self.drop(subset, MALFORMED)
    if len(self.errors) < _MAX_ERRORS_KEPT:
      self.errors.append(str(error))

  # -- rows ----------------------------------------------------------------------------------

  def _lines(self, path: pathlib.Path) -> Iterator[str]:
    """The file's lines as text, read as they are needed, so a large file is never held whole
    (a gzip file by its suffix; a leading BOM, as Excel writes, is no text). Bytes that are not
    UTF-8, a gzip file that cannot be read, or a file with no text are an InputError naming the
    file (and the line)."""
    is_gzip = path.suffix == ".gz"
    has_text = False
    with (gzip.open(path, "rb") if is_gzip else open(path, "rb")) as f:
      try:
        for number, raw in enumerate(f, start=1):
          try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
          except UnicodeDecodeError as e:
            raise InputError(f"not UTF-8 text (byte {e.start} of the line)", path,
                             number) from None
          has_text = has_text or not line.isspace()
          yield line
      except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        if not is_gzip:
          raise
        raise InputError(f"not a readable gzip file ({e})", path) from None
    if not has_text:
      raise InputError("empty file", path)

  def jsonl_rows(self, path: pathlib.Path, subset: str, *,
                 count: bool = True) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; broken JSON and non-objects are bad rows.
    Every line read is counted in `subset`'s rows, bad ones included. With `count=False` only
    the bad ones are: the caller counts each yielded row under the subset it reads from it."""
    for number, line in enumerate(self._lines(path), start=1):
      if not line.strip():
        continue
      if count:
        self.count_row(subset)
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        self._unreadable(path, number, f"broken JSON line ({e.msg})", subset, count)
        continue
      if not isinstance(row, dict):
        self._unreadable(path, number, f"expected a JSON object, got {type(row).__name__}",
                         subset, count)
        continue
      yield number, row

  def _unreadable(self, path: pathlib.Path, number: int, message: str, subset: str,
                  counted: bool) -> None:
    """A row that could not be parsed: counted as read (if the reader has not yet) and bad."""
    if not counted:
      self.count_row(subset)
    self.bad_row(path, number, message, subset)

  def csv_rows(self, path: pathlib.Path, subset: str, *, columns: list[str] | None = None,
               required: list[str] = (), count: bool = True
               ) -> Iterator[tuple[int, dict[str, str]]]:
    """(row number, row) for each data row (1-based, the header not counted). With `columns`,
    the file has no header and its fields get these names; else the header names them. A row
    with the wrong number of fields is a bad row. A header lacking a `required` column is an error
    before any row is read. Rows are counted as `jsonl_rows` counts them."""
    reader = csv.reader(self._lines(path))
    header = columns
    if header is None:
      header = next(reader, None)
      if not header:
        raise InputError("empty file (no header row)", path)
      self.check_columns(path, header, list(required))
    for number, fields in enumerate(reader, start=1):
      if not fields:
        continue
      if count:
        self.count_row(subset)
      if len(fields) != len(header):
        self._unreadable(path, number,
                         f"expected {len(header)} fields ({','.join(header)}), got {len(fields)}",
                         subset, count)
        continue
      yield number, dict(zip(header, fields))

  def check_columns(self, path: pathlib.Path, header: list[str], required: list[str]) -> None:
    missing = [c for c in required if c not in header]
    if missing:
      raise InputError(f"missing column(s) {', '.join(missing)}; found {', '.join(header)}", path)

  def fields(self, path: pathlib.Path, number: int, row: dict[str, Any], subset: str,
             **types: type | tuple[type, ...]) -> bool:
    """Checks that `row` has each named field with the given type(s); a bad row otherwise.
    Returns whether the row may be used."""
    for name, kind in types.items():
      if name not in row:
        self.bad_row(path, number, f"missing field {name!r}", subset)
        return False
      value = row[name]
      if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        self.bad_row(path, number,
                     f"field {name!r} should be {names}, got {type(value).__name__} {value!r:.40}",
                     subset)
        return False
    return True

  def int_field(self, path: pathlib.Path, number: int, value: str, name: str, subset: str,
                allowed: tuple[int, ...] = (0, 1)) -> int | None:
    """Parses a CSV/JSON label such as "1"; a bad row (None) if it is not one of `allowed`."""
    try:
      parsed = int(value)
    except (TypeError, ValueError):
      parsed = None
    if parsed not in allowed:
      self.bad_row(path, number, f"field {name!r} should be one of {allowed}, got {value!r:.40}",
                   subset)
      return None
    return parsed
