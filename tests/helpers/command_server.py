"""Runs `socialrm-*` commands in children forked from one interpreter that imported the package.

Tests that run many commands only to see how each ends (exit code, stderr, files) spent most of
their time importing JAX, Flax and the package again in every process. A `CommandServer` starts
one Python (`python -m tests.helpers.command_server`) that imports every library module of the
package, but neither a command module (each defines absl flags, and several define the same names)
nor a JAX backend; then, per request, it forks a child that imports the command's module and calls
its console-script entry point, `run()`, with the request's arguments, working folder and
environment, its stdout and stderr going to files. The child is a fresh process as far as flags,
backends and devices go; only imports are shared. Environment variables read when JAX is
imported (JAX_PLATFORMS) are the server's: a test that varies them runs its own process.

Protocol, one JSON object a line: the test writes {"command", "args", "cwd", "env"}; the server
answers {"returncode", "stdout", "stderr"} when the child has ended.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import pkgutil
import subprocess
import sys
import tempfile
import threading

PACKAGE = "socialrm_jax"


class CommandServer:
  """One forking server, which runs one command at a time: start one per command to run at once."""

  def __init__(self, env: dict[str, str], cwd: str):
    self._process = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.command_server"], cwd=cwd, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

  def run(self, command: str, args: list[str], cwd: str, env: dict[str, str],
          timeout: float) -> subprocess.CompletedProcess:
    """`python -m socialrm_jax.main.<command> *args`, as a forked child of the server."""
    request = dict(command=command, args=args, cwd=str(cwd), env=env)
    self._process.stdin.write(json.dumps(request) + "\n")
    self._process.stdin.flush()
    answer = _read_line_within(self._process.stdout, timeout)
    if not answer:
      raise RuntimeError(f"the command server ended without answering {command} {args}")
    done = json.loads(answer)
    return subprocess.CompletedProcess([command, *args], done["returncode"], done["stdout"],
                                       done["stderr"])

  def close(self) -> None:
    self._process.stdin.close()
    self._process.wait(timeout=60)


def _read_line_within(stream, timeout: float) -> str:
  line: list[str] = []
  reader = threading.Thread(target=lambda: line.append(stream.readline()), daemon=True)
  reader.start()
  reader.join(timeout)
  if reader.is_alive():
    raise subprocess.TimeoutExpired("command server", timeout)
  return line[0]


def _import_library() -> None:
  """Every module of the package but the commands (`main`), so that children only fork."""
  package = importlib.import_module(PACKAGE)
  for module in pkgutil.walk_packages(package.__path__, PACKAGE + "."):
    if not module.name.startswith(f"{PACKAGE}.main."):
      importlib.import_module(module.name)


def _child(request: dict, stdout: str, stderr: str) -> None:
  """In the forked child: the command as its console script runs it; never returns."""
  code = 1
  try:
    for fd, path in ((1, stdout), (2, stderr)):
      os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [f"socialrm-{request['command'].replace('_', '-')}", *request["args"]]
    importlib.import_module(f"{PACKAGE}.main.{request['command']}").run()
    code = 0
  except SystemExit as exit_:
    code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
  except BaseException:  # pylint: disable=broad-except  # reported as Python would, then exit 1
    import traceback  # pylint: disable=import-outside-toplevel
    traceback.print_exc()
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access  # not the server's loop, nor its atexit


def serve() -> None:
  _import_library()
  answers = sys.stdout
  for line in sys.stdin:
    request = json.loads(line)
    with tempfile.TemporaryDirectory() as folder:
      stdout, stderr = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
      pid = os.fork()
      if pid == 0:
        _child(request, stdout, stderr)
      _, status = os.waitpid(pid, 0)
      read = lambda path: pathlib.Path(path).read_text(encoding="utf-8", errors="replace")
      answers.write(json.dumps(dict(returncode=os.waitstatus_to_exitcode(status),
                                    stdout=read(stdout), stderr=read(stderr))) + "\n")
      answers.flush()


if __name__ == "__main__":
  serve()
