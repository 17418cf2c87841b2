"""One writer per output folder: a lock file a run holds (flock) for as long as it writes there.

`WriterLock(folder, name, run)` takes `folder/name` or refuses at once, in one line naming the
process that holds it (host and pid, which the holder writes into the file). The kernel drops the
lock of a process that ends, however it ends (kill -9 too), so the file a killed run leaves is no
lock at all: the next run takes it over and writes its own host and pid into it. Scoring holds one
per writer (`.writer-<n>.lock`), training one per run folder (`.train.lock`).
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import socket

from socialrm_jax.base.errors import InputError


class WriterLock:
  """`folder/name`, held by this process until `close()` (or its end)."""

  def __init__(self, folder: str | os.PathLike, name: str, run: str):
    """`run` says what the holder is, for the refusal: 'scoring run', 'training run'."""
    folder = pathlib.Path(folder)
    self.path = folder / name
    self.file = open(self.path, "a+")  # pylint: disable=consider-using-with  # held until close
    try:
      fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      self.file.seek(0)
      holder = self.file.read().strip() or "another process"
      self.file.close()
      raise InputError(f"another {run} ({holder}) is writing into this folder; wait for it or "
                       "use another --output_dir", folder) from None
    self.file.seek(0)
    self.file.truncate()
    self.file.write(f"host {socket.gethostname()} pid {os.getpid()}\n")
    self.file.flush()

  def close(self) -> None:
    if not self.file.closed:
      fcntl.flock(self.file, fcntl.LOCK_UN)
      self.file.close()

  def __enter__(self) -> "WriterLock":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()
