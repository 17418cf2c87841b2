"""Errors a user can act on.

`InputError` is bad input: each names the file (and the row) or the flag it is about. Every
`socialrm-*` command runs its main under `main.command.run_command`, which turns an `InputError`
(and a flag the parser refuses) into one line on stderr, `socialrm-<command>: error: <what>`, and
exit code 2. Only the errors a user causes are raised as `InputError`, where they are found, so
any other exception is a bug and keeps its traceback; `--debug` shows the traceback of an
`InputError` too.
"""

from __future__ import annotations

import os
import pathlib
import re

# The exit code of an error the user can fix (argparse's, for a bad command line).
USER_ERROR_EXIT_CODE = 2
# What Python prints before a traceback; a message holding one is cut to its last line.
_TRACEBACK_HEADER = "Traceback (most recent call last):"


class InputError(ValueError):
  """Bad input: a malformed row, a missing file or folder, an unknown name.

  The message always says where (file and 1-based row number when there is one), so the command
  line can print it as one line and exit non-zero.
  """

  def __init__(self, message: str, path: str | os.PathLike | None = None, row: int | None = None):
    self.path = None if path is None else str(path)
    self.row = row
    self.reason = message
    where = ""
    if self.path is not None:
      where = self.path if row is None else f"{self.path}, row {row}"
      where += ": "
    super().__init__(where + message)


def check_output_folder(path: str | os.PathLike, flag: str) -> None:
  """Refuses an output folder that could not be made or written: one that names an existing file,
  or lies under one, or under a folder this user cannot write."""
  if not str(path):
    raise InputError(f"--{flag} is empty; give a folder")
  path = pathlib.Path(os.path.abspath(path))
  existing = next(p for p in (path, *path.parents) if p.exists())
  if not existing.is_dir():
    where = "names a file" if existing == path else f"lies under a file, {existing}"
    raise InputError(f"--{flag} {where}; it must be a folder (new or existing)", path)
  if not os.access(existing, os.W_OK | os.X_OK):
    raise InputError(f"--{flag}: cannot write into {existing} (permission denied)", path)


def check_exists(path: str | os.PathLike, flag: str) -> None:
  """Refuses an input path that is not there, naming its flag."""
  if not str(path):
    raise InputError(f"--{flag} is empty; give a file or folder")
  if not os.path.exists(path):
    raise InputError(f"--{flag}: no such file or folder", path)


def check_positive(value: int, flag: str) -> None:
  if value <= 0:
    raise InputError(f"--{flag} must be positive, got {value}")


def one_line(message: str) -> str:
  """`message` on one line: an embedded traceback (as config files' loaders put in theirs)
  reduced to its last line, which says what went wrong, and line breaks made spaces."""
  head, _, traceback = message.partition(_TRACEBACK_HEADER)
  if traceback.strip():
    head = f"{head.rstrip()} {traceback.strip().splitlines()[-1]}"
  return re.sub(r"\s*\n\s*", " ", head.strip())
