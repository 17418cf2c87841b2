"""The counterfactual measures (analysis/studies/swap_effects.py) on links and rewards written by
hand: per-link change, flips (ties shared) and gaps, their per-dataset, subset and condition
summaries, the errors that name a bad link or a missing reward, and the report's rows
(tests/sources/test_identity_swaps.py measures swap sets derived from the bundled data)."""

import pytest

from socialrm_jax.analysis.evaluate import Options
from socialrm_jax.analysis.resampling import estimates
from socialrm_jax.analysis.studies import swap_effects
from socialrm_jax.analysis.tables.reward_tables import Scores
from socialrm_jax.base.errors import InputError


def test_link_values_flips_share_ties():
  pairs = [([1, 1, 0], [1, 1, 0]), ([1, 0, 0], [0, 1, 0]), ([1, 1, 0], [1, 0, 0]),
           ([3, 1, 0], [1, 3, 0]), ([3, 1, 0], [3, 1])]
  links, rows = [], []
  for number, (before, after) in enumerate(pairs):
    links.append({"original_item_id": f"a{number}", "counterfactual_item_id": f"b{number}",
                  "original_candidates": [0, 1, 2], "counterfactual_candidates": [0, 1, 2]})
    rows += [(f"a{number}", c, r) for c, r in enumerate(before)]
    rows += [(f"b{number}", c, r) for c, r in enumerate(after)]
  table = swap_effects.link_table(links)
  rewards = swap_effects.LinkedRewards(table)
  rewards.add(Scores.of(*zip(*rows), path="scores"), 0)
  values, scored = swap_effects.link_values(table, rewards)
  # The same tie on both sides is no flip; a tie that breaks is half of one.
  assert values["flip"].tolist() == [0.0, 1.0, 0.5, 1.0, 0.0]
  assert values["abs_change"][3] == pytest.approx(4 / 3)
  assert values["gap"][3] == pytest.approx((2 + 3 + 1) / 3)
  assert scored.tolist() == [True, True, True, True, False]  # the last lacks a reward
  assert values["links"].tolist() == [1, 1, 1, 1, 0]


def link(original, counterfactual, candidates, dataset="bbq", subset="Age",
         condition="ambiguous", rule="names"):
  return {"original_item_id": original, "counterfactual_item_id": counterfactual,
          "dataset": dataset, "domain": "bias", "subset": subset, "context_condition": condition,
          "rule": rule, "original_candidates": candidates[0],
          "counterfactual_candidates": candidates[1]}


# Two BBQ links of two answers each, and a CrowS-Pairs link of one sentence to the other.
HAND_LINKS = [link("a", "a'", ([0, 1], [0, 1])),
              link("b", "b'", ([0, 1], [0, 1]), subset="Race"),
              link("c", "c", ([0], [1]), dataset="crows_pairs", subset="gender", condition=None,
                   rule="sentences")]
HAND_ORIGINAL = Scores.of(["a", "a", "b", "b", "c", "c"], [0, 1, 0, 1, 0, 1],
                          [1.0, 0.0, 2.0, 0.0, 3.0, 1.0], "original")
HAND_SWAPPED = Scores.of(["a'", "a'", "b'", "b'"], [0, 1, 0, 1], [0.0, 1.0, 2.0, 0.5], "swapped")


def test_compute_by_hand():
  result = swap_effects.compute(HAND_LINKS, HAND_ORIGINAL, HAND_SWAPPED, Options(n_resamples=20))
  bbq, crows = result["datasets"]["bbq"], result["datasets"]["crows_pairs"]
  # a: both answers move by 1 and the preferred one flips, its answers 1 apart; b: 0 and 0.5,
  # no flip, its answers 2 apart.
  assert (bbq["n_links"], bbq["unscored"], bbq["rules"]) == (2, 0, ["names"])
  assert bbq["mean_abs_change"] == pytest.approx((1 + 0.25) / 2)
  assert bbq["relative_change"] == pytest.approx((1 + 0.25) / (1 + 2))
  assert bbq["flip_rate"] == 0.5
  assert bbq["subsets"]["Age"]["mean_abs_change"] == 1.0
  assert bbq["subsets"]["Race"]["flip_rate"] == 0.0
  assert bbq["conditions"]["ambiguous"]["n_links"] == 2
  # Two links are too few for an interval: null, with the reason.
  assert bbq["mean_abs_change_ci95"] is None
  assert result["null_reasons"]["datasets.bbq.mean_abs_change_ci95"] == estimates.too_few(2)
  # c: r(sent_less) - r(sent_more) = 1 - 3 on one item; no choice among responses.
  assert crows["mean_abs_change"] == 2.0
  assert "flip_rate" not in crows and "relative_change" not in crows
  assert "conditions" not in crows and crows["subsets"]["gender"]["n_links"] == 1


def test_a_link_joining_different_numbers_of_candidates_names_its_row():
  with pytest.raises(InputError, match=r"swaps.jsonl, row 2: the link joins different numbers"):
    swap_effects.link_table([HAND_LINKS[0], link("x", "y", ([0, 1], [0]))], "swaps.jsonl")


def test_a_missing_reward_names_the_item_candidate_and_scores():
  with pytest.raises(InputError, match=r"1 of 2 bbq swap links lack rewards \(first: item \"b'\" "
                     r"candidate 1 \(swapped\)\)"):
    swap_effects.compute(HAND_LINKS, HAND_ORIGINAL, Scores.of(
        ["a'", "a'", "b'"], [0, 1, 0], [0.0, 1.0, 2.0], "swapped"), Options(n_resamples=20))


def test_report_rows_per_dataset_subset_and_condition():
  result = swap_effects.compute(HAND_LINKS, HAND_ORIGINAL, HAND_SWAPPED, Options(n_resamples=20))
  lines = swap_effects.report_lines({"m": result, "unmeasured": None})
  assert lines[0] == f"## {swap_effects.SECTION_TITLE}"
  assert "| bbq (n=2) | 0.625 | – |" in lines
  assert "| bbq · Race (n=1) | 0.250 | – |" in lines
  assert "| bbq · ambiguous (n=2) | 0.625 | – |" in lines
  assert "| crows_pairs (n=1) | 2.000 | – |" in lines
  flips = lines[lines.index("**share of items whose preferred answer changes**"):]
  assert "| crows_pairs (n=1) | 2.000 | – |" not in flips
  assert "| bbq (n=2) | 0.500 | – |" in flips
