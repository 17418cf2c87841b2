"""Length-matched accuracy and the paired comparison of models, on hand-computed cases and against
scipy."""

import numpy as np
import pytest

from socialrm_jax.analysis import accuracy, confounds, evaluate, pairs, report
from socialrm_jax.analysis.scores import Scores


def gold_items(candidates_per_item, dataset="ethics", domain="morality", subset="deontology"):
  """Items whose candidate 0 is the gold answer (+1) and the rest -1, a gold pair per -1
  candidate; and the pairs table."""
  items, pair_rows = [], []
  for i, candidates in enumerate(candidates_per_item):
    k = len(candidates)
    items.append({"item_id": f"{dataset}/{i}", "domain": domain, "dataset": dataset,
                  "subset": subset, "context_condition": None, "candidates": list(candidates),
                  "roles": ["reasonable"] + ["unreasonable"] * (k - 1),
                  "desirability": [1] + [-1] * (k - 1), "attributes": {}})
    pair_rows += [{"item_id": f"{dataset}/{i}", "chosen_index": 0, "rejected_index": j,
                   "label_source": "gold"} for j in range(1, k)]
  return items, pair_rows


def scores_for(items, rewards_per_item):
  ids, candidates, rewards = [], [], []
  for item, item_rewards in zip(items, rewards_per_item):
    ids += [item["item_id"]] * len(item_rewards)
    candidates += list(range(len(item_rewards)))
    rewards += list(item_rewards)
  return Scores(np.asarray(ids, dtype=object), np.asarray(candidates),
                np.asarray(rewards, dtype=np.float64), "test")


# Lengths (chosen, rejected) and the chosen response's outcome, with whether the pair is
# length-matched: |difference| < 10% of the longer.
LENGTH_CASE = [
    ((91, 100), 1.0, True),    # 9 < 10: matched, whichever is the longer
    ((100, 90), 1.0, False),   # 10 is not < 10
    ((20, 19), 0.0, True),     # 1 < 2
    ((50, 50), 0.5, True),     # equal lengths (other texts), tied rewards
    ((10, 30), 1.0, False),
]


def length_case():
  items, pair_rows = gold_items([("c" * chosen, "r" * rejected)
                                 for (chosen, rejected), _, _ in LENGTH_CASE])
  rewards = [{1.0: (1.0, 0.0), 0.0: (0.0, 1.0), 0.5: (0.0, 0.0)}[outcome]
             for _, outcome, _ in LENGTH_CASE]
  return items, pair_rows, scores_for(items, rewards)


def test_length_matched_pairs_differ_by_less_than_a_tenth_of_the_longer():
  scored = pairs.join(*length_case())
  assert confounds.length_matched(scored).tolist() == [m for _, _, m in LENGTH_CASE]
  chosen, rejected = confounds.pair_lengths(scored, np.arange(len(LENGTH_CASE)))
  assert list(zip(chosen, rejected)) == [lengths for lengths, _, _ in LENGTH_CASE]


def test_length_matched_accuracy_beside_the_full_accuracy():
  metrics = evaluate.compute_metrics(*length_case(), evaluate.Options(n_resamples=2000))
  for node in (metrics["datasets"]["ethics"], metrics["domains"]["morality"],
               metrics["datasets"]["ethics"]["subsets"]["deontology"]):
    # All pairs: (1 + 1 + 0 + 1/2 + 1) / 5; matched pairs 0, 2 and 3: (1 + 0 + 1/2) / 3.
    assert node["accuracy"] == pytest.approx(3.5 / 5)
    assert node["accuracy_length_matched"] == pytest.approx(1.5 / 3)
    assert node["n_length_matched_pairs"] == 3
    low, high = node["accuracy_length_matched_ci95"]
    assert 0 <= low < 0.5 < high <= 1


def test_length_matched_accuracy_is_null_with_a_reason_when_no_pair_is_matched():
  items, pair_rows = gold_items([("c" * 10, "r" * 30), ("c" * 40, "r" * 20)])
  metrics = evaluate.compute_metrics(items, pair_rows, scores_for(items, [(1, 0), (1, 0)]),
                                     evaluate.Options(n_resamples=20))
  node = metrics["datasets"]["ethics"]
  assert node["accuracy"] == 1.0
  assert node["accuracy_length_matched"] is None and node["n_length_matched_pairs"] == 0
  assert metrics["null_reasons"]["datasets.ethics.accuracy_length_matched"] == accuracy.NO_MATCHED
  assert "differ in length by less than 10% of the longer" in accuracy.NO_MATCHED


def test_report_shows_the_length_matched_accuracy_beside_the_accuracy():
  metrics = evaluate.compute_metrics(*length_case(), evaluate.Options(n_resamples=200))
  text = report.render({"rm": metrics})
  node = metrics["domains"]["morality"]
  matched = (f"{node['accuracy_length_matched']:.3f} [{node['accuracy_length_matched_ci95'][0]:.3f}"
             f", {node['accuracy_length_matched_ci95'][1]:.3f}] (n=3)")
  assert "| domain | rm | rm: length-matched |" in text
  assert f"| morality | {report.cell(node, 'accuracy')} — " in text
  assert f" | {matched} |" in text.split("## Per dataset")[0]
  assert f"| accuracy, length-matched pairs | {matched} |" in text.split("### ethics")[1]
