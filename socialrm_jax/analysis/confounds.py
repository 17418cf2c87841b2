"""Length confound (SPEC sec. 5): does the reward model just prefer the longer response?

`longer_preferred_rate` = share of gold pairs whose longer candidate (in characters) got the
higher reward, ties in reward 1/2; pairs of equal length are left out (`n_pairs` counts the
rest). `chosen_longer_share` says how often the gold chosen response is the longer one, so a
reader can tell a length preference from a dataset where the better answer is simply longer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from socialrm_jax.analysis.estimates import Missing
from socialrm_jax.analysis.pairs import Scored

NO_PAIRS = "no gold pairs of different lengths"


def length_rates(scored: Scored, pairs: np.ndarray) -> dict[str, Any]:
  """The length confound over the pairs `pairs` (indices of gold pairs)."""
  item = scored.pair_item[pairs]
  chosen_length = scored.candidate_length[item, scored.pair_chosen[pairs]]
  rejected_length = scored.candidate_length[item, scored.pair_rejected[pairs]]
  differ = chosen_length != rejected_length
  chosen_longer = (chosen_length > rejected_length)[differ]
  outcome = scored.pair_outcome[pairs][differ]
  longer_won = np.where(chosen_longer, outcome, 1.0 - outcome)
  if not longer_won.size:
    return {"longer_preferred_rate": Missing(NO_PAIRS), "chosen_longer_share": Missing(NO_PAIRS),
            "n_pairs": 0}
  return {"longer_preferred_rate": float(longer_won.mean()),
          "chosen_longer_share": float(chosen_longer.mean()), "n_pairs": int(longer_won.size)}
