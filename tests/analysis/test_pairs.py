"""Joining scores to items and pairs (analysis/tables/pairs.py): outcomes and selections with ties,
the pairs of some items, margins a chunk at a time, the items and pairs tables checked row by
row, and the join's coverage when scores are missing; on tables written by hand."""

import numpy as np
import pytest

from socialrm_jax.analysis.tables import pairs
from socialrm_jax.analysis.tables.reward_tables import Scores
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from tests.helpers.scored_fixtures import joined, tables_of

ITEMS = [
    {"id": "a", "candidates": ["x", "y", "z"], "roles": ["good", "bad", "bad"],
     "desirability": [1, -1, -1], "rewards": [2.0, 1.0, 2.0],
     "pairs": [(0, 1, "gold"), (0, 2, "gold")]},
    {"id": "b", "dataset": "other", "candidates": ["x", "y"], "roles": ["good", "bad"],
     "desirability": [1, -1], "rewards": [0.0, 3.0], "pairs": [(0, 1, "gold")]},
    {"id": "c", "candidates": ["x", "y"], "roles": ["good", "bad"], "desirability": [1, -1],
     "rewards": [5.0, 4.0], "pairs": [(0, 1, "gold")]},
]


def test_pair_outcomes_count_a_tie_as_one_half():
  np.testing.assert_array_equal(pairs.pair_outcome(np.array([2.0, 1.0, 0.5]),
                                                   np.array([1.0, 1.0, 0.75])), [1.0, 0.5, 0.0])


def test_tied_maxima_share_the_selection_and_padding_never_counts():
  weights = pairs.selection_weights(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 9.0], [0.0, 0.0, 0.0]]),
                                    np.array([[True] * 3, [True, True, False], [True] * 3]))
  np.testing.assert_allclose(weights, [[0, 0.5, 0.5], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3]])


def test_the_pairs_of_some_items_and_their_places():
  scored = joined(ITEMS)
  found, places = scored.pairs_of(np.array([2, 0]))
  assert found.tolist() == [3, 0, 1] and places.tolist() == [0, 1, 1]
  assert scored.outcome(found).tolist() == [1.0, 1.0, 0.5]
  empty, _ = scored.pairs_of(np.zeros(0, np.int64))
  assert empty.size == 0


def test_margins_by_indices_or_mask_a_chunk_at_a_time(monkeypatch):
  scored = joined(ITEMS)
  monkeypatch.setattr(pairs, "CHUNK", 2)
  chunks = pairs.pair_chunks(np.array([True, False, True, True]))
  assert [c.tolist() for c in chunks] == [[0], [2, 3]]
  np.testing.assert_array_equal(scored.reward_margin(np.array([True, False, True, True])),
                                [1.0, -3.0, 1.0])
  margin = scored.reward_margin(np.array([3, 1, 0]), dtype=np.float32)
  assert margin.dtype == np.float32 and margin.tolist() == [1.0, 0.0, 1.0]


def test_selection_and_ids_of_items():
  scored = joined(ITEMS)
  np.testing.assert_allclose(scored.selection(np.array([0, 1])), [[0.5, 0, 0.5], [0, 1, 0]])
  assert scored.ids_of(np.array([2, 0])) == ["c", "a"]
  assert scored.n_items == 3


def test_the_fit_half_is_a_stable_half_of_the_ids():
  ids = [f"item-{i}" for i in range(2000)]
  half = pairs.fit_half(ids)
  assert half.tolist() == pairs.fit_half(list(reversed(ids)))[::-1].tolist()
  assert 0.45 < half.mean() < 0.55


def test_item_columns_are_padded_across_batches_of_different_widths(monkeypatch):
  monkeypatch.setattr(tables, "BATCH_ROWS", 2)
  rows = [{"item_id": str(i), "dataset": "d", "candidates": ["ab"] * n, "roles": ["r"] * n,
           "desirability": [1] + [-1] * (n - 1)} for i, n in enumerate((2, 3, 4, 2, 3))]
  table = pairs.item_table(rows, pairs.no_fields)
  assert table.roles.tolist()[2:4] == [["r"] * 4, ["r", "r", "", ""]]
  assert table.desirability.tolist()[1] == [1, -1, -1, 0]
  assert table.candidate_length.tolist()[4] == [2, 2, 2, 0]
  assert table.n_candidates.tolist() == [2, 3, 4, 2, 3]


def item_rows():
  return tables_of(ITEMS)[0]


@pytest.mark.parametrize("change, message", [
    ({"candidates": "x"}, "candidates must be a list of texts and roles a list of texts as long"),
    ({"roles": ["good"]}, "candidates must be a list of texts and roles a list of texts as long"),
    ({"desirability": [1]}, "desirability must be a list of integers, one per candidate"),
    ({"desirability": [1, True]}, "desirability must be integers, not True"),
    ({"desirability": [1, 1.5]}, "desirability must be integers, not 1.5"),
    ({"desirability": [1, 300]}, "desirability [1, 300] is out of range"),
    ({"item_id": 7}, "item_id must be a text, not 7"),
    ({"subset": ["s"]}, "subset must be a text, not ['s']"),
    ({"item_id": "a"}, "item_id 'a' appears twice in the items table"),
])
def test_a_bad_items_row_is_named(change, message):
  rows = item_rows()
  rows[1] = {**rows[1], **change}
  with pytest.raises(InputError) as raised:
    pairs.item_table(rows, pairs.no_fields)
  assert raised.value.reason == message
  assert raised.value.row == 2


def test_an_items_row_without_an_id_is_named():
  rows = item_rows()
  del rows[2]["item_id"]
  with pytest.raises(InputError, match="the row has no item_id") as raised:
    pairs.item_table(rows, pairs.no_fields)
  assert raised.value.row == 3


@pytest.mark.parametrize("change, message", [
    ({"item_id": "zz"}, "pair 'c:0>1' names item 'zz', which is not in the items table"),
    ({"rejected_index": 2}, "pair 'c:0>1' has a candidate index out of range"),
    ({"chosen_index": -1}, "pair 'c:0>1' has a candidate index out of range"),
    ({"chosen_index": 0.0}, "chosen_index and rejected_index must be integers, not 0.0"),
    ({"label_source": 1}, "label_source must be a text, not 1"),
])
def test_a_bad_pairs_row_is_named(change, message):
  items, pair_rows, _ = tables_of(ITEMS)
  pair_rows[3] = {**pair_rows[3], **change}
  with pytest.raises(InputError) as raised:
    pairs.pair_table(pair_rows, pairs.item_table(items, pairs.no_fields))
  assert (raised.value.reason, raised.value.row) == (message, 4)


def test_pairs_are_put_in_item_order():
  items, pair_rows, _ = tables_of(ITEMS)
  table = pairs.pair_table(pair_rows[::-1], pairs.item_table(items, pairs.no_fields))
  assert table.item.tolist() == [0, 0, 1, 2]
  assert table.rejected.tolist() == [2, 1, 1, 1]  # an item's pairs keep their table order
  assert table.source.strings().tolist() == ["gold"] * 4


def test_items_given_as_rows_need_their_dataset_analyses_fields():
  """Rows without the analyses' fields would silently lose StereoSet's strata and BBQ's facts."""
  with pytest.raises(ValueError, match="Options.item_fields"):
    pairs.join(*tables_of(ITEMS))


def test_missing_scores_are_an_error_counted_per_dataset_or_left_out():
  items, pair_rows, scores = tables_of(ITEMS)
  some = Scores.of(["a", "a", "a", "c", "c"], [0, 1, 2, 0, 1], [2.0, 1.0, 2.0, 5.0, 4.0], "s.jsonl")
  with pytest.raises(InputError, match=r"^s.jsonl: scores are missing for 1 of 3 items \(other 1 "
                     r"of 1\); score them, or pass --allow_missing"):
    pairs.join(items, pair_rows, some, fields=pairs.no_fields)
  scored = pairs.join(items, pair_rows, some, allow_missing=True, fields=pairs.no_fields)
  assert scored.coverage == {
      "complete": False, "items": 3, "scored_items": 2, "pairs": 4, "scored_pairs": 3,
      "datasets": {"d": {"items": 2, "scored_items": 2, "share": 1.0},
                   "other": {"items": 1, "scored_items": 0, "share": 0.0}}}
  # Item c is renumbered 1, its pair with it; its position in the items table stays 2.
  assert scored.item.tolist() == [0, 2] and scored.pair_item.tolist() == [0, 0, 1]
  assert scored.ids_of(np.array([1])) == ["c"]
  assert scored.outcome(np.arange(3)).tolist() == [1.0, 0.5, 1.0]
  full = pairs.join(items, pair_rows, [some, Scores.of(["b", "b"], [0, 1], [0.0, 3.0], "t")],
                    fields=pairs.no_fields)
  np.testing.assert_array_equal(full.rewards, joined(ITEMS).rewards)
  assert full.rewards[1, 2] == -np.inf  # past item b's two candidates


@pytest.mark.parametrize("scores, message", [
    (Scores.of(["a", "zz"], [0, 0], [1.0, 1.0], "s"),
     "1 score rows name items that are not in the items table (first: 'zz')"),
    (Scores.of(["b"], [2], [1.0], "s"), "candidate 2 is out of range for item 'b' (2 candidates)"),
    (Scores.of(["a", "a"], [1, 1], [1.0, 2.0], "s"),
     "item 'a' candidate 1 is scored more than once"),
])
def test_scores_of_another_conversion_are_refused(scores, message):
  items, pair_rows, _ = tables_of(ITEMS)
  with pytest.raises(InputError) as raised:
    pairs.join(items, pair_rows, scores, allow_missing=True, fields=pairs.no_fields)
  assert raised.value.reason.startswith(message)


def test_a_reader_finds_ids_by_position_in_the_file(tmp_path):
  tables.write_rows(tmp_path / "items.jsonl", item_rows())
  ids_at = pairs.ids_reader(tmp_path)
  assert ids_at(np.array([2, 0, 2])) == ["c", "a", "c"]
  assert ids_at(np.zeros(0, np.int64)) == []
