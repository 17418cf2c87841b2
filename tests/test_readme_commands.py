"""Every command README.md and the docs/ pages show runs (`--help` at least), with the flags they
show, and so do the Makefile's: a moved module or script leaves no dead path behind.

The commands are the ```bash blocks of README.md and of every docs/*.md page (continuation lines
joined, comments and shell variable assignments dropped) and the Makefile's `$(PY) -m` recipes.
Each program runs once with `--help`, and its help must list every flag the pages pass it; a path
given as a flag value under the repository (`configs/...`, `socialrm_jax/bundled`) must exist;
`make X` needs a target X; a `pip install` line may name only extras that exist (the project's in
pyproject.toml, JAX's in its installed metadata) and JAX versions pyproject allows.

The ```python blocks of docs/python_api.md run too, in order in one namespace, with a tiny random
Llama in place of the page's `MODEL`, and its audit's metrics.json must equal the one the page's
command line writes for the same model and inputs.
"""

from __future__ import annotations

import importlib.metadata
import json
import pathlib
import re
import shlex
import subprocess
import sys
import tomllib

import pytest

from tests.helpers import command_help

REPO = command_help.REPO
# absl's own flags, which every command takes and --help does not list among the command's.
ABSL_OWN_FLAGS = {"help", "helpfull", "helpshort"}
PYTHONS = ("python", "python3", ".venv/bin/python")
PIPS = ("pip", "pip3", ".venv/bin/pip")


def tracked_top_folders() -> set[str]:
  """The top-level folders git tracks. Not what the checkout holds: `runs/`, where the README's
  commands write, exists once the demo has run, and its paths are outputs, not the repository's."""
  listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout
  return {line.split("/")[0] for line in listed.splitlines() if "/" in line}


TOP = tracked_top_folders()


def pages(repo: pathlib.Path = REPO) -> list[pathlib.Path]:
  """README.md and every docs/ page: the documents whose commands users run."""
  return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


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


# Launchers that take a socialrm command's name, then its flags (docs/multihost.md).
LAUNCHERS = ("launch/slurm.sbatch", "launch/tpu_pod.sh")


def program(command: str) -> tuple[list[str], list[str]]:
  """(the argv that runs the program with `--help`, the words after the program)."""
  words = shlex.split(command)
  while words and (words[0] == "time" or re.fullmatch(r"\w+=\S*", words[0])
                   or words[0] == "taskset"):
    # `taskset -c CPUS` pins the command that follows it to cores.
    words = words[3:] if words[0] == "taskset" else words[1:]
  scripts = command_help.console_scripts()
  if words[0] == "sbatch":  # sbatch's own options, then the launcher
    words = words[1:]
    while words and words[0].startswith("-"):
      words = words[1:]
  if words[0] in LAUNCHERS:  # the launcher runs `python -m socialrm_jax.main.<command>` per host
    assert (REPO / words[0]).is_file(), f"no launcher {words[0]}: {command}"
    return [sys.executable, "-m", f"socialrm_jax.main.{words[1]}", "--help"], words[2:]
  if words[0] in PYTHONS and words[1] == "launch/local.py" and "--" in words:
    return program(shlex.join(words[words.index("--") + 1:]))  # what each process runs
  if words[0] in PYTHONS and words[1] == "-m":
    return [sys.executable, "-m", words[2], "--help"], words[3:]
  if words[0] in PYTHONS and words[1].endswith(".py"):
    return [sys.executable, words[1], "--help"], words[2:]
  if words[0] in scripts:
    return [sys.executable, "-m", scripts[words[0]].split(":")[0], "--help"], words[1:]
  raise AssertionError(f"a command of a form this test does not know: {command}")


def module_file(module: str, repo: pathlib.Path = REPO) -> pathlib.Path:
  """The file `python -m module` runs, in this checkout."""
  path = repo.joinpath(*module.split("."))
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


def makefile_pins() -> set[str]:
  """The packages the Makefile installs pinned, without their dependencies (`NAME==VERSION`)."""
  makefile = (REPO / "Makefile").read_text(encoding="utf-8")
  return {word for line in re.findall(r"^\w+_PACKAGES\s*:=(.*)$", makefile, re.M)
          for word in line.split()}


def pip_install_problems(command: str, words: list[str]) -> list[str]:
  """A `pip install` line: `.[extra]` must be a pyproject extra, `jax[extra]` one of JAX's, and a
  JAX version range the one pyproject declares (a GPU line must not move JAX out of it); any
  other package one the Makefile pins, as it pins it."""
  with open(REPO / "pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
  ours = set(project.get("optional-dependencies", {}))
  jax_extras = {e.replace("_", "-") for e in importlib.metadata.metadata("jax").get_all(
      "Provides-Extra") or []}
  jax_range = next(re.sub(r"^jax(\[\w+\])?", "", d) for d in project["dependencies"]
                   if re.match(r"jax[\[<>=]", d))
  problems = []
  for word in words[2:]:
    if word.startswith("-") or word in makefile_pins():
      continue
    match = re.fullmatch(r"(\.|jax)(?:\[([\w,-]+)\])?(.*)", word)
    if not match:
      problems.append(f"{command}: installs {word}, neither this project nor jax")
      continue
    target, extras, version = match.groups()
    known = ours if target == "." else jax_extras
    problems += [f"{command}: {target} has no extra {e!r} (it has {sorted(known)})"
                 for e in (extras or "").split(",") if e and e not in known]
    if target == "jax" and version.replace(" ", "") != jax_range.replace(" ", ""):
      problems.append(f"{command}: jax{version} is not pyproject's range jax{jax_range}")
  return problems


def problems_of(commands: list[str], repo: pathlib.Path = REPO) -> tuple[list[str], dict]:
  """What is wrong with the commands that needs no run, and {--help argv: the flags shown}."""
  wanted: dict[tuple[str, ...], set[str]] = {}
  problems = []
  makefile = (repo / "Makefile").read_text(encoding="utf-8")
  for command in commands:
    words = shlex.split(command)
    while words and words[0] == "time":
      words = words[1:]
    if words[0] == "make":
      target = words[1]
      if not re.search(rf"^{re.escape(target)}:", makefile, re.M):
        problems.append(f"{command}: the Makefile has no target {target}")
      continue
    if words[0] in PYTHONS and words[1:3] == ["-m", "venv"]:
      continue
    if words[0] == "bash" and words[1].endswith(".sh"):  # a script of stages, each a `case` arm
      script = repo / words[1]
      if not script.is_file():
        problems.append(f"{command}: no file {words[1]}")
        continue
      arms = set(re.findall(r"^\s+([\w|]+)\)$", script.read_text(encoding="utf-8"), re.M))
      known = {name for arm in arms for name in arm.split("|")}
      problems += [f"{command}: {words[1]} has no stage {w}" for w in words[2:] if w not in known]
      continue
    if words[0] in PIPS or (words[0] in PYTHONS and words[1:3] == ["-m", "pip"]):
      if words[0] in PYTHONS:
        words = words[2:]
      if words[1] != "install":
        problems.append(f"{command}: a pip command other than install")
        continue
      problems += pip_install_problems(command, words)
      continue
    argv, args = program(command)
    if argv[1:3] == ["-m", "pytest"]:  # a test run the pages show: its test files must exist
      problems += [f"{command}: no {a}" for a in args
                   if a.startswith("tests/") and not (repo / a.split("::")[0]).is_file()]
      continue
    if argv[1].endswith(".py") and not (repo / argv[1]).is_file():
      problems.append(f"{command}: no file {argv[1]}")
      continue
    # The module must be this checkout's: an installed copy elsewhere (an editable install of
    # another checkout) could still answer for a path this one has moved.
    if argv[1] == "-m" and not module_file(argv[2], repo).is_file():
      problems.append(f"{command}: no module {argv[2]} in this checkout")
      continue
    names, paths = flags_and_paths(args)
    problems += [f"{command}: no {p}" for p in sorted(paths) if not (repo / p).exists()]
    wanted.setdefault(tuple(argv), set()).update(names)
  return problems, wanted


def commands(repo: pathlib.Path = REPO) -> list[str]:
  found = []
  for page in pages(repo):
    found += bash_commands(page.read_text(encoding="utf-8"))
  return found + makefile_commands((repo / "Makefile").read_text(encoding="utf-8"))


def test_the_readme_and_every_docs_page_are_read_whole():
  found = commands()
  assert len(found) >= 20, found
  assert any("socialrm_jax.main.audit" in c for c in found)  # the Makefile's demo
  for page in pages():  # every docs page that shows a command is read
    for command in bash_commands(page.read_text(encoding="utf-8")):
      assert command in found, (page, command)
  assert any(p.name == "scoring.md" for p in pages())
  with pytest.raises(AssertionError, match="does not know"):
    program("curl https://example.com")
  assert bash_commands("```bash\n# a comment\nP=\"--a=1\"\nx --b=2 \\\n  --c=3  # note\n```\n") == [
      "x --b=2    --c=3"]


def test_a_planted_wrong_path_fails(tmp_path):
  """The check on a temporary copy of the repository's pages, each with one thing planted wrong:
  a config path, a module, a make target, a data path, a JAX extra. Each must be reported."""
  (tmp_path / "docs").mkdir()
  (tmp_path / "Makefile").write_text((REPO / "Makefile").read_text(encoding="utf-8"))
  readme = (REPO / "README.md").read_text(encoding="utf-8")
  assert "configs/bundled_suite.py" in readme and "jax[cuda12]" in readme
  planted = (readme.replace("configs/bundled_suite.py", "configs/bundled_suit.py")
             .replace("jax[cuda12]", "jax[cuda21]")
             .replace("make demo", "make demos"))
  (tmp_path / "README.md").write_text(planted)
  datasets = (REPO / "docs" / "datasets.md").read_text(encoding="utf-8")
  assert "socialrm_jax.main.counterfactuals" in datasets
  (tmp_path / "docs" / "datasets.md").write_text(
      datasets.replace("socialrm_jax.main.counterfactuals", "socialrm_jax.main.counterfactual")
      .replace("--data_dir=socialrm_jax/bundled", "--data_dir=socialrm_jax/bundle"))
  # Modules and repository paths are looked up in the real checkout but for the planted ones.
  for folder in ("configs", "socialrm_jax"):
    (tmp_path / folder).symlink_to(REPO / folder)
  problems, _ = problems_of(commands(tmp_path), tmp_path)
  text = "\n".join(problems)
  for wrong in ("no configs/bundled_suit.py", "jax has no extra 'cuda21'",
                "the Makefile has no target demos", "no module socialrm_jax.main.counterfactual ",
                "no socialrm_jax/bundle"):
    assert wrong in text, (wrong, text)
  # And the real pages have none of these.
  assert not problems_of(commands())[0]


def test_a_gpu_install_line_must_keep_jax_in_pyproject_range():
  problems = pip_install_problems("pip install jax[cuda12]", ["pip", "install", "jax[cuda12]"])
  assert any("range" in p for p in problems), problems
  assert not pip_install_problems("x", ["pip", "install", "-e", ".[tpu]"])
  assert pip_install_problems("x", ["pip", "install", ".[gpu]"])
  # cuDNN as the Makefile pins it (without its dependencies), and no other version.
  assert not pip_install_problems("x", ["pip", "install", "--no-deps",
                                        "nvidia-cudnn-cu12==9.28.0.42"])
  assert pip_install_problems("x", ["pip", "install", "nvidia-cudnn-cu12==9.1.0.70"])


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_every_command_the_pages_show_runs_with_the_flags_they_show():
  problems, wanted = problems_of(commands())
  results = command_help.run_all([list(argv) for argv in wanted])
  for (argv, names), done in zip(wanted.items(), results):
    shown = command_help.listed_flags(done.stdout)
    if not shown:
      problems.append(f"{' '.join(argv[1:])}: --help lists no flag:\n{done.stderr[-1500:]}")
    elif names - shown - ABSL_OWN_FLAGS:
      problems.append(f"{' '.join(argv[1:])}: --help does not list "
                      f"{sorted(names - shown - ABSL_OWN_FLAGS)}")
  assert not problems, "\n".join(problems)


def python_blocks(markdown: str) -> list[str]:
  """The code of the ```python blocks, in order."""
  return re.findall(r"^```python\n(.*?)^```", markdown, re.M | re.S)


PYTHON_API_PAGE = REPO / "docs" / "python_api.md"
# The page's model line, which the test points at a tiny random Llama.
MODEL_LINE = re.compile(r'^MODEL = "smollm2".*$', re.M)


def test_every_python_block_of_the_pages_compiles():
  blocks = [(page, code) for page in pages() for code in python_blocks(
      page.read_text(encoding="utf-8"))]
  assert any(page == PYTHON_API_PAGE for page, _ in blocks)
  for page, code in blocks:
    compile(code, str(page), "exec")
  assert python_blocks("```python\nx = 1\n```\n```bash\ny\n```\n") == ["x = 1\n"]


@pytest.mark.slow  # two audits of a tiny model, one in a subprocess: about a minute on 2 cores
def test_the_python_api_page_runs_and_agrees_with_the_command_line(tmp_path, monkeypatch):
  from tests.helpers import scoring_fixtures as fx
  model = tmp_path / "tiny-rm"
  fx.make_llama(model, head="score")
  page = PYTHON_API_PAGE.read_text(encoding="utf-8")
  (cli,) = [c for c in bash_commands(page) if "socialrm_jax.main.audit" in c]
  assert "hf_model=smollm2," in cli and "output_dir=runs/cli" in cli
  cli_out = tmp_path / "cli"
  argv = shlex.split(cli.replace("hf_model=smollm2,", f"hf_model={model},")
                     .replace("output_dir=runs/cli", f"output_dir={cli_out}"))
  # The command line runs beside the page's code (two cores), from the repository's root.
  done = subprocess.Popen([sys.executable, *argv[1:]], cwd=REPO, env=fx.subprocess_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    code = "\n".join(python_blocks(page))
    assert len(MODEL_LINE.findall(code)) == 1
    monkeypatch.chdir(tmp_path)  # the page's relative output folder lands here
    namespace: dict = {}
    exec(compile(MODEL_LINE.sub(f"MODEL = {str(model)!r}", code), str(PYTHON_API_PAGE), "exec"),
         namespace)
    _, stderr = done.communicate(timeout=600)
  finally:
    done.kill()
  assert done.returncode == 0, stderr[-3000:]
  result, rewards = namespace["result"], namespace["rewards"]
  paths = ("scores", "items")  # where each run put its files
  ours = {k: v for k, v in result.metrics["my-rm"].items() if k not in paths}
  theirs = json.loads((cli_out / "my-rm" / "metrics.json").read_text(encoding="utf-8"))
  assert ours == {k: v for k, v in theirs.items() if k not in paths}
  assert ours == {k: v for k, v in json.loads(
      (tmp_path / "runs" / "notebook" / "my-rm" / "metrics.json").read_text()).items()
                  if k not in paths}
  assert set(result.verdicts["my-rm"]) == set(ours["domains"]) == {"safety", "general"}
  frame = result.pair_scores
  from socialrm_jax.base import tables
  pair_ids = [r["pair_id"] for r in tables.read_rows(result.output_dir / "converted", "pairs")]
  assert frame["pair_id"].tolist() == pair_ids and set(frame["dataset"]) == {"xstest", "hh_rlhf"}
  assert frame["margin"].notna().all()
  assert (frame["margin"] == frame["reward_chosen"] - frame["reward_rejected"]).all()
  assert result.report_html.is_file() and result.report_md.is_file()
  assert list(rewards.columns) == ["prompt", "chosen", "rejected", "reward_chosen",
                                   "reward_rejected", "margin"] and len(rewards) == 2
  # The in-memory pairs, in the other order, get the same rewards in the other order.
  swapped = namespace["socialrm_jax"].score(str(model), namespace["pairs"][::-1], max_length=1024)
  assert swapped["reward_chosen"].tolist() == rewards["reward_chosen"].tolist()[::-1]
