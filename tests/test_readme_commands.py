"""Every command README.md (and a feature's page, docs/*.md) shows runs (`--help` at least), with the flags it shows, and so do the
Makefile's: a moved module or script leaves no dead path behind.

The commands are the README's ```bash blocks (continuation lines joined, comments and shell
variable assignments dropped) and the Makefile's `$(PY) -m` recipes. Each program runs once with
`--help`, and its help must list every flag the README passes it; a path given as a flag value
under the repository (`configs/...`, `socialrm_jax/bundled`) must exist; `make X` needs a target X.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

import command_help

REPO = command_help.REPO


def tracked_top_folders() -> set[str]:
  """The top-level folders git tracks. Not what the checkout holds: `runs/`, where the README's
  commands write, exists once the demo has run, and its paths are outputs, not the repository's."""
  listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout
  return {line.split("/")[0] for line in listed.splitlines() if "/" in line}


TOP = tracked_top_folders()


def bash_commands(markdown: str) -> list[str]:
  """The command lines of the ```bash blocks: continuations joined, comments dropped."""
  out = []
  for block in re.findall(r"^```bash\n(.*?)^```", markdown, re.M | re.S):
    for line in block.replace("\\\n", " ").splitlines():
      line = re.sub(r"(^|\s)#.*", "", line).strip()
      if line and not re.fullmatch(r"\w+=(\"[^\"]*\"|\S*)", line):
        out.append(line)
  return out


def makefile_commands(makefile: str) -> list[str]:
  return [re.sub(r"\$\(PY\)", "python", line.strip())
          for line in makefile.splitlines() if re.match(r"\t\$\(PY\) -m socialrm_jax", line)]


def program(command: str) -> tuple[list[str], list[str]]:
  """(the argv that runs the program with `--help`, the words after the program)."""
  words = shlex.split(command)
  while words and (words[0] == "time" or re.fullmatch(r"\w+=\S*", words[0])):
    words = words[1:]
  scripts = command_help.console_scripts()
  if words[0] in ("python", "python3", ".venv/bin/python") and words[1] == "-m":
    return [sys.executable, "-m", words[2], "--help"], words[3:]
  if words[0] in ("python", "python3", ".venv/bin/python") and words[1].endswith(".py"):
    return [sys.executable, words[1], "--help"], words[2:]
  if words[0] in scripts:
    return [sys.executable, "-m", scripts[words[0]].split(":")[0], "--help"], words[1:]
  raise AssertionError(f"a command of a form this test does not know: {command}")


def module_file(module: str):
  """The file `python -m module` runs, in this checkout."""
  path = REPO.joinpath(*module.split("."))
  return path / "__main__.py" if path.is_dir() else path.with_suffix(".py")


def flags_and_paths(args: list[str]) -> tuple[set[str], set[str]]:
  """The flag names (`--config.templates` is `config`) and repository paths among `args`."""
  names, paths = set(), set()
  for arg in args:
    arg = arg.strip("[]")
    if not arg.startswith("--"):
      continue
    name, _, value = arg[2:].partition("=")
    names.add(name.split(".")[0])
    path = value.split(":")[0].split(",")[0]
    if path.split("/")[0] in TOP:
      paths.add(path)
  return names, paths


def commands() -> list[str]:
  pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # each feature's own page
  return ([c for page in pages for c in bash_commands(page.read_text(encoding="utf-8"))] +
          makefile_commands((REPO / "Makefile").read_text(encoding="utf-8")))


def test_the_readme_is_read_whole():
  found = commands()
  assert len(found) >= 20, found
  assert any("socialrm_jax.main.audit" in c for c in found)  # the Makefile's demo
  with pytest.raises(AssertionError, match="does not know"):
    program("curl https://example.com")
  assert bash_commands("```bash\n# a comment\nP=\"--a=1\"\nx --b=2 \\\n  --c=3  # note\n```\n") == [
      "x --b=2    --c=3"]


def test_every_command_the_readme_shows_runs_with_the_flags_it_shows():
  wanted: dict[tuple[str, ...], set[str]] = {}
  problems = []
  makefile = (REPO / "Makefile").read_text(encoding="utf-8")
  for command in commands():
    if command.startswith("make "):
      target = command.split()[1]
      if not re.search(rf"^{re.escape(target)}:", makefile, re.M):
        problems.append(f"{command}: the Makefile has no target {target}")
      continue
    argv, args = program(command)
    if argv[1:3] == ["-m", "pytest"]:  # a test run the README shows: its test files must exist
      problems += [f"{command}: no {a}" for a in args
                   if a.startswith("tests/") and not (REPO / a.split("::")[0]).is_file()]
      continue
    if argv[1].endswith(".py") and not (REPO / argv[1]).is_file():
      problems.append(f"{command}: no file {argv[1]}")
      continue
    # The module must be this checkout's: an installed copy elsewhere (an editable install of
    # another checkout) could still answer for a path this one has moved.
    if argv[1] == "-m" and not module_file(argv[2]).is_file():
      problems.append(f"{command}: no module {argv[2]} in this checkout")
      continue
    names, paths = flags_and_paths(args)
    problems += [f"{command}: no {p}" for p in sorted(paths) if not (REPO / p).exists()]
    wanted.setdefault(tuple(argv), set()).update(names)
  results = command_help.run_all([list(argv) for argv in wanted])
  for (argv, names), done in zip(wanted.items(), results):
    shown = command_help.listed_flags(done.stdout)
    if not shown:
      problems.append(f"{' '.join(argv[1:])}: --help lists no flag:\n{done.stderr[-1500:]}")
    elif names - shown:
      problems.append(f"{' '.join(argv[1:])}: --help does not list {sorted(names - shown)}")
  assert not problems, "\n".join(problems)
