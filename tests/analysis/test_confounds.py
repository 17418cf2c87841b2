"""The length confound (analysis/metrics/confounds.py): which pairs are length-matched, and how
often the longer response wins, on pairs worked by hand."""

import numpy as np
import pytest

from socialrm_jax.analysis.metrics import confounds
from socialrm_jax.analysis.resampling.estimates import Missing
from tests.helpers.scored_fixtures import joined

# (chosen, rejected) lengths in characters, the rewards (chosen, rejected), and whether the pair
# is length-matched: |difference| < 10% of the longer, strictly.
LENGTH_CASE = [
    ((91, 100), (1.0, 0.0), True),    # 9 < 10: matched, whichever is the longer
    ((100, 90), (1.0, 0.0), False),   # 10 is not < 10
    ((20, 19), (0.0, 1.0), True),     # 1 < 2
    ((50, 50), (0.0, 0.0), True),     # equal lengths (other texts), tied rewards
    ((10, 30), (0.0, 0.0), False),
]


def length_case():
  return joined([{"id": f"i{i}", "candidates": ["c" * chosen, "r" * rejected],
                  "roles": ["good", "bad"], "desirability": [1, -1], "rewards": list(rewards),
                  "pairs": [(0, 1, "gold")]}
                 for i, ((chosen, rejected), rewards, _) in enumerate(LENGTH_CASE)])


def test_length_matched_pairs_differ_by_less_than_a_tenth_of_the_longer():
  scored = length_case()
  assert confounds.length_matched(scored).tolist() == [m for _, _, m in LENGTH_CASE]
  assert confounds.length_matched(scored, np.array([1, 2])).tolist() == [False, True]
  chosen, rejected = confounds.pair_lengths(scored, np.arange(len(LENGTH_CASE)))
  assert list(zip(chosen.tolist(), rejected.tolist())) == [lengths for lengths, _, _ in
                                                           LENGTH_CASE]


def test_length_rates_by_hand():
  # Unequal lengths: pairs 0, 1, 2, 4. The longer wins in pair 1 (chosen, won), loses in 0
  # (rejected, lost) and 2 (chosen, lost), ties in 4: 1.5 of 4. The chosen response is the
  # longer in pairs 1 and 2: 2 of 4. Pair 3 (equal lengths) is left out.
  rates = confounds.length_rates(length_case(), np.arange(5))
  assert rates == {"longer_preferred_rate": pytest.approx(0.375),
                   "chosen_longer_share": pytest.approx(0.5), "n_pairs": 4}
  # The same pairs given as a [P] mask, and a part of them as indices.
  assert confounds.length_rates(length_case(), np.ones(5, bool)) == rates
  assert confounds.length_rates(length_case(), np.array([1, 3])) == {
      "longer_preferred_rate": 1.0, "chosen_longer_share": 1.0, "n_pairs": 1}


def test_pairs_of_equal_lengths_only_have_no_rates():
  rates = confounds.length_rates(length_case(), np.array([3]))
  assert rates == {"longer_preferred_rate": Missing(confounds.NO_PAIRS),
                   "chosen_longer_share": Missing(confounds.NO_PAIRS), "n_pairs": 0}
