"""The value probe end to end: on a tiny random decoder (rewards where the probe says they are,
equal to PyTorch's), through its command, and on the embedded default model."""

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from socialrm_jax.models import default_model
from socialrm_jax.orchestrators import probe
from socialrm_jax.scoring import engine
from tests.helpers import scoring_fixtures as fx

OPTIONS = engine.ScoringOptions(tokens_per_batch=2048)
CATEGORIES = len(probe.CATEGORIES)
CONTRASTS = 1 + 5  # communion - agency, and virtue - vice per foundation


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
  folder = tmp_path_factory.mktemp("tiny_lm")
  torch_model, tokenizer = fx.make_llama(folder, head="lm", seed=3)
  return folder, torch_model, tokenizer


def _check_outputs(out, result, words_per_category):
  assert json.loads((out / "probe.json").read_text()) == result
  assert len(result["categories"]) == CATEGORIES and len(result["contrasts"]) == CONTRASTS
  assert all(c["n_words"] == words_per_category for c in result["categories"].values())
  assert all(np.isfinite(c["mean"]) and c["ci95"][0] <= c["mean"] <= c["ci95"][1]
             for c in result["categories"].values())
  assert all(0 < c["p_value"] <= 1 for c in result["contrasts"].values())
  table = (out / "value_probe.md").read_text()
  assert "| communion - agency (warmth - competence) |" in table and "| sanctity.vice |" in table
  assert (out / "value_probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_probe_on_a_tiny_random_decoder_equals_pytorch(tiny_lm, tmp_path):
  folder, torch_model, tokenizer = tiny_lm
  result = probe.run(str(folder), tmp_path, OPTIONS, probe.ProbeOptions(
      words_per_category=3, n_resamples=50, n_permutations=100), name="tiny")
  _check_outputs(tmp_path, result, 3)
  assert result["model"] == "tiny" and result["proxy"] == "loglik"
  # The reward of a category's word under a prompt is its loglik, computed alone by PyTorch.
  words = list(dict.fromkeys(w for ws in result["words"].values() for w in ws))
  rewards = probe.reward_matrix(tmp_path / "scores", len(words))
  items = probe.probe_items(words)
  expected = fx.torch_logliks(torch_model, tokenizer, [items[0], items[-1]])
  for (item_id, c), (mean, _, _) in expected.items():
    prompt = [it["item_id"] for it in items].index(item_id)
    assert rewards[prompt, c] == pytest.approx(mean, abs=1e-4)
  warmth = [words.index(w) for w in result["words"]["warmth"]]
  assert result["categories"]["warmth"]["mean"] == pytest.approx(rewards[:, warmth].mean())


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_the_probe_command_writes_its_table_and_refuses_the_judge(tiny_lm, tmp_path):
  folder, _, _ = tiny_lm
  command = [sys.executable, "-m", "socialrm_jax.main.probe", f"--model={folder}",
             "--words_per_category=2", "--n_resamples=20", "--n_permutations=20"]
  result = subprocess.run(command + [f"--output_dir={tmp_path / 'out'}"], env=fx.subprocess_env(),
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "| warmth |" in result.stdout and "value_probe.png" in result.stdout
  _check_outputs(tmp_path / "out", json.loads((tmp_path / "out" / "probe.json").read_text()), 2)
  refused = subprocess.run(command + [f"--output_dir={tmp_path / 'judge'}", "--proxy=judge"],
                           env=fx.subprocess_env(), capture_output=True, text=True, timeout=600)
  assert refused.returncode == 2
  errors = [line for line in refused.stderr.splitlines() if line.startswith("socialrm-probe:")]
  assert len(errors) == 1 and "--proxy=judge" in errors[0]


@pytest.mark.skipif(importlib.util.find_spec(default_model.PACKAGE) is None,
                    reason=f"package {default_model.PACKAGE} (the default model) is not installed")
def test_the_probe_runs_on_the_default_model(tmp_path):
  result = probe.run(default_model.ALIAS, tmp_path, OPTIONS, probe.ProbeOptions(
      words_per_category=1, n_resamples=100, n_permutations=100))
  _check_outputs(tmp_path, result, 1)
  assert result["model_path"].endswith(default_model.FILE_NAME) and result["truncated"] == 0
