"""Scores tables (analysis/tables/reward_tables.py): JSON lines and parquet row groups read into
columns with each distinct item id kept once, reward vectors where every row has one, every bad
value named with its file and row, and a scores set's display name."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from socialrm_jax.analysis.tables import reward_tables
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError

ROWS = [{"item_id": "a", "candidate": 0, "reward": 1.5, "rewards": [1.0, 2.0]},
        {"item_id": "a", "candidate": 1, "reward": -0.5, "rewards": [0.0, -1.0]},
        {"item_id": "b", "candidate": 0, "reward": 2, "rewards": [2.0, 2.0], "extra": "ignored"}]


def parquet(path, rows, group_rows):
  path.parent.mkdir(parents=True, exist_ok=True)
  pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=group_rows)


def test_json_lines_as_columns_each_id_kept_once(tmp_path):
  tables.write_rows(tmp_path / "scores.jsonl", ROWS)
  scores = reward_tables.read_scores(tmp_path / "scores.jsonl")
  assert scores.names.tolist() == ["a", "b"] and scores.item.tolist() == [0, 0, 1]
  assert scores.item_id.tolist() == ["a", "a", "b"] and scores.row_id(2) == "b"
  assert scores.candidate.tolist() == [0, 1, 0]
  assert scores.reward.tolist() == [1.5, -0.5, 2.0] and scores.reward.dtype == np.float64
  np.testing.assert_array_equal(scores.rewards, [[1.0, 2.0], [0.0, -1.0], [2.0, 2.0]])
  tables.write_rows(tmp_path / "plain" / "scores.jsonl",
                    [{k: v for k, v in row.items() if k != "rewards"} for row in ROWS[:2]]
                    + [ROWS[2]])
  assert reward_tables.read_scores(tmp_path / "plain").rewards is None  # not every row has one


def test_parquet_row_groups_are_parts_numbered_in_their_file(tmp_path):
  rows = [{"item_id": f"i{j // 2}", "candidate": j % 2, "reward": float(j)} for j in range(7)]
  parquet(tmp_path / "s" / "scores.parquet", rows, 3)
  parts = list(reward_tables.score_parts(tmp_path / "s"))
  assert [p.first_row for p in parts] == [1, 4, 7]
  assert [p.row_number(1) for p in parts] == [2, 5, 8]
  # Each part numbers its own ids; the whole set renumbers them past the parts before it.
  assert [p.item_id.tolist() for p in parts] == [["i0", "i0", "i1"], ["i1", "i2", "i2"], ["i3"]]
  whole = reward_tables.read_scores(tmp_path / "s")
  assert whole.item_id.tolist() == [r["item_id"] for r in rows]
  assert whole.reward.tolist() == [float(j) for j in range(7)]
  assert whole.row_number(0) is None and whole.rewards is None


@pytest.mark.parametrize("row, message", [
    ([1, 2], "row 2: expected a JSON object"),
    ({"item_id": "a", "candidate": 0}, "row 2: scores row lacks reward"),
    ({"item_id": "a", "candidate": 0.5, "reward": 1.0}, "row 2: candidate must be an integer"),
    ({"item_id": "a", "candidate": 0, "reward": "1.0"}, "row 2: candidate must be an integer and "
                                                       "reward a number"),
    ({"item_id": "a", "candidate": 1, "reward": float("nan")},
     "row 2: reward is nan for item 'a' candidate 1 (1 non-finite rewards here)"),
    ({"item_id": "a", "candidate": 1, "reward": 1.0, "rewards": [1.0]},
     "row 2: rewards has 1 values here but 2 in an earlier row"),
])
def test_a_bad_json_lines_row_is_named(tmp_path, row, message):
  path = tmp_path / "scores.jsonl"
  path.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(row) + "\n")
  with pytest.raises(InputError) as raised:
    list(reward_tables.score_parts(path))
  assert str(raised.value).startswith(f"{path}, {message}")


def test_a_bad_parquet_file_is_named_with_its_row(tmp_path):
  path = tmp_path / "scores.parquet"
  parquet(path, [{"item_id": "a", "candidate": 0}], 10)
  with pytest.raises(InputError, match="scores table lacks column\\(s\\) reward"):
    list(reward_tables.score_parts(path))
  parquet(path, [{"item_id": "a", "candidate": c, "reward": None if c == 4 else 0.0}
                 for c in range(6)], 3)
  with pytest.raises(InputError, match=r"scores.parquet, row 5: reward is null"):
    list(reward_tables.score_parts(path))


def test_reward_vectors_of_another_length_in_a_later_row_group_are_an_error(tmp_path):
  rows = [{"item_id": f"i{j}", "candidate": 0, "reward": 0.0,
           "rewards": [0.0, 1.0] if j < 7 else [0.0, 1.0, 2.0]} for j in range(10)]
  parquet(tmp_path / "s" / "scores.parquet", rows, 7)
  with pytest.raises(InputError, match=r"row 8: rewards has 3 values here but 2 in an earlier"):
    list(reward_tables.score_parts(tmp_path / "s"))
  assert all(p.rewards is None for p in reward_tables.score_parts(tmp_path / "s", vectors=False))


def test_the_display_name_from_run_json_else_the_folder_or_the_file(tmp_path):
  tables.atomic_write_json(tmp_path / "x" / "run.json", {"model": "/models/org/rm-7b/"})
  assert reward_tables.model_name(tmp_path / "x") == "rm-7b"
  assert reward_tables.model_name(tmp_path / "x" / "scores-00000.parquet") == "rm-7b"
  (tmp_path / "y").mkdir()
  (tmp_path / "y" / "run.json").write_text("[not an object]")
  assert reward_tables.model_name(tmp_path / "y") == "y"
  assert reward_tables.model_name(tmp_path / "y" / "scores.parquet") == "y"
  assert reward_tables.model_name(tmp_path / "y" / "mine.jsonl") == "mine"
