"""The `socialrm-metrics` command: several scores sets, missing scores, bad rewards."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from socialrm_jax.analysis import evaluate, runner
from socialrm_jax.analysis.tables import pairs as pairs_module
from socialrm_jax.analysis.tables import reward_tables as scores_module
from socialrm_jax.analysis.tables.categorical import Categorical
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def bbq_item(i):
  condition = "ambiguous" if i % 2 else "disambiguated"
  label = 0 if condition == "ambiguous" else 2  # the context names the anti-biased answer
  return {"item_id": f"bbq/Age/{i}", "domain": "bias", "dataset": "bbq", "subset": "Age",
          "split": "test", "prompt": [{"role": "user", "content": f"question {i}"}],
          "candidates": ["Unknown", "The old man", "The boy"],
          "roles": ["unknown", "biased", "anti_biased"],
          "desirability": [1 if k == label else -1 for k in range(3)],
          "context_condition": condition, "template": "bbq.default",
          "attributes": {"question_polarity": "neg", "answer_groups": ["unknown", "old", "nonOld"]}}


def moral_item(i):
  return {"item_id": f"moral_stories/{i}", "domain": "morality", "dataset": "moral_stories",
          "subset": "test", "split": "test", "prompt": [{"role": "user", "content": "Describe."}],
          "candidates": [f"moral {i}", f"immoral {i}"], "roles": ["moral", "immoral"],
          "desirability": [1, -1], "context_condition": ["with_norm", "without_norm"][i % 2],
          "template": "moral_stories.default", "attributes": {}}


def pair_rows(items):
  rows = []
  for item in items:
    good = item["desirability"].index(1)
    for bad in (k for k, d in enumerate(item["desirability"]) if d < 0):
      rows.append({"pair_id": f"{item['item_id']}:{good}>{bad}", "item_id": item["item_id"],
                   "domain": item["domain"], "dataset": item["dataset"], "subset": item["subset"],
                   "label_source": "gold", "prompt": item["prompt"],
                   "chosen": item["candidates"][good], "rejected": item["candidates"][bad],
                   "chosen_index": good, "rejected_index": bad, "chosen_role": item["roles"][good],
                   "rejected_role": item["roles"][bad],
                   "context_condition": item["context_condition"]})
  return rows


def score_rows(items, reward):
  return [{"item_id": it["item_id"], "candidate": k, "reward": reward(i, k)}
          for i, it in enumerate(items) for k in range(len(it["candidates"]))]


@pytest.fixture()
def converted(tmp_path):
  items = [bbq_item(i) for i in range(40)] + [moral_item(i) for i in range(20)]
  folder = tmp_path / "converted"
  tables.write_rows(folder / "items.parquet", items)
  tables.write_rows(folder / "pairs.parquet", pair_rows(items))
  return folder, items


def run_cli(*args):
  return subprocess.run([sys.executable, "-m", "socialrm_jax.main.metrics", *args],
                        capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_two_scores_sets_give_two_metrics_files_one_report_and_the_tradeoff_plot(tmp_path,
                                                                                converted):
  folder, items = converted
  # Model A always picks the stereotyped answer; model B always picks the gold one.
  tables.write_rows(tmp_path / "a" / "scores.jsonl",
                    score_rows(items, lambda i, k: 1.0 if k == 1 else 0.0))
  tables.atomic_write_json(tmp_path / "a" / "run.json", {"model": "/models/rm-alpha"})
  tables.write_rows(tmp_path / "beta_scores" / "scores-00000-of-00001.parquet",
                    score_rows(items, lambda i, k: float(items[i]["desirability"][k])))
  out = tmp_path / "report"
  result = run_cli(f"--items={folder}", f"--scores={tmp_path / 'a'},{tmp_path / 'beta_scores'}",
                   f"--output_dir={out}")
  assert result.returncode == 0, result.stderr
  alpha = json.loads((out / "rm-alpha" / "metrics.json").read_text())
  beta = json.loads((out / "beta_scores" / "metrics.json").read_text())
  assert alpha["model"] == "rm-alpha" and beta["model"] == "beta_scores"
  assert alpha["datasets"]["bbq"]["bias_avoidance"] == 0.0
  assert alpha["datasets"]["bbq"]["bias_score_ambiguous"] == 1.0
  assert alpha["domains"]["bias"]["accuracy"] == (0.5 + 0.5) / 4  # a loss and a tie per item
  assert beta["datasets"]["bbq"]["bias_avoidance"] == 1.0
  assert beta["domains"]["bias"]["accuracy"] == 1.0
  report = (out / "report.md").read_text()
  assert "rm-alpha" in report and "beta_scores" in report
  # The first screen names the domain where rm-alpha prefers the undesirable response.
  first_screen = report.split("## Per dataset")[0]
  assert "Does **rm-alpha** prefer socially undesirable responses? Yes, in bias" in first_screen
  assert "stereotyped answer" in first_screen
  for png in ("bias_tradeoff.png", "domain_accuracy.png", "bbq_bias_scores.png",
              "selection_shares.png"):
    assert (out / png).read_bytes()[:8] == PNG_MAGIC
    assert f"]({png})" in report


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_missing_scores_are_an_error_with_counts_per_dataset(tmp_path, converted):
  folder, items = converted
  scored = [it for it in items if it["item_id"] not in ("bbq/Age/3", "moral_stories/5")]
  scored += [dict(items[3], candidates=items[3]["candidates"][:2])]  # bbq/Age/3: 2 of 3 scored
  tables.write_rows(tmp_path / "s" / "scores.jsonl", score_rows(scored, lambda i, k: float(k)))
  result = run_cli(f"--items={folder}", f"--scores={tmp_path / 's'}",
                   f"--output_dir={tmp_path / 'out'}")
  assert result.returncode == 2
  assert ("scores are missing for 2 of 60 items (bbq 1 of 40, moral_stories 1 of 20)"
          in result.stderr)
  assert "--allow_missing" in result.stderr

  models = runner.evaluate_all(str(folder), [str(tmp_path / "s")], str(tmp_path / "out"), [],
                                evaluate.Options(allow_missing=True, n_resamples=200))
  coverage = models["s"]["coverage"]
  assert not coverage["complete"]
  assert coverage["scored_items"] == 58
  assert coverage["datasets"]["bbq"] == {"items": 40, "scored_items": 39, "share": 39 / 40}
  assert models["s"]["domains"]["bias"]["n_gold_pairs"] == 39 * 2
  written = json.loads((tmp_path / "out" / "s" / "metrics.json").read_text())
  assert written["coverage"] == coverage
  report = (tmp_path / "out" / "report.md").read_text()
  assert "incomplete scores" in report and "## Coverage" in report
  assert "- bbq: 39 of 40" in report


def test_nan_reward_is_an_error_naming_the_item(tmp_path, converted):
  folder, items = converted
  rows = score_rows(items, lambda i, k: float("nan") if (i, k) == (7, 2) else 0.0)
  tables.write_rows(tmp_path / "s" / "scores.parquet", rows)
  with pytest.raises(InputError, match=r"reward is nan for item 'bbq/Age/7' candidate 2"):
    scores_module.read_scores(tmp_path / "s")
  # JSON lines: a NaN literal, and a null reward.
  rows = score_rows(items, lambda i, k: float("nan") if (i, k) == (45, 1) else 0.0)
  tables.write_rows(tmp_path / "j" / "scores.jsonl", rows)
  with pytest.raises(InputError, match=r"reward is nan for item 'moral_stories/5' candidate 1"):
    scores_module.read_scores(tmp_path / "j")
  rows[3]["reward"] = None
  tables.write_rows(tmp_path / "j" / "scores.jsonl", rows)
  with pytest.raises(InputError, match=r"row 4: scores row lacks reward"):
    scores_module.read_scores(tmp_path / "j")


def test_scores_of_another_conversion_are_rejected(tmp_path, converted):
  folder, items = converted
  rows = score_rows(items, lambda i, k: 0.0) + [{"item_id": "elsewhere/1", "candidate": 0,
                                                 "reward": 1.0}]
  tables.write_rows(tmp_path / "s" / "scores.jsonl", rows)
  with pytest.raises(InputError, match="1 score rows name items that are not in the items table"):
    runner.evaluate_all(str(folder), [str(tmp_path / "s")], str(tmp_path / "out"), [],
                         evaluate.Options(n_resamples=10))


def test_items_are_kept_as_columns_without_texts(converted):
  """The metrics keep no row: one array per column, a repeated string a one-byte code into its
  column's few distinct values, the dataset analysis's fields (BBQ's facts) computed as the table
  is read."""
  folder, items = converted
  table = pairs_module.read_items(folder, evaluate.Options().item_fields)
  assert list(table.item_id) == [it["item_id"] for it in items]
  assert table.roles.shape == (60, 3) and list(table.roles[40]) == ["moral", "immoral", ""]
  assert list(table.candidate_length[0]) == [7, 11, 7] and list(table.n_candidates[-2:]) == [2, 2]
  assert json.loads(table.facts[0]) == items[0]["attributes"] and table.facts[-1] == ""
  for field in dataclasses.fields(table):  # no Python object per item, no text but the ids
    column = getattr(table, field.name)
    if isinstance(column, np.ndarray):
      assert column.dtype != object, field.name
    elif isinstance(column, Categorical):
      assert column.codes.dtype == np.int8 and len(column.categories) <= 8, field.name


def test_a_pair_of_an_unknown_item_is_named_with_its_file_and_row(tmp_path, converted):
  folder, items = converted
  rows = pair_rows(items)
  rows[5]["item_id"] = "bbq/Age/999"
  tables.write_rows(folder / "pairs.parquet", rows)
  tables.write_rows(tmp_path / "s" / "scores.jsonl", score_rows(items, lambda i, k: 0.0))
  with pytest.raises(InputError, match=r"pairs.parquet.*row 6.*names item 'bbq/Age/999'"):
    runner.evaluate_all(str(folder), [str(tmp_path / "s")], str(tmp_path / "out"), [],
                        evaluate.Options(n_resamples=10))


def _parquet_in_groups(path, rows, group_rows):
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  path.parent.mkdir(parents=True, exist_ok=True)
  pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=group_rows)


def test_scores_are_read_a_row_group_at_a_time_with_rows_numbered_in_their_file(tmp_path,
                                                                                converted):
  folder, items = converted
  rows = score_rows(items, lambda i, k: float(i % 5 - k))
  _parquet_in_groups(tmp_path / "s" / "scores.parquet", rows, 7)
  parts = list(scores_module.score_parts(tmp_path / "s"))
  assert [p.first_row for p in parts] == list(range(1, len(rows) + 1, 7))
  table = pairs_module.read_items(folder, evaluate.Options().item_fields)
  pair_table = pairs_module.read_pairs(folder, table)
  by_parts = pairs_module.join(table, pair_table, iter(parts))
  whole = pairs_module.join(table, pair_table, scores_module.read_scores(tmp_path / "s"))
  assert np.array_equal(by_parts.rewards, whole.rewards)
  rows[19]["reward"] = float("inf")
  _parquet_in_groups(tmp_path / "s" / "scores.parquet", rows, 7)
  with pytest.raises(InputError, match=r"scores.parquet, row 20: reward is inf"):
    list(scores_module.score_parts(tmp_path / "s"))
  rows[19]["reward"] = 0.0
  rows[30] = dict(rows[2])  # item 0's candidate 2 again, two row groups later
  _parquet_in_groups(tmp_path / "s" / "scores.parquet", rows, 7)
  with pytest.raises(InputError, match=r"item 'bbq/Age/0' candidate 2 is scored more than once"):
    pairs_module.join(table, pair_table, scores_module.score_parts(tmp_path / "s"),
                      allow_missing=True)


def test_rows_are_picked_by_id_from_the_row_groups_that_hold_them(tmp_path, converted):
  _, items = converted
  _parquet_in_groups(tmp_path / "t" / "items.parquet",
                     [{**it, "attributes": json.dumps(it["attributes"])} for it in items], 8)
  wanted = {"bbq/Age/3", "moral_stories/19", "elsewhere/1"}
  found = list(tables.iter_rows(tmp_path / "t", "items", ("item_id", "candidates"),
                                item_ids=wanted))
  assert [r["item_id"] for r in found] == ["bbq/Age/3", "moral_stories/19"]
  assert set(found[0]) == {"item_id", "candidates"} and found[1]["candidates"][1] == "immoral 19"


def test_a_label_source_that_is_not_text_is_named_with_its_row(converted):
  folder, items = converted
  rows = pair_rows(items)
  rows[3]["label_source"] = ["gold"]
  tables.write_rows(folder / "pairs.jsonl", rows)
  (folder / "pairs.parquet").unlink()
  table = pairs_module.item_table(items, pairs_module.no_fields)
  with pytest.raises(InputError, match=r"row 4: label_source must be a text, not \['gold'\]"):
    pairs_module.read_pairs(folder, table)
