"""Per-pair scores (analysis/tables/pair_scores.py): the pairs table with each pair's two rewards
and its margin, in the pairs table's order, null where the item was not scored."""

import math

import pandas as pd

from socialrm_jax.analysis.tables import pair_scores
from socialrm_jax.base import tables
from tests.helpers.scored_fixtures import tables_of

ITEMS = [
    {"id": "a", "candidates": ["x", "y", "z"], "roles": ["good", "bad", "bad"],
     "desirability": [1, -1, -1], "rewards": [0.5, 2.0, -1.0],
     "pairs": [(0, 1, "gold"), (0, 2, "gold")]},
    {"id": "b", "candidates": ["x", "y"], "roles": ["anti_stereotype", "stereotype"],
     "desirability": [0, 0], "rewards": [1.0, 1.25], "pairs": [(0, 1, "directional")],
     "dataset": "crows_pairs", "subset": "gender"},
    {"id": "c", "candidates": ["x", "y"], "roles": ["good", "bad"], "desirability": [1, -1],
     "rewards": [], "pairs": [(0, 1, "gold")]},  # not scored
]


def write(folder):
  item_rows, pair_rows, scores = tables_of(ITEMS)
  tables.write_rows(folder / "items.jsonl", item_rows)
  tables.write_rows(folder / "pairs.parquet", pair_rows)
  tables.write_rows(folder / "scores.jsonl", [
      {"item_id": i, "candidate": int(c), "reward": float(r)}
      for i, c, r in zip(scores.item_id.tolist(), scores.candidate, scores.reward)])


def test_every_pair_with_its_rewards_and_margin(tmp_path):
  write(tmp_path)
  frame = pair_scores.frame(tmp_path, tmp_path / "scores.jsonl")
  assert list(frame.columns) == [*pair_scores.PAIR_COLUMNS, *pair_scores.REWARD_COLUMNS]
  assert frame["pair_id"].tolist() == ["a:0>1", "a:0>2", "b:0>1", "c:0>1"]
  assert frame.loc[1, ["dataset", "label_source", "chosen_role", "rejected_role"]].tolist() == [
      "d", "gold", "good", "bad"]
  assert frame.loc[2, ["dataset", "subset", "rejected_role"]].tolist() == [
      "crows_pairs", "gender", "stereotype"]
  # margin = chosen - rejected: 0.5 - 2, 0.5 - (-1), 1 - 1.25; item c has no scores.
  assert frame["reward_chosen"].tolist()[:3] == [0.5, 0.5, 1.0]
  assert frame["reward_rejected"].tolist()[:3] == [2.0, -1.0, 1.25]
  assert frame["margin"].tolist()[:3] == [-1.5, 1.5, -0.25]
  assert all(math.isnan(frame.loc[3, column]) for column in pair_scores.REWARD_COLUMNS)


def test_the_items_file_finds_the_pairs_beside_it(tmp_path):
  write(tmp_path)
  pd.testing.assert_frame_equal(pair_scores.frame(tmp_path / "items.jsonl",
                                                  tmp_path / "scores.jsonl"),
                                pair_scores.frame(tmp_path, tmp_path / "scores.jsonl"))
