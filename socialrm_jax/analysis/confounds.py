"""Length confound (SPEC sec. 5): does the reward model just prefer the longer response?

A response's length is its number of characters.

`longer_preferred_rate` = share of gold pairs whose longer candidate got the higher reward, ties
in reward 1/2; pairs of equal length are left out (`n_pairs` counts the rest).
`chosen_longer_share` says how often the gold chosen response is the longer one, so a reader can
tell a length preference from a dataset where the better answer is simply longer.

A pair is length-matched when its two responses differ by less than `LENGTH_MATCH_TOLERANCE` of
the longer one's length: |len(chosen) - len(rejected)| < 0.1 * max(len(chosen), len(rejected)),
strictly (100 and 91 characters match, 100 and 90 do not). Measured relative to the longer one so
the rule is symmetric in the two responses. `accuracy` reports the accuracy on length-matched gold
pairs beside the full accuracy: where a preference for length would carry a model's accuracy, it
falls on these pairs, where length cannot tell the responses apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from socialrm_jax.analysis.estimates import Missing
from socialrm_jax.analysis.pairs import Scored

NO_PAIRS = "no gold pairs of different lengths"
LENGTH_MATCH_TOLERANCE = 0.1


def pair_lengths(scored: Scored, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Characters of the chosen and of the rejected response of pairs `pairs`. -> ([P'], [P'])"""
  item = scored.pair_item[pairs]
  return (scored.candidate_length[item, scored.pair_chosen[pairs]],
          scored.candidate_length[item, scored.pair_rejected[pairs]])


def length_matched(scored: Scored) -> np.ndarray:
  """Whether each pair's responses differ by less than the tolerance of the longer. # [P] bool"""
  chosen_length, rejected_length = pair_lengths(scored, np.arange(scored.pair_item.size))
  longer = np.maximum(chosen_length, rejected_length)
  return np.abs(chosen_length - rejected_length) < LENGTH_MATCH_TOLERANCE * longer


def length_rates(scored: Scored, pairs: np.ndarray) -> dict[str, Any]:
  """The length confound over the pairs `pairs` (indices of gold pairs)."""
  chosen_length, rejected_length = pair_lengths(scored, pairs)
  differ = chosen_length != rejected_length
  chosen_longer = (chosen_length > rejected_length)[differ]
  outcome = scored.pair_outcome[pairs][differ]
  longer_won = np.where(chosen_longer, outcome, 1.0 - outcome)
  if not longer_won.size:
    return {"longer_preferred_rate": Missing(NO_PAIRS), "chosen_longer_share": Missing(NO_PAIRS),
            "n_pairs": 0}
  return {"longer_preferred_rate": float(longer_won.mean()),
          "chosen_longer_share": float(chosen_longer.mean()), "n_pairs": int(longer_won.size)}
