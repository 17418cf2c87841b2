"""`make test` on a machine without chromium (tools/need_chromium.sh, the Makefile's first step):
it installs chromium with apt-get where it may (root, or sudo without a password), and otherwise
stops with the one line to run before it installs or runs anything.

Each case runs the real script, and `make test` itself, with PATH holding only a few programs and
fakes of `id`, `sudo`, `apt-get` and `chromium` that record how they were called: the machine's
own chromium (if any) and package manager are never reached.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest
from tests.helpers.paths import REPO_ROOT

REPO = REPO_ROOT
SCRIPT = REPO / "tools" / "need_chromium.sh"
REAL = ("sh", "env", "chmod", "make", "true")


def fake(bin_dir: pathlib.Path, name: str, body: str) -> None:
  path = bin_dir / name
  path.write_text("#!/bin/sh\n" + body)
  path.chmod(0o755)


@pytest.fixture
def machine(tmp_path):
  """A PATH of a few real programs; `log` records the fakes' calls. Not root unless told."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for name in REAL:
    found = shutil.which(name)
    if found is None:
      pytest.fail(f"{name} is not installed")
    (bin_dir / name).symlink_to(found)
  log = tmp_path / "calls.log"
  log.touch()
  fake(bin_dir, "id", 'echo "${FAKE_UID:-1000}"\n')
  env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "LOG": str(log), "BIN": str(bin_dir)}
  return bin_dir, log, env


def apt_get_that_installs(bin_dir: pathlib.Path) -> None:
  fake(bin_dir, "apt-get", 'echo "apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> "$LOG"\n'
       'if [ "$1" = install ]; then printf "#!/bin/sh\\n" > "$BIN/chromium"; '
       'chmod +x "$BIN/chromium"; fi\n')


def run(env: dict, *command: str, cwd: pathlib.Path = REPO) -> subprocess.CompletedProcess:
  return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_chromium_on_path_is_enough(machine):
  bin_dir, log, env = machine
  fake(bin_dir, "chromium", "")
  apt_get_that_installs(bin_dir)
  done = run(env, "sh", str(SCRIPT))
  assert done.returncode == 0 and not done.stderr, done.stderr
  assert log.read_text() == ""


def test_as_root_it_installs_debian_chromium(machine):
  bin_dir, log, env = machine
  apt_get_that_installs(bin_dir)
  done = run({**env, "FAKE_UID": "0"}, "sh", str(SCRIPT))
  assert done.returncode == 0, done.stderr
  assert log.read_text().splitlines() == [
      "apt-get update -q DEBIAN_FRONTEND=noninteractive",
      "apt-get install -y -q chromium DEBIAN_FRONTEND=noninteractive"]


def test_with_sudo_that_asks_no_password_it_installs_through_sudo(machine):
  bin_dir, log, env = machine
  apt_get_that_installs(bin_dir)
  fake(bin_dir, "sudo", 'echo "sudo $*" >> "$LOG"\n[ "$1" = -n ] && shift\nexec "$@"\n')
  done = run(env, "sh", str(SCRIPT))
  assert done.returncode == 0, done.stderr
  calls = log.read_text().splitlines()
  assert calls[0] == "sudo -n true"
  assert "apt-get install -y -q chromium DEBIAN_FRONTEND=noninteractive" in calls
  assert any(c.startswith("sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install") for c in calls)


@pytest.mark.parametrize("sudo", ["none", "asks a password"])
def test_without_root_it_says_the_one_step_and_make_test_stops_before_installing(
    machine, tmp_path, sudo):
  bin_dir, log, env = machine
  apt_get_that_installs(bin_dir)
  if sudo == "asks a password":
    fake(bin_dir, "sudo", 'echo "sudo $*" >> "$LOG"\nexit 1\n')
  done = run(env, "sh", str(SCRIPT))
  assert done.returncode == 2
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1 and "sudo apt-get install -y chromium" in lines[0], done.stderr
  assert "apt-get" not in log.read_text()  # nothing was installed
  # `make test` in a copy of the repository's Makefile and script: the same line, exit non-zero,
  # and no .venv made (the stamps' rules never ran).
  checkout = tmp_path / "checkout"
  (checkout / "tools").mkdir(parents=True)
  shutil.copy(REPO / "Makefile", checkout)
  shutil.copy(REPO / "pyproject.toml", checkout)
  shutil.copy(SCRIPT, checkout / "tools")
  fake(bin_dir, "python3", 'echo "python3 $*" >> "$LOG"\nexit 1\n')
  made = run(env, "make", "test", cwd=checkout)
  assert made.returncode != 0
  assert lines[0] in made.stderr, made.stderr
  assert not (checkout / ".venv").exists()
  assert "python3" not in log.read_text()


def test_the_make_test_recipe_checks_the_browser_first():
  """`make -n test` lists the browser step before any install or test run."""
  # Not as a sub-make of the `make test` that may be running this test: its MAKELEVEL and flags
  # would add "Entering directory" lines.
  env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
  done = subprocess.run(["make", "--no-print-directory", "-n", "test"], cwd=REPO,
                        capture_output=True, text=True, timeout=60, env=env)
  assert done.returncode == 0, done.stderr
  steps = done.stdout.splitlines()
  assert steps[0] == "sh tools/need_chromium.sh", steps
  assert (REPO / ".ci" / "run").read_text().strip().endswith("make test")
