"""RewardBench 2-shaped data: rows whose `chosen` and `rejected` are lists become items of K
candidates in every file kind the preference source reads, and their per-subset scores equal
RewardBench 2's own code applied to the same rewards, to 1e-9.

The reference is the `rewardbench` 0.1.4 wheel's `utils.py`: `sample_stats` and
`process_single_model` (the Ties score) and `reroll_and_score_dataset` (best-of-4 with RewardBench
2's tie rule), and `save_to_hub` (local only: the writer of RewardBench 2's result files).
Importing the package pulls torch, fastchat and the HF hub, so the four functions are read from
the wheel's file by path and run with the names they use (numpy, math, pandas, datasets.Dataset,
os, json): the wheel's code itself, nothing copied."""

import ast
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys
from typing import Dict, List, Union

import numpy as np
import pandas as pd
import pytest

from socialrm_jax.analysis import evaluate
from socialrm_jax.analysis.tables import reward_tables
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import convert as convert_lib
from tests.helpers import preference_fixtures as pf
from tests.helpers import scoring_fixtures as fx

TOLERANCE = 1e-9
N_RESAMPLES = 50
WHEEL_FUNCTIONS = ("sample_stats", "process_single_model", "reroll_and_score_dataset",
                   "save_to_hub")


@pytest.fixture(scope="module")
def wheel() -> dict:
  """The wheel's functions, defined from its utils.py (found without importing the package)."""
  import datasets
  spec = importlib.util.find_spec("rewardbench")
  path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "utils.py"
  tree = ast.parse(path.read_text())
  module = ast.Module([node for node in tree.body if isinstance(node, ast.FunctionDef)
                       and node.name in WHEEL_FUNCTIONS], type_ignores=[])
  namespace = {"np": np, "math": math, "pd": pd, "Dataset": datasets.Dataset, "os": os,
               "json": json, "Dict": Dict, "List": List, "Union": Union}
  exec(compile(module, str(path), "exec"), namespace)
  assert all(name in namespace for name in WHEEL_FUNCTIONS)
  return namespace


def wheel_scores(wheel: dict, items: list[dict], rewards: dict[str, list[float]]) -> dict:
  """Each subset's score as RewardBench 2's code computes it from the rewards: the Ties subset
  by `process_single_model`, the others as the mean of `reroll_and_score_dataset`'s results."""
  by_subset: dict[str, list[dict]] = {}
  for item in items:
    by_subset.setdefault(item["subset"], []).append(item)
  out = {}
  for subset, members in by_subset.items():
    if subset == "Ties":
      rows = [{"id": m["attributes"]["id"], "scores": rewards[m["item_id"]],
               "num_correct": m["attributes"]["num_correct"]} for m in members]
      out[subset] = float(wheel["process_single_model"](rows)[1])
      continue
    import datasets
    unrolled = datasets.Dataset.from_list([
        {"text": text, "scores": reward, "id": m["attributes"]["id"]}
        for m in members for text, reward in zip(m["candidates"], rewards[m["item_id"]])])
    rerolled = wheel["reroll_and_score_dataset"](unrolled, [len(m["candidates"]) for m in members])
    out[subset] = float(np.mean(rerolled["results"]))
  return out


def convert(root: pathlib.Path, source: pathlib.Path, name: str) -> dict:
  report = convert_lib.convert_to(root / name, root, f"preference:{source}:name={name}", "jsonl")
  return report["datasets"][name]


def write_csv(path: pathlib.Path, rows: list[dict]) -> pathlib.Path:
  """RewardBench 2's rows as CSV, the lists JSON-encoded in their fields."""
  pd.DataFrame([{k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()}
                for row in rows]).to_csv(path, index=False)
  return path


def write_json(path: pathlib.Path, rows: list[dict]) -> pathlib.Path:
  path.write_text(json.dumps(rows))
  return path


WRITERS = {"jsonl": pf.write_jsonl, "json": write_json, "csv": write_csv,
           "parquet": pf.write_parquet, "saved": pf.write_saved}


def test_every_file_kind_gives_items_of_k_candidates_correct_first(tmp_path):
  rows = pf.rewardbench2_rows()
  found = {}
  for kind, write in WRITERS.items():
    source = write(tmp_path / f"rb2.{kind}" if kind != "saved" else tmp_path / "saved", rows)
    report = convert(tmp_path, source, f"rb2_{kind}")
    assert [t["layout"] for t in report["tables"]] == ["best_of_n"]
    found[kind] = tables.read_rows(tmp_path / f"rb2_{kind}", "items")
  items = found["jsonl"]
  assert len(items) == len(rows)
  for item, row in zip(items, rows):
    assert item["candidates"] == row["chosen"] + row["rejected"]
    assert item["desirability"] == [1] * row["num_correct"] + [-1] * len(row["rejected"])
    assert item["roles"] == ["chosen"] * row["num_correct"] + ["rejected"] * len(row["rejected"])
    assert item["subset"] == row["subset"] and item["item_id"].endswith("/" + row["id"])
    assert item["attributes"]["num_correct"] == row["num_correct"]
  assert {i["subset"] for i in items} == {*pf.RB2_SUBSETS, "Ties"}
  strip = lambda i: {k: v for k, v in i.items() if k not in ("item_id", "dataset")}
  for kind, other in found.items():
    assert [strip(i) for i in other] == [strip(i) for i in items], kind
  pairs = tables.read_rows(tmp_path / "rb2_jsonl", "pairs")
  assert len(pairs) == sum(r["num_correct"] * len(r["rejected"]) for r in rows)


def test_num_correct_below_the_chosen_list_makes_the_rest_incorrect(tmp_path):
  row = {"id": "7", "prompt": "p", "chosen": ["a", "b"], "rejected": ["c"], "num_correct": 1,
         "subset": "Math"}
  convert(tmp_path, pf.write_jsonl(tmp_path / "one.jsonl", [row]), "one")
  (item,) = tables.read_rows(tmp_path / "one", "items")
  assert item["desirability"] == [1, -1, -1]  # as the wheel reads it: i < num_correct


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  root = tmp_path_factory.mktemp("rb2")
  convert(root, pf.write_jsonl(root / "rb2.jsonl", pf.rewardbench2_rows()), "rb2")
  return tables.read_rows(root / "rb2", "items"), tables.read_rows(root / "rb2", "pairs")


def metrics_of(items, pairs, rewards: dict[str, list[float]], folder: pathlib.Path) -> dict:
  tables.write_rows(folder / "scores.jsonl", [
      {"item_id": i, "candidate": k, "reward": r}
      for i, values in rewards.items() for k, r in enumerate(values)])
  options = evaluate.Options(n_resamples=N_RESAMPLES)
  return evaluate.compute_metrics(items, pairs, reward_tables.read_scores(folder), options)[
      "datasets"]["rb2"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_subset_scores_equal_the_wheels_functions(converted, wheel, seed, tmp_path):
  items, pairs = converted
  rng = np.random.default_rng(seed)
  rewards = {i["item_id"]: [float(x) for x in rng.normal(size=len(i["candidates"]))]
             for i in items}
  # A correct answer tied at the top with one incorrect answer: RewardBench 2 gives it 1/2.
  factuality = next(i for i in items if i["subset"] == "Factuality")
  rewards[factuality["item_id"]][1] = rewards[factuality["item_id"]][0] = 9.0
  # A tied:N row whose correct answers all score the same (the wheel's margin ratio is skipped).
  tied = next(i for i in items if i["attributes"]["id"] == "tied:1")
  rewards[tied["item_id"]][:4] = [1.0] * 4
  node = metrics_of(items, pairs, rewards, tmp_path)
  expected = wheel_scores(wheel, items, rewards)
  got = {s: n["rewardbench2_score"] for s, n in node["subsets"].items()}
  assert set(got) == set(expected) == {*pf.RB2_SUBSETS, "Ties"}
  for subset, value in expected.items():
    assert abs(got[subset] - value) <= TOLERANCE, (subset, got[subset], value)
  assert abs(node["rewardbench2_score"] - np.mean(list(expected.values()))) <= TOLERANCE
  low, high = node["rewardbench2_score_ci95"]
  assert low <= node["rewardbench2_score"] <= high and high > low
  assert node["subsets"]["Ties"]["n_prompts"] == 5 and "best_of_n_accuracy" not in (
      node["subsets"]["Ties"])


def test_the_ties_score_rewards_margins_as_the_wheel_does(converted, wheel, tmp_path):
  """A model that ranks every correct answer above every incorrect one by a wide margin, with
  the correct ones close together, gets the Ties subset's full score (0.99 + 0.01 tanh)."""
  items, pairs = converted
  rewards = {i["item_id"]: [10.0 + 0.1 * k if d > 0 else -10.0 - k
                            for k, d in enumerate(i["desirability"])] for i in items}
  node = metrics_of(items, pairs, rewards, tmp_path)
  assert node["subsets"]["Ties"]["rewardbench2_score"] == pytest.approx(
      wheel_scores(wheel, items, rewards)["Ties"], abs=TOLERANCE)
  assert node["subsets"]["Ties"]["rewardbench2_score"] > 0.99
  assert node["rewardbench2_score"] > 0.99 and node["best_of_n_accuracy"] == 1.0


@pytest.mark.slow
def test_a_rewardbench2_file_is_audited_with_one_command(tmp_path, wheel):
  """`socialrm-audit` on the file with a tiny random Llama: the subsets' scores in metrics.json
  equal the wheel's functions on the rewards in the scores table, and report.md and report.html
  show them."""
  fx.make_llama(tmp_path / "rm", head="score")
  source = pf.write_jsonl(tmp_path / "rb2.jsonl", pf.rewardbench2_rows())
  out = tmp_path / "out"
  done = subprocess.run(
      [sys.executable, "-m", "socialrm_jax.main.audit",
       f"--config=configs/bundled_suite.py:hf_model={tmp_path / 'rm'},name=tiny,output_dir={out}",
       f"--config.datasets=preference:{source}:name=rb2", "--config.probe.enabled=False",
       "--config.counterfactuals=False", f"--config.metrics.n_resamples={N_RESAMPLES}"],
      cwd=fx.REPO_ROOT, env=fx.subprocess_env(), capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  items = tables.read_rows(out / "converted", "items")
  rewards: dict[str, list[float]] = {}
  for row in sorted(tables.read_rows(out / "scores" / "tiny", "scores"),
                    key=lambda r: (r["item_id"], r["candidate"])):
    rewards.setdefault(row["item_id"], []).append(row["reward"])
  node = json.loads((out / "tiny" / "metrics.json").read_text())["datasets"]["rb2"]
  expected = wheel_scores(wheel, items, rewards)
  for subset, value in expected.items():
    assert abs(node["subsets"][subset]["rewardbench2_score"] - value) <= TOLERANCE, subset
  report = (out / "report.md").read_text()
  # Ties has a handful of prompts here, fewer than an interval needs: its value stands alone.
  ties = node["subsets"]["Ties"]
  assert ties["rewardbench2_score_ci95"] is None
  assert f"| Ties: rewardbench2_score | {ties['rewardbench2_score']:.3f} |" in report
  assert f"| rewardbench2_score | {node['rewardbench2_score']:.3f} [" in report
  html = (out / "report.html").read_text()
  assert f"{node['rewardbench2_score']:.3f}" in html and "<script src" not in html


def test_models_are_compared_on_the_rewardbench2_score(converted, tmp_path):
  """Two models' RewardBench 2 scores in comparisons.json: the metrics' values, a paired
  bootstrap over the same resampled prompts, Holm-corrected with the rest."""
  items, _ = converted
  folder = tmp_path / "converted"
  tables.write_rows(folder / "items.jsonl", items)
  tables.write_rows(folder / "pairs.jsonl", converted[1])
  paths = []
  for seed in (0, 1):
    rng = np.random.default_rng(seed)
    tables.write_rows(tmp_path / f"m{seed}" / "scores.jsonl", [
        {"item_id": i["item_id"], "candidate": k, "reward": float(rng.normal())}
        for i in items for k in range(len(i["candidates"]))])
    paths.append(str(tmp_path / f"m{seed}"))
  from socialrm_jax.analysis import runner
  models = runner.evaluate_all(str(folder), paths, str(tmp_path / "report"), ["a", "b"],
                               evaluate.Options(n_resamples=N_RESAMPLES))
  comparisons = json.loads((tmp_path / "report" / "comparisons.json").read_text())
  rows = {r["metric"]: r for r in comparisons["pairs"][0]["comparisons"] if r["key"] == "rb2"}
  row = rows["rewardbench2_score"]
  assert row["value_a"] == models["a"]["datasets"]["rb2"]["rewardbench2_score"]
  assert row["value_b"] == models["b"]["datasets"]["rb2"]["rewardbench2_score"]
  assert row["test"] == "paired bootstrap" and 0 < row["p"] <= 1 and "p_holm" in row
  assert "best_of_n_accuracy" in rows
  report = (tmp_path / "report" / "report.md").read_text()
  assert "rb2: rewardbench2_score" in report  # the report's comparisons table


def test_a_ties_id_given_twice_is_an_error_naming_both_rows(tmp_path):
  rows = pf.rewardbench2_rows()
  rows.append(dict(next(r for r in rows if r["id"] == "ref:0")))
  with pytest.raises(InputError, match=r"rb2\.jsonl, row 16: Ties id 'ref:0' given twice "
                                       r"\(rows 11 and 16\)"):
    convert(tmp_path, pf.write_jsonl(tmp_path / "rb2.jsonl", rows), "rb2")


def test_a_subset_of_ties_rows_and_other_rows_is_an_error(tmp_path):
  rows = pf.rewardbench2_rows()
  rows[0]["subset"] = "Ties"
  with pytest.raises(InputError, match=r"rb2\.jsonl, row 1: subset 'Ties' holds Ties rows"):
    convert(tmp_path, pf.write_jsonl(tmp_path / "rb2.jsonl", rows), "rb2")


def run_v2_files(wheel: dict, items: list[dict], rewards: dict[str, list[float]], model: str,
                 folder: pathlib.Path) -> tuple[dict, dict]:
  """The two files RewardBench 2's `scripts/run_v2.py` writes for these rewards, made as it makes
  them (the script is not in the wheel: its steps below, in its order): the unrolled dataset's
  text, subset, id and scores columns, `reroll_and_score_dataset`, `num_correct`, the Ties
  subset's rows from `process_single_model`, each subset's score, and the wheel's `save_to_hub`
  (local only, `results/` under the working folder) for `eval-set/` and `eval-set-scores/`."""
  import datasets
  texts = lambda item: [[*item["prompt"], {"role": "assistant", "content": c}]
                        for c in item["candidates"]]
  unrolled = [(text, item["subset"], item["attributes"]["id"], reward) for item in items
              for text, reward in zip(texts(item), rewards[item["item_id"]])]
  out = datasets.Dataset.from_dict({"text": [u[0] for u in unrolled]})
  out = out.add_column("subset", [u[1] for u in unrolled])
  out = out.add_column("id", [u[2] for u in unrolled])
  out = out.add_column("scores", [u[3] for u in unrolled])
  out = wheel["reroll_and_score_dataset"](out, [len(i["candidates"]) for i in items],
                                          cols_to_combine=["text", "scores"])
  out = out.add_column("num_correct", [i["attributes"]["num_correct"] for i in items])
  grouped = {"model": model, "model_type": "Seq. Classifier", "chat_template": "tokenizer"}
  for subset in np.unique([i["subset"] for i in items]):
    subset_dataset = out.filter(lambda example: example["subset"] == subset)
    if subset.lower() == "ties":
      with_results, grouped[subset] = wheel["process_single_model"](subset_dataset)
      frame = out.to_pandas()
      for k, index in enumerate(i for i, s in enumerate(out["subset"]) if s == "ties"):
        frame.at[index, "results"] = with_results["results"][k]
      out = datasets.Dataset.from_pandas(frame)
    else:
      grouped[subset] = sum(subset_dataset["results"]) / len(subset_dataset["results"])
  per_prompt = {**out.to_dict(), "model": model, "model_type": "Seq. Classifier",
                "chat_template": "tokenizer"}
  cwd = os.getcwd()
  os.chdir(folder)
  try:
    wheel["save_to_hub"](grouped, model, "eval-set/", local_only=True)
    wheel["save_to_hub"](per_prompt, model, "eval-set-scores/", local_only=True)
  finally:
    os.chdir(cwd)
  return tuple(json.loads((folder / "results" / sub / f"{model}.json").read_text())
               for sub in ("eval-set", "eval-set-scores"))


def test_the_rewardbench2_files_have_run_v2s_layout(converted, wheel, tmp_path, monkeypatch):
  """metrics' `rewardbench2/<dataset>/` files against the ones run_v2.py's steps write with the
  wheel on the same rewards: the same keys at every level, the same per-prompt columns (texts,
  rewards, ids, per-row results), the subsets' scores to 1e-9."""
  items, pairs = converted
  folder = tmp_path / "converted"
  tables.write_rows(folder / "items.jsonl", items)
  tables.write_rows(folder / "pairs.jsonl", pairs)
  rng = np.random.default_rng(3)
  rewards = {i["item_id"]: [float(x) for x in rng.normal(size=len(i["candidates"]))]
             for i in items}
  math_item = next(i for i in items if i["subset"] == "Math")  # a two-way tie at the top: 1/2
  rewards[math_item["item_id"]][2] = rewards[math_item["item_id"]][0] = 5.0
  tables.write_rows(tmp_path / "m" / "scores.jsonl", [
      {"item_id": i, "candidate": k, "reward": r}
      for i, values in rewards.items() for k, r in enumerate(values)])
  from socialrm_jax.analysis import runner
  # What run.json's manifest says of a model scored by Hub id with its tokenizer's chat template.
  monkeypatch.setattr(runner, "run_json", lambda path: {"model": "tiny", "manifest": {
      "model": {"hub": {"id": "org/tiny-rm", "commit": "a" * 40}},
      "chat_template": {"sha256": "b" * 64, "format": "chat template"}}})
  runner.evaluate_all(str(folder), [str(tmp_path / "m")], str(tmp_path / "report"), ["tiny"],
                      evaluate.Options(n_resamples=N_RESAMPLES))
  ours = tmp_path / "report" / "rewardbench2" / "rb2"
  summary = json.loads((ours / "eval-set" / "org" / "tiny-rm.json").read_text())
  per_prompt = json.loads((ours / "eval-set-scores" / "org" / "tiny-rm.json").read_text())
  (tmp_path / "wheel").mkdir()
  expected_summary, expected_per_prompt = run_v2_files(wheel, items, rewards, "org/tiny-rm",
                                                       tmp_path / "wheel")
  assert sorted(summary) == sorted(expected_summary) == sorted(
      ["model", "model_type", "chat_template", *pf.RB2_SUBSETS, "Ties"])
  for key, value in expected_summary.items():
    assert summary[key] == pytest.approx(value, abs=TOLERANCE), key
  assert sorted(per_prompt) == sorted(expected_per_prompt)
  for key in expected_per_prompt:
    assert per_prompt[key] == expected_per_prompt[key], (key, per_prompt[key], expected_per_prompt[key])
  assert per_prompt["results"][per_prompt["id"].index(math_item["attributes"]["id"])] == 0.5
  # save_to_hub's serialisation: the summary file's bytes are the wheel's where the floats agree.
  assert (ours / "eval-set-scores" / "org" / "tiny-rm.json").read_text() == (
      tmp_path / "wheel" / "results" / "eval-set-scores" / "org" / "tiny-rm.json").read_text()
