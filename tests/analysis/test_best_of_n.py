"""RewardBench 2's scores (analysis/metrics/best_of_n.py) on prompts worked by hand: a best-of-N
win, a tie at the boundary and a loss; a Ties prompt's reference and tied rows; the Ties score's weights.
(tests/datasets/test_preference_rewardbench2.py compares whole files with the wheel's scoring.)"""

import math

import numpy as np
import pytest

from socialrm_jax.analysis.metrics import best_of_n
from tests.helpers.scored_fixtures import scored


def test_item_facts_tell_plain_best_of_n_and_ties_rows_apart():
  assert best_of_n.item_facts({"attributes": {"num_correct": 1, "id": "ref:12"}}) == "ref:12"
  assert best_of_n.item_facts({"attributes": {"num_correct": 2, "id": "tied:12"}}) == "tied:12"
  assert best_of_n.item_facts({"attributes": {"num_correct": 1, "id": "x"}}) == best_of_n.BEST_OF_N
  assert best_of_n.item_facts({"attributes": {"id": "ref:12"}}) == ""


def candidates(correct, incorrect, facts):
  return {"roles": ["chosen"] * len(correct) + ["rejected"] * len(incorrect),
          "desirability": [1] * len(correct) + [-1] * len(incorrect),
          "rewards": [*correct, *incorrect], "facts": facts}


def test_best_of_n_wins_ties_and_losses_by_hand():
  """A correct answer above both incorrect ones: 1; the worst correct answer tied with the best
  incorrect one (two candidates at the boundary): 1/2; below: 0."""
  view = scored([candidates([3.0], [1.0, 2.0], "best_of_n"),
                 candidates([2.0], [2.0, 1.0], "best_of_n"),
                 candidates([0.0], [1.0, -1.0], "best_of_n")])
  columns = best_of_n.item_columns(view, np.arange(3))
  np.testing.assert_allclose(columns["bon_prompts"], [1, 1, 1])
  np.testing.assert_allclose(columns["bon_wins"], [1.0, 0.5, 0.0])
  np.testing.assert_allclose(columns["ties_ref_prompts"], [0, 0, 0])


def test_a_ties_prompt_by_hand():
  """ref:1 has one correct answer (3) over an incorrect one (1): margin 2. tied:1 has two correct
  answers (5, 4) over an incorrect one (1): margin 3, correct-correct spread 1. Hardest margin
  min(2, 3) = 2 > spread: preferred and preferred-hard; margin score tanh(2 / 1 - 1). The values
  ride on the ref row; the tied row carries none."""
  view = scored([candidates([3.0], [1.0], "ref:1"), candidates([5.0, 4.0], [1.0], "tied:1")])
  columns = best_of_n.item_columns(view, np.arange(2))
  for name in ("ties_ref_prompts", "ties_ref_accurate", "ties_tied_prompts",
               "ties_tied_accurate", "ties_margin_prompts", "ties_preferred",
               "ties_preferred_hard", "ties_ratio_prompts"):
    np.testing.assert_allclose(columns[name], [1, 0], err_msg=name)
  np.testing.assert_allclose(columns["ties_margin_score"], [math.tanh(1.0), 0.0])
  np.testing.assert_allclose(columns["bon_prompts"], [0, 0])


def test_the_ties_score_weights_by_hand():
  """0.3 tied accuracy + 0.3 reference accuracy + 0.2 preferred + 0.2 preferred-hard + 0.01 mean
  margin score (process_single_model's weights)."""
  sums = {"ties_tied_prompts": 2, "ties_tied_accurate": 1, "ties_ref_prompts": 2,
          "ties_ref_accurate": 2, "ties_margin_prompts": 2, "ties_preferred": 1,
          "ties_preferred_hard": 0, "ties_ratio_prompts": 1, "ties_margin_score": 0.5}
  score = best_of_n.ties_score(lambda column: np.array([float(sums[column])]))
  assert score[0] == pytest.approx(0.3 * 0.5 + 0.3 * 1.0 + 0.2 * 0.5 + 0.2 * 0.0 + 0.01 * 0.5)
  # No prompt with both rows: only the reference accuracy counts.
  only_ref = {**{k: 0.0 for k in sums}, "ties_ref_prompts": 2, "ties_ref_accurate": 1}
  assert best_of_n.ties_score(lambda column: np.array([only_ref[column]]))[0] == pytest.approx(
      0.3 * 0.5)
