"""Synthetic reward models (analysis/tables/synthetic.py): the shift that wins a pair with a given
probability (against scipy), each candidate's planted shift by hand, fresh rewards from a seed,
and the copied and tiled item sets."""

import math

import numpy as np
import pytest
from scipy import stats

from socialrm_jax.analysis.tables import synthetic
from tests.helpers.scored_fixtures import joined, tables_of

ITEMS = [
    {"id": "q", "domain": "bias", "candidates": ["u", "b" * 100, "a"],
     "roles": ["unknown", "biased", "anti_biased"], "desirability": [1, -1, -1],
     "rewards": [0.0, 0.0, 0.0], "pairs": [(0, 1, "gold"), (0, 2, "gold")]},
    {"id": "m", "domain": "morality", "context_condition": "without_norm", "candidates": ["m", "i"],
     "roles": ["moral", "immoral"], "desirability": [1, -1], "rewards": [0.0, 0.0],
     "pairs": [(0, 1, "gold")]},
    {"id": "c", "domain": "bias", "candidates": ["x", "y"], "roles": ["anti_stereotype",
                                                                      "stereotype"],
     "desirability": [0, 0], "rewards": [0.0, 0.0], "pairs": [(0, 1, "directional")]},
]


@pytest.mark.parametrize("p", [0.5, 0.6, 0.75, 0.9, 0.3])
def test_the_shift_wins_a_pair_with_its_probability(p):
  # r1 - r2 ~ N(d, 2): P(r1 > r2) = Phi(d / sqrt(2)).
  d = synthetic.shift_for(p)
  assert stats.norm(loc=d, scale=math.sqrt(2)).sf(0.0) == pytest.approx(p, abs=1e-12)
  assert (d > 0) == (p > 0.5)


def test_planted_shifts_by_hand():
  plan = synthetic.Plan("p", desirable={"bias": 1.0, "morality": -0.5}, stereotype=0.25,
                        length=2.0)
  shifts = plan.shifts(joined(ITEMS))
  # q: the desirable answer +1; the biased one +0.25 and 2 ln(100) for its 100 characters (the
  # others have 1: ln 1 = 0). m: -0.5 on the moral action. c: +0.25 on the stereotype; nothing
  # past its two candidates.
  np.testing.assert_allclose(shifts, [[1.0, 0.25 + 2 * math.log(100), 0.0],
                                      [-0.5, 0.0, 0.0],
                                      [0.0, 0.25, 0.0]])
  norm_only = synthetic.Plan("n", desirable={"morality": -0.5}, norm_only=True)
  np.testing.assert_allclose(norm_only.shifts(joined(ITEMS))[1], [0.0, 0.0, 0.0])


def test_fresh_rewards_are_seeded_noise_plus_the_shifts():
  scored = joined(ITEMS)
  plan = synthetic.Plan("p", desirable={"bias": 1.0})
  rewards = plan.rewards(scored, np.random.default_rng(7))
  noise = np.random.default_rng(7).standard_normal((3, 3))
  np.testing.assert_allclose(rewards[scored.valid], (noise + plan.shifts(scored))[scored.valid])
  assert rewards[2, 2] == -np.inf
  again = plan.scored(scored, np.random.default_rng(7))
  np.testing.assert_array_equal(again.rewards, rewards)
  assert again.pair_item is scored.pair_item


def test_copies_have_their_own_ids_in_the_same_cells():
  item_rows, pair_rows, _ = tables_of(ITEMS[:2])
  items, pairs = synthetic.copied(item_rows, pair_rows, 2)
  assert [i["item_id"] for i in items] == ["q#0", "m#0", "q#1", "m#1"]
  assert [i["domain"] for i in items] == ["bias", "morality"] * 2
  assert [(p["item_id"], p["pair_id"]) for p in pairs][-1] == ("m#1", "m:0>1#1")
  assert len(pairs) == 6


def test_tiled_items_keep_their_own_pairs():
  scored = joined([{**item, "rewards": rewards} for item, rewards in
                   zip(ITEMS, ([2.0, 1.0, 3.0], [0.0, 1.0], [1.0, 0.0]))])
  tiled = synthetic.tiled(scored, 3)
  assert tiled.n_items == 9 and tiled.pair_item.tolist() == [0, 0, 1, 2, 3, 3, 4, 5, 6, 6, 7, 8]
  np.testing.assert_array_equal(tiled.rewards[3:6], scored.rewards)
  np.testing.assert_array_equal(tiled.outcome(np.arange(12)),
                                np.tile(scored.outcome(np.arange(4)), 3))
  assert tiled.domain.strings().tolist() == ["bias", "morality", "bias"] * 3
  assert tiled.coverage is scored.coverage
