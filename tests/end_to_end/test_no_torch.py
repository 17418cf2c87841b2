"""A scoring run never imports torch (15-24 s at start-up with transformers 5) nor transformers.

The test process itself uses torch to make the tiny models, so each check runs in a fresh Python
and reports which of those modules it ended up importing.
"""

import importlib.util
import json
import subprocess
import sys

import pytest

from socialrm_jax.base import tables
from socialrm_jax.models import default_model
from tests.helpers import scoring_fixtures as fx

HEAVY = ("torch", "transformers")
_REPORT = f"""
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
print("HEAVY_MODULES", json.dumps(heavy))
"""

# Loads each tokenizer given as (path, is_causal) and encodes the fixture items with it.
_ENCODE = """
import json, sys
from tests.helpers import scoring_fixtures as fx
from socialrm_jax.scoring import item_tokens
for path, is_causal in json.loads(sys.argv[1]):
  templater = item_tokens.Templater(item_tokens.load_tokenizer(path), is_causal=is_causal,
                                   max_length=512)
  encoded = templater.encode_many(0, fx.all_items())
  assert len(encoded) == len(fx.all_items()) and all(e.sequences for e in encoded)
""" + _REPORT


def _main_script(module: str, program: str) -> str:
  """`python -m socialrm_jax.main.<module> ARGS`, then the report."""
  return f"""
import json, sys
from socialrm_jax.main import {module}
sys.argv = ["{program}", *sys.argv[1:]]
try:
  {module}.COMMAND.run()  # its flags defined, parsed, and its main run, as its console script
except SystemExit as exit:
  if exit.code:
    raise
""" + _REPORT


_SCORE = _main_script("score", "socialrm-score")
_PROBE = _main_script("probe", "socialrm-probe")


def _heavy_modules(script: str, *args) -> list[str]:
  result = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=fx.subprocess_env(),
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  lines = [line for line in result.stdout.splitlines() if line.startswith("HEAVY_MODULES ")]
  assert len(lines) == 1, result.stdout[-3000:]
  return json.loads(lines[0].split(" ", 1)[1])


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_tokenizers_load_and_encode_without_torch(tmp_path):
  fx.train_chat_tokenizer(tmp_path / "chat")
  fx.train_chat_tokenizer(tmp_path / "plain", with_template=False)
  fx.train_encoder_tokenizer(tmp_path / "encoder")
  tokenizers = [(str(tmp_path / "chat"), True), (str(tmp_path / "plain"), True),
                (str(tmp_path / "encoder"), False)]
  if importlib.util.find_spec(default_model.PACKAGE) is not None:
    tokenizers.append((str(default_model.smollm2_gguf_path()), True))
  assert _heavy_modules(_ENCODE, json.dumps(tokenizers)) == []


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_a_scoring_run_imports_no_torch(tmp_path):
  fx.make_llama(tmp_path / "rm")
  tables.write_rows(tmp_path / "items" / "items.jsonl", fx.all_items())
  command = fx.score_command(tmp_path / "rm", tmp_path / "items", tmp_path / "scores")
  assert _heavy_modules(_SCORE, *command[3:]) == []  # The flags, after `python -m module`.
  assert (tmp_path / "scores" / "run.json").is_file()


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_a_value_probe_run_imports_no_torch(tmp_path):
  fx.make_llama(tmp_path / "lm", head="lm")
  assert _heavy_modules(_PROBE, f"--model={tmp_path / 'lm'}", f"--output_dir={tmp_path / 'probe'}",
                        "--words_per_category=1", "--n_resamples=10", "--n_permutations=10") == []
  assert (tmp_path / "probe" / "probe.json").is_file()
