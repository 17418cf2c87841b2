"""Every command that computes joins a multi-process job through the same settings, declared once
(`socialrm_jax/runtime/distributed.py`): its `--helpfull` lists them with their one help line."""

from __future__ import annotations

import ast
import dataclasses
import re
import sys

import pytest

from socialrm_jax.runtime import distributed
from tests.helpers import command_help
from tests.helpers.paths import REPO_ROOT

COMMANDS = ("audit", "score", "train", "ablation", "probe", "vocab_scan")
JOB_FIELDS = tuple(f.name for f in dataclasses.fields(distributed.DistributedSettings))


def test_the_settings_are_declared_once_and_joined_in_one_place():
  declared, jax_joins, command_joins = [], set(), set()
  for path in sorted((REPO_ROOT / "socialrm_jax").rglob("*.py")):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(REPO_ROOT).as_posix()
    for node in ast.walk(tree):
      if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
          and node.target.id in JOB_FIELDS):
        declared.append((where, node.target.id))
      if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "initialize"):
        continue
      owner = node.func.value
      if isinstance(owner, ast.Attribute) and owner.attr == "distributed":  # jax.distributed
        jax_joins.add(where)
      if isinstance(owner, ast.Name) and owner.id == "distributed":  # runtime/distributed.py's
        command_joins.add(where)
  assert sorted(declared) == sorted(("socialrm_jax/runtime/distributed.py", name)
                                    for name in JOB_FIELDS)
  assert jax_joins == {"socialrm_jax/runtime/distributed.py"}
  assert command_joins == {f"socialrm_jax/main/{c}.py" for c in COMMANDS}


@pytest.mark.slow  # six commands' --helpfull, each its own Python
def test_helpfull_of_every_computing_command_lists_the_distributed_settings():
  done = command_help.run_all([[sys.executable, "-m", f"socialrm_jax.main.{c}", "--helpfull"]
                               for c in COMMANDS])
  helps = {f.name: f.metadata["help"] for f in dataclasses.fields(distributed.DistributedSettings)}
  for name, result in zip(COMMANDS, done):
    assert "helpshort" in result.stdout, f"{name}: {result.stderr[-2000:]}"  # absl exits 1
    listed = command_help.listed_flags(result.stdout)
    assert set(JOB_FIELDS) <= listed, f"{name} --helpfull lacks {set(JOB_FIELDS) - listed}"
    for field, help_line in helps.items():  # the declared help (its first words: absl wraps)
      first_words = " ".join(help_line.split()[:3])
      assert re.search(rf"--(\[no\])?{field}: {re.escape(first_words)}", result.stdout), (
          f"{name}: --{field}'s help is not the declared one")
