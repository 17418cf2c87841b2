"""Moral Stories (Emelin et al. 2021): does stating the norm change the preference (SPEC sec. 5).

Item fields relied on: `context_condition` = `with_norm` | `without_norm` (each story gives one
item of each). `norm_sensitivity` = accuracy_with_norm - accuracy_without_norm: positive when the
reward model needs the norm spelled out to prefer the moral action. The two conditions are
resampled independently (separate strata), which can only widen the interval of the difference.
"""

from __future__ import annotations

from typing import Any

from socialrm_jax.analysis import estimates
from socialrm_jax.analysis.bootstrap import StratifiedSums

WITH_NORM, WITHOUT_NORM = "with_norm", "without_norm"


def summary(sums: StratifiedSums) -> dict[str, Any]:
  node: dict[str, Any] = {}
  accuracy = {}
  for condition in (WITH_NORM, WITHOUT_NORM):
    def in_condition(s, condition=condition):
      return s.context_condition == condition
    accuracy[condition] = estimates.ratio(sums.total("gold_wins", in_condition),
                                          sums.total("gold_pairs", in_condition))
    estimates.put(node, f"accuracy_{condition}", accuracy[condition],
                  f"no {condition} items with gold pairs")
  estimates.put(node, "norm_sensitivity", accuracy[WITH_NORM] - accuracy[WITHOUT_NORM],
                "needs gold pairs in both the with_norm and without_norm conditions")
  return node
