"""How long the metrics take on a million pairs (synthetic: BBQ-like items, two gold pairs each).

  JAX_PLATFORMS=cpu .venv/bin/python -m benchmarks.statistics.metrics_speed [--items=500000]

Times the join (scores -> rewards, outcomes, selections) and every metric with its 1000-resample
bootstrap intervals; reading files is not included (it is pyarrow's speed, not ours).
"""

from __future__ import annotations

import time

import numpy as np
from absl import flags

from socialrm_jax.analysis import evaluate
from socialrm_jax.analysis.tables import pairs
from socialrm_jax.analysis.tables.reward_tables import Scores
from socialrm_jax.main import command

_ITEMS = flags.DEFINE_integer("items", 500_000, "Synthetic items (two gold pairs each).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed for the synthetic rewards.")

CATEGORIES = ("Age", "Religion", "Nationality", "Disability_status", "Physical_appearance",
              "Sexual_orientation")


def synthetic(n_items: int, seed: int) -> tuple[list[dict], list[dict], Scores]:
  rng = np.random.default_rng(seed)
  items, pair_rows = [], []
  for i in range(n_items):
    ambiguous = i % 2 == 0
    label = 0 if ambiguous else 1 + i % 2
    item_id = f"bbq/{CATEGORIES[i % len(CATEGORIES)]}/{i}"
    items.append({
        "item_id": item_id, "domain": "bias", "dataset": "bbq",
        "subset": CATEGORIES[i % len(CATEGORIES)],
        "context_condition": "ambiguous" if ambiguous else "disambiguated",
        "candidates": ["Can't be determined", "The old man", "The young woman"],
        "roles": ["unknown", "biased", "anti_biased"],
        "desirability": [1 if k == label else -1 for k in range(3)],
        "attributes": {"question_polarity": "neg" if i % 4 < 2 else "nonneg",
                       "answer_groups": ["unknown", "old", "nonOld"]},
    })
    pair_rows += [{"item_id": item_id, "chosen_index": label, "rejected_index": k,
                   "label_source": "gold"} for k in range(3) if k != label]
  item_id = np.repeat(np.asarray([it["item_id"] for it in items], dtype=object), 3)
  candidate = np.tile(np.arange(3), n_items)
  reward = rng.normal(size=3 * n_items).round(1)  # rounded, so that ties happen
  return items, pair_rows, Scores.of(item_id, candidate, reward, "synthetic")


def main(argv):
  del argv
  items, pair_rows, scores = synthetic(_ITEMS.value, _SEED.value)
  start = time.perf_counter()
  options = evaluate.Options()
  scored = pairs.join(items, pair_rows, scores, fields=options.item_fields)
  joined = time.perf_counter()
  metrics = evaluate.metrics_from_scored(scored, options)
  done = time.perf_counter()
  print(f"{len(pair_rows):,} pairs, {len(items):,} items: join {joined - start:.1f} s, "
        f"metrics with {metrics['n_resamples']} resamples {done - joined:.1f} s, "
        f"total {done - start:.1f} s (bbq accuracy {metrics['datasets']['bbq']['accuracy']:.3f})")


if __name__ == "__main__":
  command.run_command("benchmarks.statistics.metrics_speed", main)
