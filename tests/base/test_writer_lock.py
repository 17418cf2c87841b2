"""One writer per output folder (base/writer_lock.py): a second writer, in another process, is
refused at once naming the holder's host and pid; a lock whose holder was killed (kill -9) is
taken over."""

import os
import signal
import socket
import subprocess
import sys

import pytest

from socialrm_jax.base.errors import InputError
from socialrm_jax.base.writer_lock import WriterLock
from tests.helpers.paths import REPO_ROOT

# Takes the lock of the folder in argv[1], says so, and holds it until killed.
HOLD = """
import sys, time
from socialrm_jax.base.writer_lock import WriterLock
lock = WriterLock(sys.argv[1], ".test.lock", "test run")
print("held", flush=True)
time.sleep(600)
"""


def test_a_live_holder_is_named_and_a_killed_ones_lock_taken_over(tmp_path):
  env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
  holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(InputError) as refused:
      WriterLock(tmp_path, ".test.lock", "test run")
    assert str(refused.value) == (
        f"{tmp_path}: another test run (host {socket.gethostname()} pid {holder.pid}) is "
        "writing into this folder; wait for it or use another --output_dir")
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  # The killed run's file is still there, naming it; the kernel dropped its lock with it.
  assert (tmp_path / ".test.lock").read_text() == (
      f"host {socket.gethostname()} pid {holder.pid}\n")
  with WriterLock(tmp_path, ".test.lock", "test run"):
    assert (tmp_path / ".test.lock").read_text() == (
        f"host {socket.gethostname()} pid {os.getpid()}\n")
    with pytest.raises(InputError, match=f"pid {os.getpid()}"):  # one writer in-process too
      WriterLock(tmp_path, ".test.lock", "test run")
  WriterLock(tmp_path, ".test.lock", "test run").close()  # free once closed
