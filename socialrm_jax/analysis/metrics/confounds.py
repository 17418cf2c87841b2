"""Length confound (docs/spec.md sec. 5): does the reward model just prefer the longer response?

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

from socialrm_jax.analysis.resampling.estimates import Missing
from socialrm_jax.analysis.tables.pairs import Scored, pair_chunks

NO_PAIRS = "no gold pairs of different lengths"
LENGTH_MATCH_TOLERANCE = 0.1


def pair_lengths(scored: Scored, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Characters of the chosen and of the rejected response of pairs `pairs`. -> ([P'], [P'])"""
  item = scored.pair_item[pairs]
  return (scored.candidate_length[item, scored.pair_chosen[pairs]],
          scored.candidate_length[item, scored.pair_rejected[pairs]])


def length_matched(scored: Scored, pairs: np.ndarray | None = None) -> np.ndarray:
  """Whether each of `pairs` (all by default) has responses that differ by less than the
  tolerance of the longer. # [P'] bool"""
  chosen_length, rejected_length = pair_lengths(
      scored, np.arange(scored.pair_item.size) if pairs is None else pairs)
  longer = np.maximum(chosen_length, rejected_length)
  return np.abs(chosen_length - rejected_length) < LENGTH_MATCH_TOLERANCE * longer


def length_rates(scored: Scored, pairs: np.ndarray) -> dict[str, Any]:
  """The length confound over gold pairs `pairs` (indices, or a [P] mask), summed a chunk of
  pairs at a time (`pairs.pair_chunks`)."""
  longer_won = chosen_longer = 0.0
  n = 0
  for part in pair_chunks(pairs):
    chosen_length, rejected_length = pair_lengths(scored, part)
    differ = chosen_length != rejected_length
    longer = (chosen_length > rejected_length)[differ]
    outcome = scored.outcome(part)[differ]
    longer_won += float(np.where(longer, outcome, 1.0 - outcome).sum())
    chosen_longer += float(longer.sum())
    n += int(differ.sum())
  if not n:
    return {"longer_preferred_rate": Missing(NO_PAIRS), "chosen_longer_share": Missing(NO_PAIRS),
            "n_pairs": 0}
  return {"longer_preferred_rate": longer_won / n, "chosen_longer_share": chosen_longer / n,
          "n_pairs": n}
