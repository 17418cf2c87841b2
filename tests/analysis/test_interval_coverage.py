"""The intervals hold their 95% where the earlier resampling did not: a StereoSet whose target
terms have one item each (the bundled slice has 64 such strata of 89), under a model with no
preference, so that ss is truly 1/2. Resampling items within each (type, term) stratum drew
every singleton term as itself: ss's interval held 1/2 in about half the data sets
(orchestrators/interval_coverage.py, docs/interval_coverage.md). Fixed seeds, and a bound
from the binomial distribution of the count of intervals that hold."""

import numpy as np
from scipy import stats

from socialrm_jax.analysis import evaluate
from socialrm_jax.analysis.tables.reward_tables import Scores

TERMS = 40          # one item per term, 20 of each type
DATA_SETS = 60
N_RESAMPLES = 300


def stereoset_items() -> tuple[list[dict], list[dict]]:
  """StereoSet items as the converter writes them: stereotype, anti-stereotype, unrelated; one
  directional pair and two control pairs each; each item its own target term."""
  items, pair_rows = [], []
  for i in range(TERMS):
    item_id = f"stereoset/test/{i}"
    items.append({"item_id": item_id, "domain": "bias", "dataset": "stereoset",
                  "subset": ("intersentence", "intrasentence")[i % 2], "context_condition": None,
                  "candidates": [f"s{i}", f"a{i}", f"u{i}"],
                  "roles": ["stereotype", "anti_stereotype", "unrelated"],
                  "desirability": [0, 0, 0], "attributes": {"target": f"term {i}"}})
    pair_rows += [{"item_id": item_id, "chosen_index": 1, "rejected_index": 0,
                   "label_source": "directional"},
                  *({"item_id": item_id, "chosen_index": k, "rejected_index": 2,
                     "label_source": "control"} for k in (0, 1))]
  return items, pair_rows


def test_ss_interval_holds_its_95_percent_on_singleton_terms():
  items, pair_rows = stereoset_items()
  ids = [item["item_id"] for item in items for _ in range(3)]
  candidates = [k for _ in items for k in range(3)]
  options = evaluate.Options(n_resamples=N_RESAMPLES)
  rng = np.random.default_rng(2024)
  held = 0
  for _ in range(DATA_SETS):  # rewards independent of the candidates: ss is 1/2
    scores = Scores.of(ids, candidates, rng.standard_normal(len(ids)), "null")
    node = evaluate.compute_metrics(items, pair_rows, scores, options)["datasets"]["stereoset"]
    low, high = node["ss_ci95"]
    held += low <= 0.5 <= high
  # With 95% coverage, fewer than this many of 60 intervals hold with probability under 0.1%.
  assert held >= stats.binom.ppf(0.001, DATA_SETS, 0.95), held
