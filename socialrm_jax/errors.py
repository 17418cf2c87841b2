"""Errors a user can act on: each names the file and the row it is about."""

from __future__ import annotations

import os


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
