"""The value-bias ablation grid: its data subsamples (nested prefixes of one shuffle) and its
config, and, marked slow, a tiny grid end to end (orchestrators/ablation.py through `python -m
socialrm_jax.main.ablation`). Its statistics: tests/analysis/test_ablation.py."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from socialrm_jax.analysis.studies import ablation
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import ablation as orchestrator
from tests.helpers.paths import REPO_ROOT

BUNDLED = pathlib.Path(orchestrator.__file__).resolve().parents[1] / "bundled"


REPO = REPO_ROOT
CONFIG = REPO / "configs" / "value_bias_ablation.py"


def _config(**overrides):
  config = config_module().get_config("preset=tiny")
  with config.unlocked():
    for key, value in overrides.items():
      node = config
      *parents, last = key.split(".")
      for parent in parents:
        node = node[parent]
      node[last] = value
  return config


def config_module():
  spec = importlib.util.spec_from_file_location("value_bias_ablation", CONFIG)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_presets_hold_the_study_settings_and_a_tiny_grid():
  study = config_module().get_config("preset=study,llama=/m/llama,gemma2=/m/gemma")
  assert (study.train.lora_rank, study.train.lora_alpha, study.train.learning_rate,
          study.train.epochs, study.train.batch_size, study.train.max_length,
          study.train.dtype) == (32, 64.0, 1e-5, 2, 16, 1024, "bfloat16")
  assert set(study.sources) == {"skywork_80k", "unified_feedback"}
  assert study.bases.llama.path == "/m/llama" and study.bases.gemma2.family == "gemma2"
  tiny = config_module().get_config("preset=tiny,bases_dir=/b")
  runs = orchestrator.plan(tiny)
  assert len(runs) == 2 * 2 * 2 and {r.family for r in runs} == {"llama", "gemma2"}
  assert {r.quantity for r in runs} == {16, 48} and {r.seed for r in runs} == {0, 1}


def test_check_config_names_the_field(tmp_path):
  (tmp_path / "b").mkdir()
  with pytest.raises(InputError, match=r"config.bases.llama.path: no such folder"):
    orchestrator.check_config(_config(**{"bases.llama.path": str(tmp_path / "none"),
                                         "bases.gemma2.path": str(tmp_path / "b")}))
  ok = {"bases.llama.path": str(tmp_path / "b"), "bases.gemma2.path": str(tmp_path / "b")}
  with pytest.raises(InputError, match=r"config.sources.hh_rlhf.spec is empty"):
    orchestrator.check_config(_config(**ok, **{"sources.hh_rlhf.spec": ""}))
  with pytest.raises(InputError, match=r"--config sets train.nonsense, which is no setting of train"):
    orchestrator.check_config(_config(**ok, **{"train.nonsense": 1}))
  with pytest.raises(InputError, match=r"config.train.seed is set by the grid"):
    orchestrator.check_config(_config(**ok, **{"train.seed": 1}))


def test_quantities_are_nested_prefixes_of_one_shuffle(tmp_path):
  data = _config().sources.hh_rlhf
  with data.unlocked():
    data.quantities = (5, 20, 0)
  files = orchestrator.write_subsamples("hh_rlhf", data, BUNDLED, tmp_path)
  lines = {q: path.read_text().splitlines() for q, path in files.items()}
  assert [len(lines[q]) for q in (5, 20, 0)] == [5, 20, 60]
  assert lines[20][:5] == lines[5] and lines[0][:20] == lines[20]
  ids = [json.loads(line)["id"] for line in lines[0]]
  assert len(set(ids)) == 60 and ids != sorted(ids)  # shuffled, every pair once
  assert set(json.loads(lines[5][0])) == {"prompt", "chosen", "rejected", "id"}
  with data.unlocked():
    data.quantities = (61,)
  with pytest.raises(InputError, match=r"quantities: 61 pairs asked, the source has 60"):
    orchestrator.write_subsamples("hh_rlhf", data, BUNDLED, tmp_path / "more")
  with data.unlocked():
    data.shuffle_seed = 1
  with pytest.raises(InputError, match=r"holds subsamples of 'hh_rlhf' \(shuffle seed 0\)"):
    orchestrator.write_subsamples("hh_rlhf", data, BUNDLED, tmp_path)


@pytest.mark.slow
def test_a_tiny_grid_end_to_end_and_a_rerun_skips_it(tmp_path):
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
  built = subprocess.run([sys.executable, str(REPO / "tools" / "tiny_bases.py"),
                          f"--output_dir={tmp_path / 'bases'}"], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=300)
  assert built.returncode == 0, built.stderr[-3000:]
  command = [sys.executable, "-m", "socialrm_jax.main.ablation",
             f"--config={CONFIG}:preset=tiny,bases_dir={tmp_path / 'bases'},"
             f"output_dir={tmp_path / 'grid'}", "--config.seeds=(0,)",
             "--config.sources.hh_rlhf.quantities=(8,)", "--config.train.epochs=1",
             "--config.audit.checkpoints=1", "--config.audit.probe.words_per_category=2"]
  first = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
  assert first.returncode == 0, first.stderr[-3000:]
  grid = json.loads((tmp_path / "grid" / "grid.json").read_text())
  # 2 bases x 8 pairs x 1 seed. Some of the 8 HH-RLHF transcripts are over the tiny preset's
  # --max_length=512: dropped by default (TRL's rule), counted in each row, and the run is one
  # step of 4 pairs, not two; it is probed at step 0 and at its last.
  for row in grid["rows"]:
    assert row["pairs_dropped"] > 0 and row["prompts_cut"] == 0
    assert row["total_steps"] == (8 - row["pairs_dropped"]) // 4 == 1
  assert sorted((r["base"], r["step"]) for r in grid["rows"]) == [
      ("gemma2", 0), ("gemma2", 1), ("llama", 0), ("llama", 1)]
  assert grid["tests"]["final"]["n"] == [1, 1]
  for row in grid["rows"]:
    probe = json.loads((tmp_path / "grid" / "runs" / row["run"] / "probe" / str(row["step"]) /
                        "probe.json").read_text())
    assert row["value"] == -probe["contrasts"][ablation.CONTRAST]["difference"]
  run = tmp_path / "grid" / "runs" / "hh_rlhf" / "llama" / "8" / "seed0"
  assert (run / "train" / "checkpoints" / "0").is_dir()  # the initial weights, checkpointed
  assert not (run / "exports" / "0").exists()  # exported, probed, then removed
  assert (run / "train" / "model" / "config.json").exists()
  assert (tmp_path / "grid" / "value_bias_ablation.png").stat().st_size > 10_000
  assert "| hh_rlhf | llama | llama | 8 | 0 | 0: " in first.stdout
  second = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
  assert second.returncode == 0, second.stderr[-3000:]
  assert "train.py" not in second.stderr and "value probe of" not in second.stderr
  assert json.loads((tmp_path / "grid" / "grid.json").read_text())["rows"] == grid["rows"]


def test_a_run_whose_training_diverges_is_recorded_as_failed_not_audited(tmp_path):
  """At a learning rate of 1e12 unclipped, in full fine-tuning, the run's loss goes NaN: the trainer stops and exports
  nothing, and the grid lists the run as failed, with the trainer's line, in grid.json and in its
  table, and probes nothing of it."""
  from tests.helpers.scoring_fixtures import make_llama  # pylint: disable=import-outside-toplevel
  make_llama(tmp_path / "llama", head="lm", seed=0)
  config = _config(**{"output_dir": str(tmp_path / "grid"), "data_dir": str(BUNDLED),
                      "seeds": (0,), "sources.hh_rlhf.quantities": (8,),
                      "train.learning_rate": 1e12, "train.max_grad_norm": 0.0,
                      "train.max_length": 512, "train.lora_rank": 0})
  with config.unlocked():
    config.bases = {"llama": config_module().base(str(tmp_path / "llama"), "llama")}
  result = orchestrator.run(config)
  assert result["rows"] == []
  [failed] = result["failed"]
  assert (failed["run"], failed["quantity"], failed["seed"]) == ("hh_rlhf/llama/8/seed0", 8, 0)
  assert failed["error"].startswith("step 2: the training diverged (loss nan")
  run = tmp_path / "grid" / "runs" / "hh_rlhf" / "llama" / "8" / "seed0"
  assert not (run / "train" / "model").exists() and not (run / "probe").exists()
  assert json.loads((tmp_path / "grid" / orchestrator.GRID_FILE).read_text())["failed"] == [failed]
  report = (tmp_path / "grid" / orchestrator.REPORT_FILE).read_text()
  assert "1 run(s) FAILED and were not audited" in report
  assert "| hh_rlhf | llama | llama | 8 | 0 | step 2: the training diverged" in report
