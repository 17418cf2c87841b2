"""A tiny ArmoRM-shaped checkpoint (saved by ArmoRM's own class, gated head, 19 named objectives)
through the audit and the vocabulary scan commands, as a user would run them: the reports show
the gated score the metrics use and each objective by name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from socialrm_jax.models import heads
from tests.helpers import reward_head_fixtures as rh
from tests.helpers import scoring_fixtures as fx
from tests.end_to_end.test_audit import make_small_suite

N_RESAMPLES = 20


@pytest.fixture(scope="module")
def armorm(tmp_path_factory):
  folder = tmp_path_factory.mktemp("armorm")
  rh.make_armorm(folder)
  return folder


@pytest.mark.slow
def test_audit_of_armorm_reports_the_gated_score_and_each_objective(armorm, tmp_path):
  data_dir = tmp_path / "data"
  make_small_suite(data_dir)
  out = tmp_path / "audit"
  subprocess.run([
      sys.executable, "-m", "socialrm_jax.main.audit",
      f"--config=configs/bundled_suite.py:hf_model={armorm},name=armorm,output_dir={out}",
      f"--config.data_dir={data_dir}", "--config.datasets=bbq,moral_stories",
      f"--config.metrics.n_resamples={N_RESAMPLES}", "--config.probe.enabled=false",
      "--config.counterfactuals=false"],
      cwd=fx.REPO_ROOT, env=fx.subprocess_env(), check=True, timeout=600)
  run = json.loads((out / "scores" / "armorm" / "run.json").read_text())
  assert run["reward_head"]["outputs"] == ["score", *heads.ARMORM_OBJECTIVES]
  assert run["objective"] is None  # the reward is output 0, the gated score
  metrics = json.loads((out / "armorm" / "metrics.json").read_text())
  assert set(metrics["objectives"]) == {str(i) for i in range(20)}
  assert metrics["objectives"]["0"]["name"] == "score"
  assert metrics["objectives"]["11"]["name"] == "beavertails-is_safe"
  # Output 0 alone is the reward the headline metrics used.
  assert (metrics["objectives"]["0"]["datasets"]["bbq"]["accuracy"]
          == metrics["datasets"]["bbq"]["accuracy"])
  report = (out / "report.md").read_text()
  assert "## Per objective" in report
  assert "0: score" in report and "11: beavertails-is_safe" in report


@pytest.mark.slow
def test_vocab_scan_of_armorm_ranks_the_gated_score(armorm, tmp_path):
  out = tmp_path / "scan"
  subprocess.run([
      sys.executable, "-m", "socialrm_jax.main.vocab_scan", f"--model={armorm}",
      f"--output_dir={out}", "--max_tokens=24", f"--n_resamples={N_RESAMPLES}",
      "--n_permutations=50", "--max_length=256"],
      cwd=fx.REPO_ROOT, env=fx.subprocess_env(), check=True, timeout=600)
  scan = json.loads((out / "scan.json").read_text())
  assert scan["tokens"]["scanned"] == 24
  assert scan["reward_head"]["outputs"] == ["score", *heads.ARMORM_OBJECTIVES]
  text = (out / "vocab_scan.md").read_text()
  assert "The reward is output 0, `score`, of the `LlamaForRewardModelWithGating` head" in text
  assert "19 `code-readability`" in text
