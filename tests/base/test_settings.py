"""base.settings: one declaration of a command's settings gives its flags, its config and its config
argument; a misspelt config argument is refused at once; each scoring setting is declared once."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import subprocess
import sys
import time

from absl import flags
import pytest

from socialrm_jax.base import settings
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import ablation, audit
from socialrm_jax.scoring import engine
from tests.helpers import scoring_fixtures as fx
from tests.helpers.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "socialrm_jax"
# Settings that share a scoring setting's name but not its meaning: the dtype a checkpoint is
# stored in (`socialrm-convert-checkpoint --dtype`), and training's --truncation (the scorer's
# "left" and "error" for a pair, and TRL's "drop", its default, which a scored item cannot take).
OTHER_MEANINGS = {("main/convert_checkpoint.py", "dtype"), ("training/config.py", "truncation")}


@dataclasses.dataclass(frozen=True)
class Inner:
  size: int = settings.field(4, "A size.")
  name: str | None = settings.field(None, "A name.", choices=("a", "b"))
  weights: tuple[float, ...] = settings.field((), "Weights.")


@dataclasses.dataclass(frozen=True)
class Outer:
  path: str = settings.field(None, "A path.", required=True)
  quiet: bool = settings.field(False, "Quiet.")
  inner: Inner = settings.group(Inner, size=8)


def _parsed(cls, *argv):
  values = flags.FlagValues()
  holder = settings.define_flags(cls, flag_values=values)
  values(["prog", *argv])
  return holder.value


def test_flags_come_typed_from_the_dataclass_with_the_groups_defaults():
  assert _parsed(Outer, "--path=p") == Outer(path="p", inner=Inner(size=8))
  parsed = _parsed(Outer, "--path=p", "--quiet", "--size=3", "--name=b", "--weights=0.5,2")
  assert parsed == Outer(path="p", quiet=True, inner=Inner(3, "b", (0.5, 2.0)))


def test_a_bad_value_is_refused_naming_the_flag():
  with pytest.raises(flags.IllegalFlagValueError, match="name"):
    _parsed(Outer, "--path=p", "--name=c")
  with pytest.raises(InputError, match="--weights: each item must be a float"):
    _parsed(Outer, "--path=p", "--weights=x")


def test_a_group_may_give_only_some_of_its_fields_as_flags():
  @dataclasses.dataclass(frozen=True)
  class Picked:
    inner: Inner = settings.group(Inner, flags_of=("size",), name="a")
  assert settings.flag_names(Picked) == ["size"]
  assert _parsed(Picked, "--size=2") == Picked(Inner(2, "a"))
  with pytest.raises(flags.UnrecognizedFlagError):
    _parsed(Picked, "--name=b")


def test_two_settings_with_one_flag_name_are_refused():
  @dataclasses.dataclass(frozen=True)
  class Twice:
    size: int = settings.field(1, "Again.")
    inner: Inner = settings.group(Inner)
  with pytest.raises(TypeError, match="--size"):
    settings.define_flags(Twice, flag_values=flags.FlagValues())


def test_parse_arg_types_values_keeps_defaults_and_refuses_unknown_keys():
  args = settings.parse_arg("n=3,on=false,path=/x", n=1, on=True, path="", name="m")
  assert (args.n, args.on, args.path, args.name) == (3, False, "/x", "m")
  with pytest.raises(InputError, match=r"unknown config argument 'nn'; known: n, on"):
    settings.parse_arg("nn=3", n=1, on=True)
  with pytest.raises(InputError, match="n='x': not a int"):
    settings.parse_arg("n=x", n=1)


def test_a_model_config_holds_every_scoring_setting_typed_and_gives_them_back():
  spec = audit.model_config("m", "smollm2", max_length=512)
  assert set(spec) == {f.name for f in dataclasses.fields(engine.ScoringOptions)} | {"name", "path"}
  spec.proxy = "loglik"  # a None default is a typed placeholder: overridable, type-checked
  with pytest.raises(TypeError):
    spec.objective = "first"
  assert settings.from_config(audit.ModelSpec, spec).scoring == engine.ScoringOptions(
      max_length=512, proxy="loglik")
  with pytest.raises(InputError, match="--config sets max_lenght, which is no setting"):
    audit.model_config("m", "smollm2", max_lenght=512)


def test_a_misspelt_config_argument_exits_2_at_once_naming_it(tmp_path):
  start = time.perf_counter()
  done = subprocess.run(
      [sys.executable, "-m", "socialrm_jax.main.audit",
       "--config=configs/bundled_suite.py:hf_modle=/x", f"--config.output_dir={tmp_path / 'run'}"],
      cwd=fx.REPO_ROOT, env=fx.subprocess_env(), capture_output=True, text=True, timeout=120)
  assert done.returncode == 2, done.stderr[-2000:]
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1 and "hf_modle" in lines[0] and "hf_model" in lines[0], done.stderr
  assert not (tmp_path / "run").exists()
  assert time.perf_counter() - start < 60  # refused while parsing flags, before any work


def _declarations(name: str) -> list[str]:
  """Where the package declares a setting `name`: a `settings.field` assigned to it in a class,
  or an absl `DEFINE_*("name", ...)` call."""
  found = []
  for path in sorted(PACKAGE.rglob("*.py")):
    if (str(path.relative_to(PACKAGE)), name) in OTHER_MEANINGS:
      continue
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
      if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
          and node.target.id == name and isinstance(node.value, ast.Call)
          and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "field"):
        found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
      if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr.startswith("DEFINE") and node.args
          and isinstance(node.args[0], ast.Constant) and node.args[0].value == name):
        found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
  return found


def test_every_scoring_setting_is_declared_once_across_the_package():
  counts = {f.name: _declarations(f.name) for f in dataclasses.fields(engine.ScoringOptions)}
  assert len(counts) == 15
  assert {name: len(where) for name, where in counts.items()} == dict.fromkeys(counts, 1), counts
  assert all(where[0].startswith("scoring/engine.py:") for where in counts.values())


def test_field_of_declares_another_commands_setting_once():
  @dataclasses.dataclass(frozen=True)
  class Other:
    name: str | None = settings.field_of(Inner, "name")
    size: int = settings.field_of(Inner, "size", default=9)
  fields = {f.name: f for f in dataclasses.fields(Other)}
  assert fields["name"].metadata == {f.name: f for f in dataclasses.fields(Inner)}["name"].metadata
  assert Other() == Other(name=None, size=9)
  with pytest.raises(TypeError, match="has no setting 'colour'"):
    settings.field_of(Inner, "colour")


@dataclasses.dataclass(frozen=True)
class Part:
  count: int = settings.field(1, "A count.")
  inner: Inner = settings.group(Inner, flags_of=("size",))


@dataclasses.dataclass(frozen=True)
class WithParts:
  outer: Outer = settings.group(Outer)
  part: Part = settings.nested(Part, count=2)
  parts: dict[str, Part] = settings.named(Part)


def _config_file(tmp_path, text: str) -> str:
  path = tmp_path / "config.py"
  path.write_text(f"import ml_collections\n\ndef get_config():\n  return {text}\n")
  return str(path)


def test_a_flag_given_wins_over_the_config_file_which_wins_over_the_defaults(tmp_path):
  path = _config_file(tmp_path, "ml_collections.ConfigDict({'path': 'file', 'size': 5, "
                      "'weights': [1, 2], 'part': {'count': 7, 'size': 9}, "
                      "'parts': {'a': {'size': 3}}})")
  assert settings.flag_names(WithParts) == ["path", "quiet", "size", "name", "weights"]
  parsed = _parsed(WithParts, f"--config={path}", "--size=6", "--quiet")
  assert parsed.outer == Outer(path="file", quiet=True, inner=Inner(6, None, (1.0, 2.0)))
  assert parsed.part == Part(7, Inner(size=9))
  assert parsed.parts == {"a": Part(1, Inner(size=3))}
  assert _parsed(WithParts, f"--config={path}", "--path=flag").outer.path == "flag"
  # No file: the flags and the defaults (a nested part's given by its `nested`).
  assert _parsed(WithParts, "--path=p").part == Part(2)


@pytest.mark.parametrize("text, message", [
    ("{'path': 'p', 'sise': 5}", r"--config sets sise, which is no setting of this command "
                                 r"\(known: path, quiet, size, name, weights, part, parts\)"),
    ("{'part': {'name': 'a'}}", r"--config sets part.name, which is no setting of part "
                                r"\(known: count, size\)"),
    ("{'parts': {'x': {'colour': 1}}}", r"--config sets parts.x.colour"),
    ("{'size': '5'}", r"--config: size must be an int, got '5'"),
    ("{'name': 'c'}", r"--config: name='c': use one of a, b"),
    ("{'weights': 'ab'}", r"--config: weights must be a list"),
    ("{'part': 3}", r"--config: part must be a ConfigDict or a dict"),
    ("{'quiet': True}", r"--path is required \(a flag, or a key of the --config file\)"),
])
def test_a_config_file_key_of_no_setting_or_of_the_wrong_type_is_refused_naming_it(
    tmp_path, text, message):
  path = _config_file(tmp_path, text)
  with pytest.raises(InputError, match=message):
    _parsed(WithParts, f"--config={path}")


def test_a_command_that_needs_a_config_file_names_an_example():
  values = flags.FlagValues()
  holder = settings.define_flags(Part, flag_values=values, config_example="configs/x.py")
  values(["prog"])
  with pytest.raises(InputError, match=r"--config is required \(e.g. configs/x.py\)"):
    holder.value


def test_config_dict_holds_every_key_and_reads_back_as_the_settings():
  config = settings.config_dict(WithParts, path="p", part={"count": 4},
                                parts={"a": {"count": 5}})
  assert set(config) == {"path", "quiet", "size", "name", "weights", "part", "parts"}
  config.name = "b"  # a None default is a typed placeholder
  assert settings.from_config(WithParts, config) == WithParts(
      Outer("p", inner=Inner(8, "b")), Part(4), {"a": Part(5)})


def test_the_scoring_settings_keep_their_names_in_the_audits_and_the_grids_configs():
  """`--max_length` on socialrm-score is `--config.models.<key>.max_length` in an audit's config,
  `--config.audit.dtype` / `.tokens_per_batch` and `--config.train.max_length` in the grid's."""
  names = {"max_length", "tokens_per_batch", "dtype", "attention", "mesh"}
  assert names <= set(audit.model_config("m", "smollm2"))
  assert names <= set(settings.flag_names(engine.ScoringOptions))
  grid = ablation.ablation_config()
  assert {"dtype", "tokens_per_batch"} <= set(grid.audit)
  assert {"max_length", "attention", "mesh"} <= set(grid.train)
  assert "max_lenght" not in grid.train
  with pytest.raises(InputError, match="--config sets train.max_lenght"):
    ablation.ablation_settings({"train": {"max_lenght": 1}})
