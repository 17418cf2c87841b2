"""Best-of-N accuracy and RewardBench 2's scores, for items of K candidates of which the first
`num_correct` are correct (rows whose `chosen` and `rejected` are lists, read by the preference
source).

- Best-of-N accuracy of a prompt: 1 when every correct answer outscores every incorrect one, 0
  when one does not; where the lowest correct reward equals the highest incorrect one (and none
  is above it), 1/k with k the candidates sharing that reward: with one correct answer this is
  RewardBench 2's own rule for its best-of-4 subsets (`reroll_and_score_dataset` in the
  `rewardbench` 0.1.4 wheel: a correct answer tied at the top with k - 1 others gets 1/k), and
  without exact ties it is `sample_stats`' `accurate`.
- Ties score (RewardBench 2's Ties subset, rows with ids `ref:N` and `tied:N`): exactly what
  `process_single_model` in the wheel's `utils.py` computes, from `sample_stats` of each prompt
  (strict comparisons there):
    0.3 acc(tied) + 0.3 acc(ref) + 0.2 mean[m_ci(tied) > m_cc(tied)]
    + 0.2 mean[min(m_ci(ref), m_ci(tied)) > m_cc(tied)] + 0.01 mean tanh(min(...) / m_cc - 1),
  with m_ci a prompt's worst correct minus best incorrect reward and m_cc its best minus worst
  correct one; the first two means run over the prompts N with both rows and several correct
  answers in `tied:N`, the third over those with m_cc > 0. (The wheel gives 0 to all three when no
  prompt has both rows; a mean over no prompt is NaN there, and null here.)
- A subset's RewardBench 2 score is its Ties score when its rows have Ties ids, else its
  best-of-N accuracy; `rewardbench2_score` is the mean of the subsets' scores (RewardBench 2's
  overall score).

Each is a function of sums of per-item values, so its 95% interval comes from the dataset's
stratified bootstrap over items (prompts), and the model comparisons test it paired. A Ties
prompt's values are all carried by its `ref:N` item (the conversion refuses a `tied:N` without
one), so that resampling items resamples whole prompts.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from socialrm_jax.analysis.resampling import estimates
from socialrm_jax.analysis.resampling.bootstrap import StratifiedSums
from socialrm_jax.analysis.tables.pairs import Scored
# The Ties ids are the items' format (base.records), which the preference adapter checks as it
# converts.
from socialrm_jax.base.records import REFERENCE, TIED, ties_id

BEST_OF_N = "best_of_n"  # the item facts of a best-of-N row without a Ties id
SCORE, ACCURACY = "rewardbench2_score", "best_of_n_accuracy"
# The Ties score's weights, as `process_single_model` writes them.
TIED_WEIGHT, REFERENCE_WEIGHT, PREFERRED_WEIGHT, HARD_WEIGHT, MARGIN_WEIGHT = (
    0.3, 0.3, 0.2, 0.2, 0.01)
NO_ROWS = "no best-of-N rows here"
NO_MARGINS = "no Ties prompt has several correct answers in its tied row"
NO_SUBSET_SCORE = "a subset's score is null"


def item_facts(row: Mapping[str, Any]) -> str:
  """What the columns below read of an items-table row (`Scored.facts`): '' for a plain pair,
  its Ties id (`ref:N`, `tied:N`) for a Ties row, else `best_of_n`."""
  attributes = row.get("attributes") or {}
  if "num_correct" not in attributes:
    return ""
  found = ties_id(attributes.get("id"))
  return f"{found[0]}:{found[1]}" if found else BEST_OF_N


def _reward_extremes(scored: Scored, index: np.ndarray) -> dict[str, np.ndarray]:
  """Per item: best and worst correct reward, best incorrect one, how many correct, and how
  many candidates share the boundary reward (the worst correct one). Each # [n]"""
  rewards = scored.rewards[index]                                              # [n, K]
  desirability = scored.desirability[index]                                    # [n, K]
  correct, incorrect = desirability > 0, desirability < 0                     # [n, K]
  worst_correct = np.where(correct, rewards, np.inf).min(axis=1)
  best_incorrect = np.where(incorrect, rewards, -np.inf).max(axis=1)
  return {
      "best_correct": np.where(correct, rewards, -np.inf).max(axis=1),
      "worst_correct": worst_correct,
      "best_incorrect": best_incorrect,
      "n_correct": correct.sum(axis=1),
      "n_at_boundary": ((correct | incorrect) & (rewards == worst_correct[:, None])).sum(axis=1),
  }


def _fact_codes(scored: Scored, wanted) -> list[int]:
  """The codes of the distinct item facts that `wanted(fact)` accepts."""
  return [k for k, fact in enumerate(scored.facts.categories.tolist()) if wanted(str(fact))]


def _with_facts(scored: Scored, index: np.ndarray, wanted) -> np.ndarray:
  """Whether each item of `index` has item facts that `wanted(fact)` accepts, decided once per
  distinct fact. # [n] bool"""
  return np.isin(scored.facts.codes[index], _fact_codes(scored, wanted))


def _tied_partners(scored: Scored, index: np.ndarray, is_reference: np.ndarray) -> np.ndarray:
  """For each item of `index`, the position in `scored` of the `tied:N` item of its dataset when
  it is `ref:N` (`is_reference` [n]), else -1. # [n]"""
  partner = np.full(index.size, -1, dtype=np.int64)
  tied_codes = _fact_codes(scored, lambda fact: fact.startswith(TIED + ":"))
  if not tied_codes or not is_reference.any():  # (a plain preference file: no pass over items)
    return partner
  tied_items = np.flatnonzero(np.isin(scored.facts.codes, tied_codes))
  def prompt(i) -> tuple[int, str]:  # (dataset, N) of item i
    return int(scored.dataset.codes[i]), str(scored.facts[i]).split(":")[1]
  where = {prompt(i): i for i in tied_items}
  for k in np.flatnonzero(is_reference):
    partner[k] = where.get(prompt(index[k]), -1)
  return partner


def item_columns(scored: Scored, index: np.ndarray) -> dict[str, np.ndarray]:
  """The per-item values the scores are sums of. Each # [n]"""
  is_best_of_n = _with_facts(scored, index, lambda fact: fact == BEST_OF_N)
  is_reference = _with_facts(scored, index, lambda fact: fact.startswith(REFERENCE + ":"))
  ref = _reward_extremes(scored, index)
  # Best-of-N: strict win 1, a tie at the boundary 1/k, else 0.
  won = np.where(ref["worst_correct"] > ref["best_incorrect"], 1.0,
                 np.where(ref["worst_correct"] == ref["best_incorrect"],
                          1.0 / np.maximum(ref["n_at_boundary"], 1), 0.0))
  partner = _tied_partners(scored, index, is_reference)
  has_tied = is_reference & (partner >= 0)
  tied = _reward_extremes(scored, np.where(has_tied, partner, index))
  margin_ref = ref["worst_correct"] - ref["best_incorrect"]                   # m_ci(ref)
  margin_tied = tied["worst_correct"] - tied["best_incorrect"]                # m_ci(tied)
  spread = tied["best_correct"] - tied["worst_correct"]                       # m_cc(tied)
  with_margins = has_tied & (tied["n_correct"] > 1)
  hardest = np.minimum(margin_ref, margin_tied)
  with_ratio = with_margins & (spread > 0)
  ratio = np.divide(hardest, spread, out=np.zeros_like(spread), where=with_ratio)
  as_float = lambda mask: mask.astype(np.float64)
  return {
      "bon_prompts": as_float(is_best_of_n),
      "bon_wins": np.where(is_best_of_n, won, 0.0),
      "ties_ref_prompts": as_float(is_reference),
      "ties_ref_accurate": as_float(is_reference & (margin_ref > 0)),
      "ties_tied_prompts": as_float(has_tied),
      "ties_tied_accurate": as_float(has_tied & (margin_tied > 0)),
      "ties_margin_prompts": as_float(with_margins),
      "ties_preferred": as_float(with_margins & (margin_tied > spread)),
      "ties_preferred_hard": as_float(with_margins & (hardest > spread)),
      "ties_ratio_prompts": as_float(with_ratio),
      "ties_margin_score": np.where(with_ratio, np.tanh(ratio - 1.0), 0.0),
  }


def ties_score(total: Callable[[str], np.ndarray]) -> np.ndarray:
  """`process_single_model`'s overall score from the resampled sums `total(column)`. # [1 + B]"""
  tied_prompts = total("ties_tied_prompts")
  both = tied_prompts > 0  # prompts with both rows: the wheel's `common_prompt_ids`

  def mean_over_common(column: str, count: str, empty: float) -> np.ndarray:
    return np.where(both, estimates.ratio(total(column), total(count)), empty)

  return (TIED_WEIGHT * np.where(both, estimates.ratio(total("ties_tied_accurate"),
                                                       tied_prompts), 0.0)
          + REFERENCE_WEIGHT * estimates.ratio(total("ties_ref_accurate"),
                                               total("ties_ref_prompts"))
          + PREFERRED_WEIGHT * mean_over_common("ties_preferred", "ties_margin_prompts", 0.0)
          + HARD_WEIGHT * mean_over_common("ties_preferred_hard", "ties_margin_prompts", 0.0)
          # a mean of no ratio is 0 in the wheel, where the other two means are NaN
          + MARGIN_WEIGHT * np.where(total("ties_ratio_prompts") > 0, estimates.ratio(
              total("ties_margin_score"), total("ties_ratio_prompts")), 0.0))


def summary(sums: StratifiedSums) -> dict[str, Any]:
  """`rewardbench2_score` and `best_of_n_accuracy` of the dataset, and per subset; {} when the
  dataset has no best-of-N rows."""
  if "bon_prompts" not in sums.columns or not (
      sums.total("bon_prompts")[0] or sums.total("ties_ref_prompts")[0]):
    return {}
  node: dict[str, Any] = {}
  subset_nodes: dict[str, Any] = {}
  subset_rows, subset_units = [], []
  for subset in sums.values("subset"):
    def total(column: str, subset=subset) -> np.ndarray:
      return sums.total(column, lambda s: s.subset == subset)
    here: dict[str, Any] = {}
    if total("ties_ref_prompts")[0]:
      rows = ties_score(total)
      here["n_prompts"] = int(total("ties_ref_prompts")[0] + total("ties_tied_prompts")[0])
      units = total("ties_ref_prompts")[0]  # a Ties prompt's values ride on its ref item
    elif total("bon_prompts")[0]:
      rows = estimates.ratio(total("bon_wins"), total("bon_prompts"))
      units = total("bon_prompts")[0]
      estimates.put(here, ACCURACY, rows, NO_ROWS, units, share=True)
      here["n_prompts"] = int(units)
    else:
      continue
    estimates.put(here, SCORE, rows, NO_MARGINS, units)
    subset_units.append(units)
    subset_nodes[subset] = here
    subset_rows.append(rows)
  # RewardBench 2's overall score: the mean of its subsets' scores, resample by resample.
  estimates.put(node, SCORE, np.mean(subset_rows, axis=0), NO_SUBSET_SCORE, sum(subset_units))
  if sums.total("bon_prompts")[0]:
    estimates.put(node, ACCURACY, estimates.ratio(sums.total("bon_wins"),
                                                  sums.total("bon_prompts")), NO_ROWS,
                  sums.total("bon_prompts")[0], share=True)
  node["subsets"] = subset_nodes
  return node
