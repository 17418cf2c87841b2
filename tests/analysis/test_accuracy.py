"""Pair accuracy (analysis/metrics/accuracy.py): the per-item sums by label source, and the
accuracies, counts and reasons written from resampled sums, on items worked by hand."""

import numpy as np
import pytest

from socialrm_jax.analysis.metrics import accuracy
from socialrm_jax.analysis.resampling import bootstrap, estimates
from tests.helpers.scored_fixtures import joined, sums_of

STEREO = ["stereotype", "anti_stereotype"]
ITEMS = [
    # g1: two gold pairs of 2-character responses (length-matched), won and tied.
    {"id": "g1", "candidates": ["aa", "bb", "cc"], "roles": ["good", "bad", "bad"],
     "desirability": [1, -1, -1], "rewards": [2.0, 1.0, 2.0],
     "pairs": [(0, 1, "gold"), (0, 2, "gold")]},
    # g2: one gold pair, lost; 10 and 30 characters, not length-matched.
    {"id": "g2", "candidates": ["a" * 10, "b" * 30], "roles": ["good", "bad"],
     "desirability": [1, -1], "rewards": [0.0, 1.0], "pairs": [(0, 1, "gold")]},
    # c1: a directional pair (chosen: the anti-stereotype) the stereotype wins.
    {"id": "c1", "candidates": ["x", "y"], "roles": STEREO, "desirability": [0, 0],
     "rewards": [3.0, 1.0], "pairs": [(1, 0, "directional")]},
    # s1: a tied directional pair and two control pairs, both won by the related sentence.
    {"id": "s1", "candidates": ["x", "y", "z"], "roles": [*STEREO, "unrelated"],
     "desirability": [0, 0, 0], "rewards": [1.0, 1.0, 0.0],
     "pairs": [(1, 0, "directional"), (0, 2, "control"), (1, 2, "control")]},
]


def test_item_columns_sum_each_items_pairs_by_label_source():
  columns = accuracy.item_columns(joined(ITEMS), np.arange(4))
  expected = {
      "gold_wins": [1.5, 0, 0, 0], "gold_pairs": [2, 1, 0, 0], "gold_items": [1, 1, 0, 0],
      # g1: a tie and no loss is 1/2; g2: a loss is 0.
      "group_won": [0.5, 0, 0, 0],
      "matched_wins": [1.5, 0, 0, 0], "matched_pairs": [2, 0, 0, 0],
      "matched_items": [1, 0, 0, 0],
      # c1: the stereotype (rejected) wins outright, 1; s1: a tie, 1/2.
      "stereotype_wins": [0, 0, 1, 0.5], "directional_pairs": [0, 0, 1, 1],
      "directional_items": [0, 0, 1, 1],
      "control_wins": [0, 0, 0, 2], "control_pairs": [0, 0, 0, 2], "control_items": [0, 0, 0, 1]}
  assert set(columns) == set(expected)
  for name, values in expected.items():
    np.testing.assert_allclose(columns[name], values, err_msg=name)


def test_item_columns_of_some_items_keep_their_order():
  columns = accuracy.item_columns(joined(ITEMS), np.array([1, 0]))
  np.testing.assert_allclose(columns["gold_pairs"], [1, 2])
  np.testing.assert_allclose(columns["gold_wins"], [0, 1.5])


COLUMNS = ("gold_wins", "gold_pairs", "gold_items", "matched_wins", "matched_pairs",
           "matched_items", "control_wins", "control_pairs", "control_items", "directional_pairs")


def cells(*cells):
  """Sums of one row (no resamples) per cell, each given as (stratum, {column: sum})."""
  return sums_of([stratum for stratum, _ in cells], COLUMNS,
                 [[[values.get(c, 0.0) for c in COLUMNS] for _, values in cells]])


def test_summarise_the_hand_items():
  columns = accuracy.item_columns(joined(ITEMS), np.arange(4))
  node = accuracy.summarise(cells((bootstrap.Stratum("bias", "s", "", ""),
                                   {c: columns[c].sum() for c in COLUMNS})))
  # (1 + 1/2 + 0) / 3 gold pairs; the length-matched ones: (1 + 1/2) / 2.
  assert node["accuracy"] == pytest.approx(0.5)
  assert node["accuracy_length_matched"] == pytest.approx(0.75)
  assert (node["n_gold_pairs"], node["n_gold_items"], node["n_length_matched_pairs"]) == (3, 2, 2)
  assert node["control_accuracy"] == 1.0 and node["n_directional_pairs"] == 2
  # Two items are too few for an interval: the value stays, the interval says why.
  assert node["ci95"] == estimates.Missing(estimates.too_few(2))


def test_directional_pairs_alone_have_no_accuracy_and_say_why():
  node = accuracy.summarise(cells((bootstrap.Stratum("bias", "s", "", ""),
                                   {"directional_pairs": 4})))
  assert node["accuracy"] == estimates.Missing(accuracy.NO_GOLD)
  assert node["n_gold_pairs"] == 0 and node["n_directional_pairs"] == 4
  assert accuracy.LENGTH_MATCHED not in node and "control_accuracy" not in node


def test_no_length_matched_pair_is_a_reason():
  node = accuracy.summarise(cells((bootstrap.Stratum("bias", "s", "", ""),
                                   {"gold_wins": 1, "gold_pairs": 2, "gold_items": 2})))
  assert node["accuracy"] == 0.5
  assert node[accuracy.LENGTH_MATCHED] == estimates.Missing(accuracy.NO_MATCHED)
  assert node["n_length_matched_pairs"] == 0


def test_dataset_summary_per_subset():
  node = accuracy.dataset_summary(cells(
      (bootstrap.Stratum("bias", "age", "ambiguous", ""), {"gold_wins": 1, "gold_pairs": 4}),
      (bootstrap.Stratum("bias", "age", "disambiguated", ""), {"gold_wins": 3, "gold_pairs": 4}),
      (bootstrap.Stratum("bias", "race", "ambiguous", ""), {"gold_wins": 2, "gold_pairs": 2})))
  # age: (1 + 3) / 8; race: 2 / 2; all: 6 / 10.
  assert node["accuracy"] == pytest.approx(0.6)
  assert node["subsets"]["age"]["accuracy"] == pytest.approx(0.5)
  assert node["subsets"]["race"]["accuracy"] == 1.0
  assert list(node["subsets"]) == ["age", "race"]


def test_domain_summary_adds_every_datasets_cells_of_the_domain():
  per_dataset = {
      "a": cells((bootstrap.Stratum("bias", "x", "", ""),
                  {"gold_wins": 3, "gold_pairs": 4, "gold_items": 4})),
      "b": cells((bootstrap.Stratum("bias", "y", "", ""),
                  {"gold_wins": 1, "gold_pairs": 4, "gold_items": 2}),
                 (bootstrap.Stratum("safety", "z", "", ""),
                  {"gold_wins": 2, "gold_pairs": 2, "gold_items": 2}))}
  domains = accuracy.domain_summary(per_dataset)
  assert list(domains) == ["bias", "safety"]
  # bias: (3 + 1) / (4 + 4); safety: b's 2 of 2.
  assert domains["bias"]["accuracy"] == pytest.approx(0.5)
  assert domains["bias"]["datasets"] == ["a", "b"]
  assert domains["bias"]["items_by_dataset"] == {"a": 4, "b": 2}
  assert domains["safety"]["accuracy"] == 1.0 and domains["safety"]["datasets"] == ["b"]
