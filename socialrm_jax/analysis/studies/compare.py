"""Paired comparison of reward models on the same items: differences, intervals and tests.

Every pair of models (A, B, in the order given) is compared on the items both scored (the
intersection of their joined items, of each dataset's primary template as in metrics.json;
`n_common_items` says how many, beside each model's own count), on every metric that
metrics.json gives a 95% interval at the domain level (`domains.<domain>`) or the dataset level
(`datasets.<dataset>`) and that has a value for both models there: gold-pair accuracy and its
length-matched variant, control accuracy, and each dataset's own rates and scores (BBQ's
accuracies and bias scores, stereotype rates, StereoSet's ss / lms / icat, XSTest's rates,
ETHICS' group accuracy, Moral Stories' accuracies and norm sensitivity, and whatever a dataset's
analysis adds). Subsets, categories and labels are left out: they would
multiply the comparisons, and with them the correction, many times over for values the per-model
tables already show. A dataset's statistic that is its domain's, resample for resample (the
domain's only dataset with gold pairs, as BBQ is bias's), is listed once, as the domain's.

- Difference: A - B, with a 95% interval from a paired bootstrap over items (the expanded
  percentile interval of the metric's resampling units, as its own: `estimates`; StereoSet's
  icat, whose own interval has its own rule, from the two models' intervals at 97.5% each:
  `estimates.difference_intervals`). The two
  models' per-item values are resampled together: one stratified resample of the common items,
  with the strata, generator (seed, dataset) and number of resamples of the single-model
  intervals, and each statistic computed on each model's sums over that same resample by the code
  that computes metrics.json (the datasets' analyses' summaries and `accuracy`). Because
  `bootstrap` draws a resample over the distinct rows of the values it is given, here both
  models' values at once, a model's resampled values are distributed as in its own intervals but
  are not the same draws.
- Test, gold-pair accuracies (`accuracy`, `accuracy_length_matched`): the exact sign test over
  items, McNemar's test where an item has one pair. An item's difference is the sum, over the
  gold pairs the accuracy counts there, of A's outcome minus B's; the item counts for A when it
  is positive and for B when negative, and p is the two-sided binomial test of A's share of the
  items that count against 1/2 (1 when none does). With one pair per item and outcomes 0 and 1
  this is McNemar's test; a tie (1/2) against a win or a loss counts too, as a tie is half a win
  in the accuracy, so a model that ties where the other wins is worse on that pair, and a test
  that dropped such pairs could find nothing where every resample shows a difference. Items, not
  pairs: the pairs of one item (BBQ's, an ETHICS scenario's several) share candidates, so their
  outcomes are not independent, and a test over pairs finds too much (6.3 +- 0.8% of comparisons
  of two equal models at 100 times the bundled suite's items, orchestrators/interval_coverage.py);
  two equal models are exchangeable on every item, so the signs of the items' differences are
  fair coins whatever the pairs within an item do.
- Test, every other metric: t = d / se against Student's t on n - 1 degrees of freedom (n the
  metric's resampling units), se the standard deviation of the B resampled differences where d is
  defined, made unbiased (`verdicts.unbiased`), as the verdicts test a single model. The share of
  resamples beyond 0 would be the percentile interval's own test, but with B = 1,000 it is never
  below 2 / 1,001, and Holm's first step over the report's 30-odd comparisons asks for 0.0017:
  no such difference could ever hold.
- Correction: Holm's step-down method over every comparison with a p-value (all pairs of models
  and all metrics: the report's whole table); a difference holds when its adjusted p is below
  `ALPHA`.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import stats

from socialrm_jax.base import records
from socialrm_jax.analysis import dataset_analysis, evaluate
from socialrm_jax.analysis.metrics import accuracy, confounds, verdicts
from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.resampling import bootstrap, estimates
from socialrm_jax.analysis.resampling.estimates import Missing
from socialrm_jax.analysis.tables.pairs import Scored, item_chunks
from socialrm_jax.base.errors import InputError

ALPHA = 0.05
SIGN_TEST, PAIRED_BOOTSTRAP = "exact sign test over items", "paired bootstrap"
DOMAINS, DATASETS = "domains", "datasets"
# The gold-pair accuracies the sign test tests; the length-matched one counts only matched pairs.
GOLD_PAIR_ACCURACIES = ("accuracy", accuracy.LENGTH_MATCHED)
NO_RESAMPLES = "the difference is undefined in every resample"

# (level, key) -> metric -> (A's statistic, B's: their rows # [1 + B] over the same resamples,
# the resampling units behind them and their interval rules)
PairedRows = dict[tuple[str, str], dict[str, tuple[estimates.Kept, estimates.Kept]]]


def binomial_two_sided_p(successes: int, trials: int) -> float:
  """The exact two-sided binomial test of `successes` in `trials` against 1/2
  (`scipy.stats.binomtest`); 1 when there are no trials."""
  return float(stats.binomtest(successes, trials, 0.5).pvalue) if trials else 1.0


def sign_test(outcome_a: np.ndarray, outcome_b: np.ndarray, item: np.ndarray) -> dict[str, Any]:
  """The exact sign test over items of two models' outcomes on the same pairs (see the module
  docstring). outcome_a, outcome_b # [P] in {0, 1/2, 1}; item # [P], the item of each pair"""
  items, of_pair = np.unique(item, return_inverse=True)
  difference = np.bincount(of_pair, weights=np.asarray(outcome_a, dtype=np.float64)
                           - np.asarray(outcome_b, dtype=np.float64), minlength=items.size)
  a_better = int(np.count_nonzero(difference > 0))
  b_better = int(np.count_nonzero(difference < 0))
  return {"p": binomial_two_sided_p(a_better, a_better + b_better), "n_pairs": int(item.size),
          "n_items": int(items.size), "a_better": a_better, "b_better": b_better}


def bootstrap_p(differences: np.ndarray, units: float | None) -> float | Missing:
  """Two-sided p of the paired bootstrap's t (see the module docstring). differences # [1 + B]:
  the data's, then the resamples'; `units`: the resampling units (None: many)."""
  resampled = differences[1:][np.isfinite(differences[1:])]
  if resampled.size < 2:
    return Missing(NO_RESAMPLES)
  n = verdicts.MANY_UNITS if units is None else max(float(units), 2.0)
  se = float(verdicts.unbiased(np.std(resampled, ddof=1), np.asarray(n)))
  distance = abs(float(differences[0]))
  if se == 0:  # every resample alike: a difference the same on every item, or none
    return 0.0 if distance > 0 else 1.0
  return float(2 * stats.t.sf(distance / se, n - 1))


def holm(p_values: Sequence[float]) -> np.ndarray:
  """Holm's step-down adjusted p-values, in the order given (`verdicts.holm`, equal to
  statsmodels'). # [m]"""
  return verdicts.holm(np.asarray(p_values, dtype=np.float64), ALPHA)


def common_items(a: Scored, b: Scored) -> tuple[Scored, Scored]:
  """Both models' scored items restricted to the items both scored, in the items table's order."""
  shared = np.intersect1d(a.item, b.item)  # positions in the items table both were joined to
  a, b = (evaluate.restrict(s, np.isin(s.item, shared)) for s in (a, b))
  same = (all(np.array_equal(getattr(a, f), getattr(b, f))
              for f in ("item", "pair_item", "pair_chosen", "pair_rejected"))
          and np.array_equal(a.pair_source.strings(), b.pair_source.strings()))
  if not same:
    raise InputError("the two scores sets were joined to different items or pairs tables; "
                     "compare models scored on one conversion")
  return a, b


def _rows_of(kept: list[estimates.Kept], node: dict) -> dict[str, estimates.Kept]:
  """The statistics put into `node` itself (not into the nodes below it)."""
  return {k.name: k for k in kept if k.node is node}


def side_sums(joint: bootstrap.StratifiedSums, side: str) -> bootstrap.StratifiedSums:
  """One model's columns of sums resampled for both, under their own names."""
  prefix = f"{side}/"
  picked = [i for i, c in enumerate(joint.columns) if c.startswith(prefix)]
  # A side's columns are one run of the joint ones: a view of them, not a copy.
  assert picked == list(range(picked[0], picked[-1] + 1)), "a side's columns come together"
  return bootstrap.StratifiedSums(
      joint.strata, tuple(joint.columns[i][len(prefix):] for i in picked),
      joint.table[:, :, picked[0]:picked[-1] + 1], joint.draws,
      tuple(c[len(prefix):] for c in joint.zero if c.startswith(prefix)), joint.clustered)


def paired_rows(a: Scored, b: Scored, options: evaluate.Options) -> PairedRows:
  """Each domain- and dataset-level statistic of both models over the same resamples.

  `a` and `b` hold the same items and pairs (see `common_items`)."""
  sides = {"a": a, "b": b}
  sums: dict[str, dict[str, bootstrap.StratifiedSums]] = {"a": {}, "b": {}}
  found: dict[tuple[str, str], dict[str, dict[str, estimates.Kept]]] = {}
  for name in a.dataset.distinct():
    index = np.flatnonzero(a.dataset == name)                            # [n]
    analysis = dataset_analysis.for_dataset(name)

    def both(chunk: np.ndarray, analysis=analysis) -> tuple[bootstrap.Columns, bootstrap.Columns]:
      """Both models' per-item values of items `chunk`, and evaluate's own strata, so the
      intervals' strata (they depend on the items only: A's are B's)."""
      return ({f"{side}/{k}": v for side, scored in sides.items()
               for k, v in evaluate.dataset_columns(scored, analysis, chunk).items()},
              evaluate.strata(a, chunk, analysis))
    joint = bootstrap.stratified_sums_in_chunks(
        map(both, item_chunks(index)), options.n_resamples,
        bootstrap.generator(options.seed, name), analysis.cluster_groups)
    for side, scored in sides.items():
      sums[side][name] = side_sums(joint, side)
      with estimates.keeping_rows() as kept:
        node, own = evaluate.summaries(scored, analysis, index, sums[side][name], options)
      found.setdefault((DATASETS, name), {})[side] = {**_rows_of(kept, node),
                                                      **_rows_of(kept, own)}
  for side in sides:
    with estimates.keeping_rows() as kept:
      domains = accuracy.domain_summary(sums[side])
    for domain, node in domains.items():
      found.setdefault((DOMAINS, domain), {})[side] = _rows_of(kept, node)
  # Domains first, as the report's first screen orders them.
  ordered = sorted(found, key=lambda level_key: level_key[0] != DOMAINS)
  return {key: {metric: (found[key]["a"][metric], found[key]["b"][metric])
                for metric in found[key]["a"] if metric in found[key]["b"]}
          for key in ordered}


def _pairs_counted(scored: Scored, level: str, key: str, metric: str) -> np.ndarray:
  """The gold pairs a gold-pair accuracy counts at (level, key). # [P] bool"""
  field = scored.domain if level == DOMAINS else scored.dataset
  counted = (scored.pair_source == records.GOLD) & (field[scored.pair_item] == key)
  if metric == accuracy.LENGTH_MATCHED:
    counted &= confounds.length_matched(scored)
  return counted


def _repeats_a_domain(level: str, metric: str, rows: tuple[np.ndarray, np.ndarray],
                      domain_rows: list[tuple[str, tuple[np.ndarray, np.ndarray]]]) -> bool:
  """Whether a dataset's statistic is one of its domain's, row for row (the domain's only dataset
  with gold pairs, as BBQ is bias's): the same comparison, listed and tested once."""
  return level == DATASETS and any(
      name == metric and all(np.array_equal(x, y, equal_nan=True) for x, y in zip(seen, rows))
      for name, seen in domain_rows)


def compare_pair(a: Scored, b: Scored, options: evaluate.Options) -> list[dict[str, Any]]:
  """One row per metric both models have a value for, on their common items (unadjusted p)."""
  def outcomes(level: str, key: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    counted = _pairs_counted(a, level, key, metric)
    return a.outcome(counted), b.outcome(counted), a.pair_item[counted]
  return comparisons(paired_rows(a, b, options), outcomes)


# (level, key, metric) -> both models' outcomes on the gold pairs that gold-pair accuracy counts,
# and each pair's item
Outcomes = Callable[[str, str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]


def comparisons(paired: PairedRows, outcomes: Outcomes) -> list[dict[str, Any]]:
  """The rows of `compare_pair` from the statistics over the same resamples (`paired_rows`) and
  the gold pairs' outcomes the sign test tests. (The interval coverage benchmark calls it once per
  replicate data set.)"""
  out = []
  domain_rows: list[tuple[str, tuple[np.ndarray, np.ndarray]]] = []
  for (level, key), metrics in paired.items():
    for metric, (kept_a, kept_b) in metrics.items():
      rows_a, rows_b, units = kept_a.rows, kept_b.rows, kept_a.units
      if not (np.isfinite(rows_a[0]) and np.isfinite(rows_b[0])):
        continue
      if _repeats_a_domain(level, metric, (rows_a, rows_b), domain_rows):
        continue
      if level == DOMAINS:
        domain_rows.append((metric, (rows_a, rows_b)))
      difference, ci = estimates.difference_interval(kept_a, kept_b, NO_RESAMPLES)
      row = {"level": level, "key": key, "metric": metric, "value_a": float(rows_a[0]),
             "value_b": float(rows_b[0]), "difference": difference, "ci95": ci}
      if metric in GOLD_PAIR_ACCURACIES:
        row.update(test=SIGN_TEST, **sign_test(*outcomes(level, key, metric)))
      else:
        row.update(test=PAIRED_BOOTSTRAP, p=bootstrap_p(rows_a - rows_b, units))
      out.append(row)
  return out


def compare_models(scored: Mapping[str, Scored], options: evaluate.Options) -> dict[str, Any]:
  """comparisons.json: every pair of models, every shared metric, Holm-adjusted over them all."""
  counted = {name: evaluate.primary_template_items(s) for name, s in scored.items()}
  pairs = []
  for (name_a, a), (name_b, b) in itertools.combinations(counted.items(), 2):
    common_a, common_b = common_items(a, b)
    pairs.append({"a": name_a, "b": name_b, "n_items_a": a.n_items,
                  "n_items_b": b.n_items, "n_common_items": common_a.n_items,
                  "comparisons": compare_pair(common_a, common_b, options)})
  tested = [row for pair in pairs for row in pair["comparisons"]
            if not isinstance(row["p"], Missing)]
  for row, adjusted in zip(tested, holm([row["p"] for row in tested])):
    row["p_holm"] = float(adjusted)
    row["holds"] = bool(adjusted < ALPHA)
  tree = {"models": list(scored), "n_resamples": options.n_resamples, "seed": options.seed,
          "alpha": ALPHA, "correction": "holm", "n_tests": len(tested), "pairs": pairs}
  reasons: dict[str, str] = {}
  tree = estimates.finalize(tree, reasons=reasons)
  tree["null_reasons"] = reasons
  return tree


def _p_text(p: float | None) -> str:
  if p is None:
    return "null"
  return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def _interval_text(ci: list[float] | None) -> str:
  return "null" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def report_lines(comparisons: Mapping[str, Any]) -> list[str]:
  """The report's "Model comparisons" section (none for a single model)."""
  if not comparisons.get("pairs"):
    return []
  metrics = list(dict.fromkeys(row["metric"] for pair in comparisons["pairs"]
                               for row in pair["comparisons"]))
  out = ["## Model comparisons", "",
         "Each pair of models on the items both scored, for every metric with a 95% interval at "
         "the domain and dataset level that both have there (here: " +
         ", ".join(f"`{m}`" for m in metrics) + "; subsets, categories and labels are left out, "
         "and a dataset's accuracy that is its domain's is listed once). Difference = A − B, its "
         "interval a paired bootstrap over items: both models on the same resampled "
         "items, with the strata, seed and resamples of the intervals above. Test: "
         f"the {SIGN_TEST} for gold-pair accuracies (an item counts for the model whose "
         "outcomes on its gold pairs sum higher, a tie against a win or a loss included; "
         "McNemar's test where an item has one pair), else the "
         "two-sided t-test of the difference over the paired bootstrap's standard error. p-values are corrected with Holm's step-down method "
         f"over all {comparisons['n_tests']} comparisons below; a difference holds when the "
         f"adjusted p is below {comparisons['alpha']}.", ""]
  for pair in comparisons["pairs"]:
    out.append(f"- {pair['a']} and {pair['b']}: {pair['n_common_items']} items in common (of "
               f"{pair['n_items_a']} and {pair['n_items_b']} scored)")
  out.append("")
  rows = []
  for pair in comparisons["pairs"]:
    for row in pair["comparisons"]:
      scope = f"domain {row['key']}" if row["level"] == DOMAINS else row["key"]
      rows.append([f"{scope}: {row['metric']}", f"{pair['a']} {report.fmt(row['value_a'])}",
                   f"{pair['b']} {report.fmt(row['value_b'])}", report.fmt(row["difference"]),
                   _interval_text(row["ci95"]), row["test"], _p_text(row["p"]),
                   _p_text(row.get("p_holm")),
                   "–" if row["p"] is None else "yes" if row["holds"] else "no"])
  out += report.table(["metric", "A", "B", "A − B", "95% CI", "test", "p", "Holm p", "holds"],
                      rows)
  return out + [""]
