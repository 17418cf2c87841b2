"""Length-matched accuracy and the paired comparison of models, on hand-computed cases and against
scipy."""

import math

import numpy as np
import pytest
from scipy import stats

from socialrm_jax.analysis import evaluate
from socialrm_jax.analysis.metrics import accuracy
from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.resampling import estimates
from socialrm_jax.analysis.studies import compare
from socialrm_jax.analysis.tables import pairs
from socialrm_jax.analysis.tables.reward_tables import Scores
from socialrm_jax.base.errors import InputError



FIELDS = evaluate.Options().item_fields  # what the items' dataset analyses read of them


def options(n_resamples: int) -> evaluate.Options:
  return evaluate.Options(n_resamples=n_resamples)


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
  return Scores.of(np.asarray(ids, dtype=object), np.asarray(candidates),
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


def test_length_matched_accuracy_beside_the_full_accuracy():
  metrics = evaluate.compute_metrics(*length_case(), options(2000))
  for node in (metrics["datasets"]["ethics"], metrics["domains"]["morality"],
               metrics["datasets"]["ethics"]["subsets"]["deontology"]):
    # All pairs: (1 + 1 + 0 + 1/2 + 1) / 5; matched pairs 0, 2 and 3: (1 + 0 + 1/2) / 3.
    assert node["accuracy"] == pytest.approx(3.5 / 5)
    assert node["accuracy_length_matched"] == pytest.approx(1.5 / 3)
    assert node["n_length_matched_pairs"] == 3
    # Five items, three of them matched: too few for intervals (the values stay).
    assert node["ci95"] is None and node["accuracy_length_matched_ci95"] is None
  assert metrics["null_reasons"]["domains.morality.ci95"] == estimates.too_few(5)
  assert metrics["null_reasons"]["domains.morality.accuracy_length_matched_ci95"] == (
      estimates.too_few(3))


def test_length_matched_accuracy_is_null_with_a_reason_when_no_pair_is_matched():
  items, pair_rows = gold_items([("c" * 10, "r" * 30), ("c" * 40, "r" * 20)])
  metrics = evaluate.compute_metrics(items, pair_rows, scores_for(items, [(1, 0), (1, 0)]),
                                     options(20))
  node = metrics["datasets"]["ethics"]
  assert node["accuracy"] == 1.0
  assert node["accuracy_length_matched"] is None and node["n_length_matched_pairs"] == 0
  assert metrics["null_reasons"]["datasets.ethics.accuracy_length_matched"] == accuracy.NO_MATCHED
  assert "differ in length by less than 10% of the longer" in accuracy.NO_MATCHED


def test_report_shows_the_length_matched_accuracy_beside_the_accuracy():
  metrics = evaluate.compute_metrics(*length_case(), options(200))
  text = report.render({"rm": metrics})
  node = metrics["domains"]["morality"]
  matched = f"{node['accuracy_length_matched']:.3f} (n=3)"  # too few items for an interval
  assert "| domain | rm | rm: length-matched |" in text
  assert f"| morality | {report.cell(node, 'accuracy')} — " in text
  assert f" | {matched} |" in text.split("## Per dataset")[0]
  assert f"| accuracy, length-matched pairs | {matched} |" in text.split("### ethics")[1]


# --- Paired comparisons ---------------------------------------------------------------------------

# Four items, one gold pair each: A wins items 0-2, B items 0-1. Responses of unlike lengths, so
# no pair is length-matched.
HAND_A, HAND_B = (1, 1, 1, 0), (1, 1, 0, 0)


def outcome_rewards(outcomes):
  """Rewards (chosen, rejected) giving each pair the outcome 1, 1/2 or 0."""
  return [{1: (1.0, 0.0), 0.5: (0.0, 0.0), 0: (0.0, 1.0)}[o] for o in outcomes]


def two_models(outcomes_a, outcomes_b, **item_fields):
  items, pair_rows = gold_items([("good", "a much worse answer")] * len(outcomes_a), **item_fields)
  return [pairs.join(items, pair_rows, scores_for(items, outcome_rewards(o)), fields=FIELDS)
          for o in (outcomes_a, outcomes_b)]


def test_paired_bootstrap_resamples_the_same_items_for_both_models():
  a, b = two_models(HAND_A, HAND_B)
  kept_a, kept_b = compare.paired_rows(a, b, options(20_000))[("datasets", "ethics")]["accuracy"]
  assert kept_a.units == 4
  difference = kept_a.rows - kept_b.rows
  # Only item 2 differs (A wins, B loses), so a resample's difference is (copies of item 2) / 4,
  # copies ~ Binomial(4, 1/4); resampling the models apart would also give negative differences.
  assert difference[0] == 0.25
  values, counts = np.unique(difference[1:], return_counts=True)
  assert values.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
  expected = [math.comb(4, k) * 0.25**k * 0.75**(4 - k) for k in range(5)]
  np.testing.assert_allclose(counts / counts.sum(), expected, atol=0.01)
  # Two-sided p: the resampled differences' sd is sqrt(4 (1/4)(3/4)) / 4, times sqrt(4 / 3)
  # unbiased: 1/4, so t = 0.25 / 0.25 = 1 on 3 degrees of freedom.
  assert compare.bootstrap_p(difference, kept_a.units) == pytest.approx(2 * stats.t.sf(1.0, 3),
                                                                 abs=0.02)
  # The plain percentile interval: P(d = 0) = 0.316 > 0.025, and P(d <= 0.5) = 0.949 < 0.975 <
  # P(d <= 0.75) = 0.996. (Four items are too few for the reported interval: `compare_pair`.)
  assert estimates.interval(difference, "none") == (0.25, [0.0, 0.75])


def test_compare_pair_on_the_hand_case():
  a, b = two_models(HAND_A, HAND_B)
  rows = compare.compare_pair(a, b, options(20_000))
  assert estimates._kept.get() is None  # pylint: disable=protected-access  # keeping stopped
  # The dataset's accuracy is its domain's (listed once); no pair is length-matched; ETHICS adds
  # its group accuracy (one pair per item: the same values, tested by the bootstrap).
  assert [(r["level"], r["key"], r["metric"]) for r in rows] == [
      ("domains", "morality", "accuracy"), ("datasets", "ethics", "group_accuracy")]
  accuracy_row, group_row = rows
  # Four items: too few for an interval (`estimates.MIN_INTERVAL_UNITS`); the test still runs.
  for row in rows:
    assert (row["value_a"], row["value_b"], row["difference"]) == (0.75, 0.5, 0.25)
    assert row["ci95"] == estimates.Missing(estimates.too_few(4))
  # The sign test: one item that differs, A's: p = 2 * P(X <= 0 | n = 1) capped at 1.
  assert accuracy_row["test"] == compare.SIGN_TEST
  assert (accuracy_row["a_better"], accuracy_row["b_better"], accuracy_row["p"]) == (1, 0, 1.0)
  assert group_row["test"] == compare.PAIRED_BOOTSTRAP
  assert group_row["p"] == pytest.approx(2 * stats.t.sf(1.0, 3), abs=0.02)


def test_paired_interval_matches_scipy_paired_bootstrap():
  rng = np.random.default_rng(5)
  n = 300
  outcome_a = rng.choice([0, 0.5, 1], size=n, p=[0.25, 0.1, 0.65])
  # B agrees with A on most items: the paired interval is much narrower than an unpaired one.
  outcome_b = np.where(rng.random(n) < 0.85, outcome_a, rng.choice([0, 1], size=n))
  a, b = two_models(outcome_a.tolist(), outcome_b.tolist())
  row = compare.compare_pair(a, b, options(20_000))[0]
  assert row["metric"] == "accuracy"

  def mean_difference(x, y, axis=-1):
    return x.mean(axis=axis) - y.mean(axis=axis)
  kwargs = dict(n_resamples=20_000, method="percentile", rng=np.random.default_rng(0))
  paired = stats.bootstrap((outcome_a, outcome_b), mean_difference, paired=True, **kwargs)
  unpaired = stats.bootstrap((outcome_a, outcome_b), mean_difference, paired=False, **kwargs)
  assert row["difference"] == pytest.approx(outcome_a.mean() - outcome_b.mean())
  np.testing.assert_allclose(row["ci95"], [paired.confidence_interval.low,
                                           paired.confidence_interval.high], atol=0.006)
  unpaired_width = unpaired.confidence_interval.high - unpaired.confidence_interval.low
  assert row["ci95"][1] - row["ci95"][0] < 0.6 * unpaired_width


@pytest.mark.parametrize("successes,trials,expected", [
    (0, 0, 1.0), (0, 1, 1.0), (1, 1, 1.0), (0, 3, 2 / 8),
    # P(1 of 4) = 4/16: the outcomes no more likely are 0, 1, 3, 4 (10/16).
    (1, 4, 10 / 16),
    # 3 of 10: 2 (1 + 10 + 45 + 120) / 1024.
    (3, 10, 352 / 1024), (7, 10, 352 / 1024), (5, 10, 1.0), (0, 25, 2 / 2**25)])
def test_the_binomial_test_is_exact_by_hand(successes, trials, expected):
  assert compare.binomial_two_sided_p(successes, trials) == pytest.approx(expected, rel=1e-9)


def test_sign_test_with_one_pair_per_item_is_mcnemar_a_tie_counting_against_a_win_or_a_loss():
  # A better on 8 pairs (4 win/loss, 2 win/tie, 2 tie/loss), B on 1; 3 pairs agree.
  outcome_a = np.asarray([1, 1, 1, 1, 1, 1, 0.5, 0.5, 0, 1, 0.5, 0])
  outcome_b = np.asarray([0, 0, 0, 0, 0.5, 0.5, 0, 0, 1, 1, 0.5, 0])
  item = np.arange(12)
  result = compare.sign_test(outcome_a, outcome_b, item)
  assert (result["a_better"], result["b_better"], result["n_pairs"]) == (8, 1, 12)
  # 2 P(X <= 1), X ~ Binomial(9, 1/2): 2 (1 + 9) / 2^9.
  assert result["p"] == pytest.approx(20 / 512)
  assert compare.sign_test(outcome_b, outcome_a, item)["p"] == result["p"]
  assert compare.sign_test(outcome_a, outcome_a, item)["p"] == 1.0  # no item differs


def test_sign_test_counts_items_not_pairs():
  # Three items of four pairs each: A better on every pair of items 0 and 1; on item 2, A wins
  # one pair and B three (item 2 counts for B). Over pairs it would be 9 against 3.
  outcome_a = np.asarray([1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0])
  outcome_b = np.asarray([0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1])
  item = np.repeat([7, 3, 9], 4)
  result = compare.sign_test(outcome_a, outcome_b, item)
  assert (result["a_better"], result["b_better"], result["n_items"], result["n_pairs"]) == (
      2, 1, 3, 12)
  assert result["p"] == pytest.approx(compare.binomial_two_sided_p(2, 3)) == 1.0
  # An item whose pairs cancel (a win and a loss) counts for neither.
  even = compare.sign_test(np.asarray([1, 0, 1]), np.asarray([0, 1, 0]), np.asarray([0, 0, 1]))
  assert (even["a_better"], even["b_better"]) == (1, 0)


def test_holm_step_down_adjustment():
  np.testing.assert_allclose(compare.holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
  # Sorted 0.001 < 0.02 < 0.04 < 0.3: times 4, 3, 2, 1 = 0.004, 0.06, 0.08, 0.3.
  np.testing.assert_allclose(compare.holm([0.3, 0.04, 0.001, 0.02]), [0.3, 0.08, 0.004, 0.06])
  np.testing.assert_allclose(compare.holm([0.5, 0.5]), [1.0, 1.0])  # capped at 1
  assert compare.holm([]).size == 0


def test_three_models_are_compared_in_pairs_on_common_items_and_corrected_together():
  items, pair_rows = gold_items([("good", "a much worse answer")] * 30)
  rng = np.random.default_rng(2)
  outcomes = {"x": np.ones(30), "y": rng.choice([0, 1], size=30), "z": np.zeros(30)}
  scored = {}
  for name, o in outcomes.items():
    score_set = scores_for(items, outcome_rewards(o.tolist()))
    if name == "z":  # z left items 0-4 unscored
      keep = ~np.isin(score_set.item_id.tolist(), [f"ethics/{i}" for i in range(5)])
      score_set = Scores.of(score_set.item_id[keep], score_set.candidate[keep],
                            score_set.reward[keep], "z")
    scored[name] = pairs.join(items, pair_rows, score_set, allow_missing=True, fields=FIELDS)
  tree = compare.compare_models(scored, options(500))
  assert [(p["a"], p["b"], p["n_items_a"], p["n_items_b"], p["n_common_items"])
          for p in tree["pairs"]] == [("x", "y", 30, 30, 30), ("x", "z", 30, 25, 25),
                                      ("y", "z", 30, 25, 25)]
  y_z = tree["pairs"][2]["comparisons"][0]
  assert y_z["value_a"] == pytest.approx(outcomes["y"][5:].mean())  # on the 25 common items
  tested = [row for p in tree["pairs"] for row in p["comparisons"]]
  assert tree["n_tests"] == len(tested) == 6
  np.testing.assert_allclose([row["p_holm"] for row in tested],
                             compare.holm([row["p"] for row in tested]))
  assert all(row["holds"] == (row["p_holm"] < compare.ALPHA) for row in tested)
  x_z = tree["pairs"][1]["comparisons"][0]
  assert (x_z["a_better"], x_z["b_better"], x_z["holds"]) == (25, 0, True)

  lines = compare.report_lines(tree)
  assert lines[0] == "## Model comparisons"
  assert "- x and z: 25 items in common (of 30 and 25 scored)" in lines
  table = [line for line in lines if line.startswith("| domain morality: accuracy |")]
  assert len(table) == 3
  assert table[1].startswith("| domain morality: accuracy | x 1.000 | z 0.000 | 1.000 | "
                             "[1.000, 1.000] | exact sign test over items | ")
  assert table[1].endswith(" | yes |")
  assert compare.report_lines(compare.compare_models({"x": scored["x"]},
                                                     options(10))) == []


def test_models_joined_to_different_pairs_tables_are_refused():
  items, pair_rows = gold_items([("good", "bad", "worse")] * 3)
  score_set = scores_for(items, [(1, 0, 0)] * 3)
  a = pairs.join(items, pair_rows, score_set, fields=FIELDS)
  b = pairs.join(items, pair_rows[::-1], score_set, fields=FIELDS)
  with pytest.raises(InputError, match="joined to different items or pairs tables"):
    compare.compare_models({"a": a, "b": b}, options(10))


def test_only_the_primary_templates_items_are_compared_as_in_metrics_json():
  # Six source rows under the default template and again under a paraphrase: A wins the default
  # items and loses the paraphrased ones, B loses all.
  default, paraphrase = (gold_items([("good", "a much worse answer")] * 6) for _ in range(2))
  items = default[0] + [dict(row, item_id=row["item_id"] + "/p") for row in paraphrase[0]]
  for row, template in zip(items, ["ethics.default"] * 6 + ["ethics.paraphrase"] * 6):
    row["template"] = template
  pair_rows = default[1] + [dict(row, item_id=row["item_id"] + "/p") for row in paraphrase[1]]
  scored = {name: pairs.join(items, pair_rows, scores_for(items, outcome_rewards(o)), fields=FIELDS)
            for name, o in (("a", [1] * 6 + [0] * 6), ("b", [0] * 12))}
  tree = compare.compare_models(scored, options(100))
  (pair,) = tree["pairs"]
  assert (pair["n_items_a"], pair["n_items_b"], pair["n_common_items"]) == (6, 6, 6)
  row = pair["comparisons"][0]
  assert (row["metric"], row["value_a"], row["value_b"], row["a_better"]) == ("accuracy", 1, 0, 6)
  metrics = evaluate.metrics_from_scored(scored["a"], evaluate.Options())
  assert metrics["domains"]["morality"]["accuracy"] == 1.0
