"""benchmarks.training.train_step_profile times what `--compare` names and nothing else: two remat
policies (and an attention implementation) on a tiny random Llama, each loaded by name, give one
table row per program; an unknown name is refused in one line before any model is loaded."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks.training import train_step_profile
from socialrm_jax.base.errors import InputError
from tests.helpers import scoring_fixtures as fx
from tests.helpers.paths import REPO_ROOT

MODULE = "benchmarks.training.train_step_profile"


def profile(*flags):
  return subprocess.run([sys.executable, "-m", MODULE, *flags], capture_output=True, text=True,
                        cwd=REPO_ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=600,
                        check=False)


def test_an_entry_is_settings_by_name():
  names = {"attention": ("auto", "xla"), "remat_policy": ("auto", "full")}
  assert train_step_profile.parse_entry("default", names) == {}
  assert train_step_profile.parse_entry("attention:xla+remat_policy:full", names) == {
      "attention": "xla", "remat_policy": "full"}
  for entry, message in (("remat_policy:fastest", "remat_policy has no 'fastest'"),
                         ("_replaced:x", "not SETTING:NAME"),
                         ("attention:xla+attention:auto", "names attention twice")):
    with pytest.raises(InputError, match=message):
      train_step_profile.parse_entry(entry, names)


def test_the_names_are_the_model_code_s():
  from socialrm_jax.models import attention, trunk
  assert train_step_profile.setting_names() == {
      "attention": tuple(attention.IMPLEMENTATIONS),
      "remat_policy": tuple(trunk.REMAT_POLICY_NAMES)}


def test_an_unknown_name_is_one_line(tmp_path):
  done = profile(f"--model={tmp_path}", f"--pairs={tmp_path / 'none.jsonl'}",
                 "--compare=remat_policy:fastest")
  assert done.returncode == 2, done.stderr
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(
      f"{MODULE}: error: --compare: 'remat_policy:fastest': remat_policy has no 'fastest'"), lines


@pytest.mark.slow  # two tiny models compiled in a subprocess: about a minute on 2 cores
def test_two_remat_policies_are_timed_side_by_side(tmp_path):
  from socialrm_jax.models import trunk
  first, second = "full", "save_dots"
  assert {first, second} <= set(trunk.REMAT_POLICY_NAMES)
  fx.make_llama(tmp_path / "rm")
  pairs = tmp_path / "pairs.jsonl"
  pairs.write_text("".join(json.dumps({
      "prompt": [{"role": "user", "content": f"question {i} about things"}],
      "chosen": f"a good answer {i}", "rejected": f"bad {i}"}) + "\n" for i in range(4)))
  entries = [f"remat_policy:{first}", f"attention:xla+remat_policy:{second}"]
  done = profile(f"--model={tmp_path / 'rm'}", f"--pairs={pairs}", f"--compare={','.join(entries)}",
                 "--steps=1", "--batch_size=4", "--passes=1")
  assert done.returncode == 0, done.stderr[-3000:]
  rows = [line.split() for line in done.stdout.splitlines() if line.split()[:1] in ([entries[0]],
                                                                                    [entries[1]])]
  assert [(r[0], r[1]) for r in rows if r[1] in ("forward", "value")] == [
      (entries[0], "forward"), (entries[0], "value"), (entries[1], "forward"), (entries[1], "value")]
  assert any(line.startswith("CPU: ") for line in done.stdout.splitlines())
