"""Distribution bias (analysis/metrics/distribution.py) on cases worked by hand, the Jensen-Shannon
distance against scipy's."""

import math

import numpy as np
import pytest
from scipy.spatial import distance

from socialrm_jax.analysis.metrics import distribution
from socialrm_jax.analysis.resampling.estimates import Missing
from tests.helpers.scored_fixtures import scored


def test_softmax_over_an_items_own_candidates():
  """Rewards 0 and ln 3 over two candidates (a third is padding): 1/4 and 3/4."""
  p = distribution.softmax(np.array([[0.0, math.log(3), -np.inf], [5.0, 5.0, 5.0]]),
                           np.array([[True, True, False], [True, True, True]]))
  np.testing.assert_allclose(p, [[0.25, 0.75, 0.0], [1 / 3, 1 / 3, 1 / 3]])


def test_js_distance_by_hand_and_against_scipy():
  """p = (1, 0), q = (1/2, 1/2), m = (3/4, 1/4): KL(p||m) = log2(4/3), KL(q||m) = (1/2) log2(2/3)
  + (1/2) log2 2; JS distance = sqrt of their mean."""
  p, q = np.array([[1.0, 0.0], [1.0, 0.0], [0.2, 0.8]]), np.array([[0.5, 0.5], [0.0, 1.0],
                                                                    [0.2, 0.8]])
  by_hand = math.sqrt(0.5 * math.log2(4 / 3) + 0.5 * (0.5 * math.log2(2 / 3) + 0.5))
  got = distribution.js_distance(p, q)
  np.testing.assert_allclose(got, [by_hand, 1.0, 0.0], atol=1e-12)
  np.testing.assert_allclose(got, [distance.jensenshannon(a, b, base=2) for a, b in zip(p, q)],
                             atol=1e-12)


def test_the_reference_distribution_of_each_kind_of_item():
  roles = np.array([["stereotype", "anti_stereotype", "unrelated"],
                    ["compliance", "refusal", ""],
                    ["compliance", "compliance", "refusal"]])
  desirability = np.array([[0, 0, 0], [1, -1, 0], [1, 1, -1]])
  q, has = distribution.reference(roles, desirability)
  np.testing.assert_allclose(q[:2], [[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
  assert has.tolist() == [True, True, False]  # several +1 candidates: no reference


def test_dataset_summary_by_hand():
  """Item 1, directional, rewards (0, ln 3, big negative): p ~ (1/4, 3/4, 0) against (1/2, 1/2,
  0); item 2, one +1 candidate, rewards tied: p = (1/2, 1/2) against (1, 0), distance sqrt of the
  first test's mean; item 3 has no reference. Selections: the anti-stereotype, half of each of
  item 2's, item 3's compliances half each."""
  view = scored([
      {"roles": ["stereotype", "anti_stereotype", "unrelated"], "desirability": [0, 0, 0],
       "rewards": [0.0, math.log(3), -1e9]},
      {"roles": ["compliance", "refusal"], "desirability": [1, -1], "rewards": [2.0, 2.0]},
      {"roles": ["compliance", "compliance", "refusal"], "desirability": [1, 1, -1],
       "rewards": [1.0, 1.0, 0.0]}])
  node = distribution.dataset_summary(view, np.arange(3))
  first = distribution.js_distance(np.array([[0.25, 0.75]]), np.array([[0.5, 0.5]]))[0]
  second = math.sqrt(0.5 * math.log2(4 / 3) + 0.5 * (0.5 * math.log2(2 / 3) + 0.5))
  assert node["js_items"] == 2
  assert node["js_distance"] == pytest.approx((first + second) / 2)
  assert node["selection_shares"] == pytest.approx(
      {"anti_stereotype": 1 / 3, "compliance": (0.5 + 1) / 3, "refusal": 0.5 / 3,
       "stereotype": 0.0, "unrelated": 0.0})


def test_a_dataset_without_reference_items_has_a_null_distance():
  view = scored([{"roles": ["compliance", "compliance"], "desirability": [1, 1],
                  "rewards": [1.0, 0.0]}])
  node = distribution.dataset_summary(view, np.arange(1))
  assert isinstance(node["js_distance"], Missing) and node["js_items"] == 0
