"""Per-pair scores: every pair of the pairs table with the rewards a model gave its two responses,
as one pandas DataFrame (the Python API's `AuditResult.pair_scores`, the results dataset's
`pair_scores/<model>.parquet`).

Columns: the pair's ids and strata as the pairs table has them (`PAIR_COLUMNS`, no texts: the
items table holds them), `reward_chosen`, `reward_rejected` and `margin` (chosen minus rejected;
positive where the model prefers the chosen response). A pair whose item the scores set did not
score has null rewards.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pandas as pd

from socialrm_jax.analysis.tables import reward_tables
from socialrm_jax.base import tables

PAIR_COLUMNS = ("pair_id", "item_id", "dataset", "domain", "subset", "label_source",
                "chosen_index", "rejected_index", "chosen_role", "rejected_role")
REWARD_COLUMNS = ("reward_chosen", "reward_rejected", "margin")


def frame(items_path: str | os.PathLike, score_path: str | os.PathLike) -> pd.DataFrame:
  """The pairs beside `items_path` (the converter's folder, or its items file) with the rewards
  of the scores set at `score_path`, in the pairs table's order."""
  folder = pathlib.Path(items_path)
  folder = folder if folder.is_dir() else folder.parent
  pairs = pd.DataFrame([{k: row.get(k) for k in PAIR_COLUMNS}
                        for row in tables.iter_rows(folder, "pairs", PAIR_COLUMNS)],
                       columns=list(PAIR_COLUMNS))
  scores = reward_tables.read_scores(score_path)
  reward = pd.Series(scores.reward, index=pd.MultiIndex.from_arrays(
      [scores.item_id.tolist(), scores.candidate]))
  for side in ("chosen", "rejected"):
    keys = pd.MultiIndex.from_arrays([pairs["item_id"], pairs[f"{side}_index"].astype(np.int64)])
    pairs[f"reward_{side}"] = reward.reindex(keys).to_numpy()
  pairs["margin"] = pairs["reward_chosen"] - pairs["reward_rejected"]
  return pairs
