"""The worst pairs (analysis/tables/evidence.py): which pairs a model most gets wrong, picked
from the arrays a chunk at a time, their texts read from the items table, and the report's
section; on items worked by hand."""

import numpy as np

from socialrm_jax.analysis.tables import evidence, pairs
from tests.helpers.scored_fixtures import joined, tables_of

STEREO = ["anti_stereotype", "stereotype"]
ITEMS = [
    # Margins r(rejected) - r(chosen): a 2 - 0.5 = 1.5 and -1 - 0.5 = -1.5; b 1.5; c -3.
    {"id": "b", "candidates": ["good b", "bad b"], "roles": ["good", "bad"],
     "desirability": [1, -1], "rewards": [1.0, 2.5], "pairs": [(0, 1, "gold")]},
    {"id": "a", "candidates": ["good a", "bad a", "worse a"], "roles": ["good", "bad", "bad"],
     "desirability": [1, -1, -1], "rewards": [0.5, 2.0, -1.0],
     "pairs": [(0, 1, "gold"), (0, 2, "gold")]},
    {"id": "c", "candidates": ["good c", "bad c"], "roles": ["good", "bad"],
     "desirability": [1, -1], "rewards": [3.0, 0.0], "pairs": [(0, 1, "gold")]},
    # A directional pair: its rejected side is the stereotype; margin 4 - 1 = 3.
    {"id": "s", "candidates": ["anti", "stereo"], "roles": STEREO, "desirability": [0, 0],
     "rewards": [1.0, 4.0], "pairs": [(0, 1, "directional")]},
]


def picked(worst):
  return [(p["item_id"], p["rejected_index"], p["margin"]) for p in worst]


def test_gold_pairs_by_margin_for_the_rejected_ties_by_item_id():
  scored = joined(ITEMS)
  assert picked(evidence.worst_pairs(scored, np.arange(4), count=2)) == [
      ("a", 1, 1.5), ("b", 1, 1.5)]
  worst = evidence.worst_pairs(scored, np.arange(4))
  assert picked(worst) == [("a", 1, 1.5), ("b", 1, 1.5), ("a", 2, -1.5), ("c", 1, -3.0)]
  assert worst[0] == {"item_id": "a", "label_source": "gold", "prompt": None, "chosen": None,
                      "rejected": None, "chosen_index": 0, "rejected_index": 1,
                      "chosen_role": "good", "rejected_role": "bad", "chosen_reward": 0.5,
                      "rejected_reward": 2.0, "margin": 1.5}


def test_the_same_pairs_whatever_the_chunks_and_the_item_order(monkeypatch):
  scored = joined(ITEMS)
  expected = picked(evidence.worst_pairs(scored, np.arange(3), count=2))
  monkeypatch.setattr(pairs, "CHUNK", 1)  # one item at a time: the threshold kept across chunks
  assert picked(evidence.worst_pairs(scored, np.array([2, 1, 0]), count=2)) == expected
  assert picked(evidence.worst_pairs(scored, np.array([2, 0]), count=1)) == [("b", 1, 1.5)]


def test_directional_pairs_where_there_is_no_gold_pair():
  scored = joined(ITEMS)
  (worst,) = evidence.worst_pairs(scored, np.array([3]))
  assert (worst["label_source"], worst["rejected_role"], worst["margin"]) == (
      "directional", "stereotype", 3.0)
  assert evidence.worst_pairs(joined([{**ITEMS[0], "pairs": []}]), np.arange(1)) == []


def test_add_texts_fills_in_the_prompt_and_both_responses_cut():
  item_rows, _, _ = tables_of(ITEMS)
  item_rows[1]["prompt"] = [{"role": "user", "content": "hi"},
                            {"role": "assistant", "content": "x" * 700}]
  tree = {"datasets": {"d": {"worst_pairs": evidence.worst_pairs(joined(ITEMS), np.arange(3),
                                                                 count=2)},
                       "other": None}}
  asked = []

  def rows_of(ids):
    asked.append(set(ids))
    return item_rows
  evidence.add_texts([tree], rows_of)
  assert asked == [{"a", "b"}]
  first, second = tree["datasets"]["d"]["worst_pairs"]
  assert (first["chosen"], first["rejected"]) == ("good a", "bad a")
  assert len(first["prompt"]) == evidence.MAX_CHARACTERS
  assert first["prompt"].startswith("user: hi\nassistant: xxx")
  assert first["prompt"].endswith(evidence.ELLIPSIS)
  assert (second["prompt"], second["chosen"], second["rejected"]) == ("q", "good b", "bad b")


def test_worst_pairs_cut_long_texts_and_prompts():
  assert evidence.cut("x" * 10, 8) == "xx [...]" and evidence.cut("short", 8) == "short"
  assert evidence.prompt_text([{"role": "user", "content": "hi"}]) == "hi"
  assert evidence.prompt_text([{"role": "user", "content": "a"}, {"role": "assistant",
                                                                   "content": "b"}]) == (
      "user: a\nassistant: b")


def test_report_section_per_model_and_dataset():
  worst = evidence.worst_pairs(joined(ITEMS), np.arange(3), count=1)
  worst[0].update(prompt="\n".join(f"line {i}" for i in range(6)), chosen="good a",
                  rejected="bad a")
  lines = evidence.report_lines({"rm": {"datasets": {"d": {"worst_pairs": worst},
                                                     "e": {"worst_pairs": []}}}})
  assert lines[0] == f"## {evidence.SECTION_TITLE}"
  text = "\n".join(lines)
  assert "### rm: d\n\nThe 1 pairs with the largest margin for the rejected response." in text
  assert "**1. `a`**: margin +1.5000 (rejected 2.0000, chosen 0.5000)" in text
  # The prompt's first four lines, then a mark that it goes on.
  assert "Prompt:\n> line 0\n> line 1\n> line 2\n> line 3\n> [...]\n" in text
  assert "Rejected (bad):\n> bad a" in text and "Chosen (good):\n> good a" in text
  assert "### rm: e" not in text
  assert evidence.report_lines({"rm": {"datasets": {"e": {"worst_pairs": []}}}}) == []
