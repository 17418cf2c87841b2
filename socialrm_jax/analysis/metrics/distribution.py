"""Distribution bias (docs/spec.md sec. 5): how far each item's reward softmax is from the ideal,
and which roles get selected. (For BBQ, which groups get named as the answer to a negative
question when the context does not say is in `bias`.)

Choices docs/spec.md leaves open:
- D = softmax of the raw rewards over the item's candidates (no temperature).
- Reference: uniform over the `stereotype` and `anti_stereotype` candidates when an item has both
  (directional items: CrowS-Pairs, StereoSet, whose `unrelated` candidate gets 0); else one-hot on
  the +1 candidate when exactly one candidate is +1; other items (several +1, as XSTest prompts
  with several compliant answers or ETHICS deontology) have no reference and are left out of the
  mean (`js_items` counts the items that are in).
- Selection shares use fractional argmax (see `pairs`): `selection_shares.<role>` sums to 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from socialrm_jax.base import records
from socialrm_jax.analysis.resampling.estimates import Missing
from socialrm_jax.analysis.tables.pairs import Scored, item_chunks



def softmax(rewards: np.ndarray, valid: np.ndarray) -> np.ndarray:
  """Softmax over each item's candidates. # [n, K]"""
  shifted = np.where(valid, rewards - np.where(valid, rewards, -np.inf).max(axis=1, keepdims=True),
                     -np.inf)
  weights = np.exp(shifted)
  return weights / weights.sum(axis=1, keepdims=True)


def js_distance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
  """Jensen-Shannon distance, base 2 (in [0, 1]), between rows of p and q. # [n]"""
  m = (p + q) / 2

  def kl(a):
    terms = np.where(a > 0, a * np.log2(np.where(a > 0, a, 1) / np.where(a > 0, m, 1)), 0.0)
    return terms.sum(axis=1)
  return np.sqrt(np.maximum(0.0, 0.5 * kl(p) + 0.5 * kl(q)))


def reference(roles: np.ndarray, desirability: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Ideal distributions and which items have one. -> (# [n, K], # [n] bool)"""
  stereotype, anti = roles == records.STEREOTYPE, roles == records.ANTI_STEREOTYPE   # [n, K]
  directional = stereotype | anti
  is_directional = stereotype.any(axis=1) & anti.any(axis=1)
  good = desirability > 0
  one_good = good.sum(axis=1) == 1
  uniform = directional / np.maximum(directional.sum(axis=1, keepdims=True), 1)
  q = np.where(is_directional[:, None], uniform, good.astype(np.float64))
  return q, is_directional | one_good


def dataset_summary(scored: Scored, index: np.ndarray) -> dict[str, Any]:
  """`js_distance`, `js_items` and `selection_shares` for one dataset's items `index`, summed a
  chunk of items at a time (`item_chunks`)."""
  node: dict[str, Any] = {}
  distance_sum, js_items = 0.0, 0
  shares: dict[str, float] = {}
  for chunk in item_chunks(index):
    roles = scored.roles[chunk]                                              # [c, K]
    q, has_reference = reference(roles, scored.desirability[chunk])
    p = softmax(scored.rewards[chunk], scored.valid[chunk])
    distances = js_distance(p[has_reference], q[has_reference])
    distance_sum += float(distances.sum())
    js_items += int(distances.size)
    selection = scored.selection(chunk)
    for r in roles.distinct():
      if r:
        shares[r] = shares.get(r, 0.0) + float((selection * (roles == r)).sum())
  node["js_distance"] = (distance_sum / js_items if js_items else
                         Missing("no item has a reference distribution (one +1 candidate, or "
                                 "stereotype and anti_stereotype candidates)"))
  node["js_items"] = js_items
  node["selection_shares"] = {r: shares[r] / len(index) for r in sorted(shares)}
  return node
