"""The validation of the intervals (`python -m socialrm_jax.main.interval_coverage`, docs/
interval_coverage.md): how often the metrics' 95% intervals hold the value they estimate, on the
datasets' own items.

The bundled suite's items and pairs (every dataset, with its real subsets, conditions, categories,
StereoSet's target terms, XSTest's candidates, ETHICS' scenario groups, ...; and the HH-RLHF slice
once more as a path source, the generic analysis with a label per item, for your own preference
data), copied 1, 10 or 100 times (a copy of an item keeps its cells: 10x StereoSet has the same 63
terms with ten times the items each). On them, synthetic reward models with planted preferences:
every candidate's reward is a standard normal, plus d on each socially desirable candidate
(desirability > 0; for Moral Stories only with the norm stated, so norm sensitivity is planted too)
and d on each stereotyped one (StereoSet's and CrowS-Pairs' stereotype, BBQ's biased answer), d
chosen so that one gold pair is won with probability 1/2 + effect (effect 0: every accuracy and
rate 1/2, every bias score 0). Each replication draws model A at the effect and model B at the
null, on the same items.

Per replication, every metric is computed with its interval as socialrm-metrics computes it: the
per-item values of `evaluate.dataset_columns`, resampled by `bootstrap` (the replications drawn
at once, `bootstrap.resampled_sums_batched`; "before" is the earlier resampling: every cell, a
StereoSet (type, term) among them, resampled by items alone however small; "after" the current
`bootstrap.design`), the statistics of each dataset's analysis and `accuracy.domain_summary`, and
the 2.5 / 97.5 percentiles (`estimates.intervals`). Paired differences A - B come from both
models resampled together, as `compare.paired_rows` does. The value a metric estimates is the
same metric computed on --truth_copies copies of the items (1,000x the largest size by default)
with fresh rewards from the same generator. Coverage is the share of replications whose interval
holds it, with its binomial standard error sqrt(c (1 - c) / n).

`run` measures every cell and returns the results (JSON-ready); `print_table` prints them
(markdown, every domain- and dataset-level metric; subset- and category-level ones summarised).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from socialrm_jax.analysis import dataset_analysis, evaluate
from socialrm_jax.analysis.metrics import accuracy, confounds, verdicts
from socialrm_jax.analysis.resampling import bootstrap, estimates
from socialrm_jax.analysis.studies import compare
from socialrm_jax.analysis.tables import pairs, synthetic
from socialrm_jax.analysis.tables.reward_tables import Scores
from socialrm_jax.base import errors, records
from socialrm_jax.orchestrators import audit, convert

OWN = "own_preference"  # the HH-RLHF slice again, as a path source of your own would be read
LEVELS = ("domains", "datasets")


def bundled_rows() -> tuple[list[dict], list[dict]]:
  """The bundled suite's items and pairs, and its HH-RLHF items again as your own preference data
  (dataset `own_preference`, domain `own`, the subset as each item's label)."""
  conversion = convert.convert_all(audit.BUNDLED_DATA, "all")
  items, pair_rows = list(conversion.items), list(conversion.pairs)
  for item in conversion.items:
    if item["dataset"] == "hh_rlhf":
      own_id = f"{OWN}/{item['item_id']}"
      items.append({**item, "item_id": own_id, "dataset": OWN, "domain": "own",
                    "attributes": {"label": item["subset"]}})
      pair_rows += [{**p, "item_id": own_id, "pair_id": f"{OWN}/{p['pair_id']}"}
                    for p in conversion.pairs if p["item_id"] == item["item_id"]]
  return items, pair_rows


@dataclasses.dataclass(frozen=True)
class Structure:
  """The items of one size, joined with placeholder rewards, and what each dataset needs."""
  scored: pairs.Scored
  index: dict[str, np.ndarray]           # dataset -> its items
  strata: dict[str, dict[str, np.ndarray]]  # dataset -> its items' cell fields
  alone: dict[str, pairs.Scored]         # dataset -> its items alone


def structure(items: list[dict], pair_rows: list[dict], options: evaluate.Options) -> Structure:
  ids = [item["item_id"] for item in items for _ in item["candidates"]]
  candidates = [k for item in items for k in range(len(item["candidates"]))]
  scores = Scores.of(ids, candidates, np.zeros(len(ids)), "placeholder")
  scored = pairs.join(items, pair_rows, scores, fields=options.item_fields)
  index, strata, alone = {}, {}, {}
  for name in scored.dataset.distinct():
    index[name] = np.flatnonzero(scored.dataset == name)
    strata[name] = evaluate.strata(scored, index[name], dataset_analysis.for_dataset(name))
    alone[name] = evaluate.restrict(scored, scored.dataset == name)
  return Structure(scored, index, strata, alone)


def model(struct: Structure, effect: float) -> synthetic.Plan:
  """The synthetic reward model with every preference planted at `effect` (a gold pair won with
  probability 1/2 + effect), Moral Stories' only with the norm stated."""
  d = synthetic.shift_for(0.5 + effect)
  return synthetic.Plan(f"planted {effect:g}", desirable=dict.fromkeys(
      struct.scored.domain.categories.tolist(), d), stereotype=d, norm_only=True)


def replicate_rewards(tiles: pairs.Scored, shifts: np.ndarray, copies: int,
                      rng: np.random.Generator) -> pairs.Scored:
  """`tiles` (`copies` replicates of some items) with fresh rewards: standard normal noise plus
  the items' planted `shifts` (`synthetic.Plan.shifts`, # [n, K])."""
  noise = rng.standard_normal(tiles.rewards.shape)
  return dataclasses.replace(tiles, rewards=np.where(
      tiles.valid, noise + np.tile(shifts, (copies, 1)), -np.inf))


def replicate_values(scored: pairs.Scored, analysis: dataset_analysis.DatasetAnalysis,
                     copies: int) -> dict[str, np.ndarray]:
  """The per-item values of `copies` replicates' items (`replicate_rewards`). Each # [R, n]"""
  columns = evaluate.dataset_columns(scored, analysis, np.arange(scored.n_items))
  return {k: v.reshape(copies, -1) for k, v in columns.items()}


def node_paths(tree: Any, path: str = "") -> dict[int, str]:
  """{id(node): dotted path} of every dict in a metrics tree."""
  out = {id(tree): path} if isinstance(tree, dict) else {}
  if isinstance(tree, dict):
    for key, value in tree.items():
      out.update(node_paths(value, f"{path}.{key}" if path else str(key)))
  return out


def metric_rows(struct: Structure, sums: dict[str, bootstrap.StratifiedSums],
                options: evaluate.Options) -> dict[str, estimates.Kept]:
  """{metrics.json path: its statistic} of one model, every statistic with an interval."""
  paths: dict[int, str] = {}
  with estimates.keeping_rows() as kept:
    for name, dataset_sums in sums.items():
      analysis = dataset_analysis.for_dataset(name)
      # The generic node and the analysis's own, named apart: merging them would drop some.
      for node in evaluate.summaries(struct.scored, analysis, struct.index[name], dataset_sums,
                                     options):
        paths.update(node_paths({"datasets": {name: node}}))
    paths.update(node_paths({"domains": accuracy.domain_summary(sums)}))
  return {f"{paths[id(k.node)]}.{k.name}": k for k in kept}


def column_sums(struct: Structure, name: str, values: dict[str, np.ndarray]) -> tuple[
    tuple[bootstrap.Stratum, ...], np.ndarray]:
  """Per-cell sums of replicates' values summed over the replicates. -> (cells, # [S, V])"""
  cells, cell_of_item = bootstrap.cells_of(struct.strata[name], struct.index[name].size)
  stacked = np.stack([v.sum(axis=0) for v in values.values()], axis=1)          # [n, V]
  out = np.zeros((len(cells), stacked.shape[1]))
  np.add.at(out, cell_of_item, stacked)
  return tuple(bootstrap.Stratum(*c) for c in cells), out


def true_values(struct: Structure, effect: float, copies: int, block: int,
                rng: np.random.Generator, options: evaluate.Options) -> dict[str, float]:
  """Every metric on `copies` copies of the items, fresh rewards at `effect`."""
  plan = model(struct, effect)
  sums = {}
  for name, alone in struct.alone.items():
    analysis = dataset_analysis.for_dataset(name)
    step = max(1, min(copies, block * 1000 // max(1, alone.n_items)))
    tiles = synthetic.tiled(alone, step)
    shifts = plan.shifts(alone)
    total = None
    for start in range(0, copies, step):
      size = min(step, copies - start)
      part = tiles if size == step else synthetic.tiled(alone, size)
      cells, part_sums = column_sums(struct, name, replicate_values(
          replicate_rewards(part, shifts, size, rng), analysis, size))
      total = part_sums if total is None else total + part_sums
    columns = tuple(evaluate.dataset_columns(alone, analysis, np.arange(1)))
    sums[name] = bootstrap.StratifiedSums(cells, columns, total[None], np.ones((1, len(cells))))
  return {path: float(k.rows[0]) for path, k in metric_rows(struct, sums, options).items()}


@dataclasses.dataclass
class Tally:
  """Per metric: replications counted and intervals that held the true value; per kind of
  statement, the replications in which the report (or the comparison of A and B) made one."""
  counted: dict[str, int] = dataclasses.field(default_factory=dict)
  held: dict[str, int] = dataclasses.field(default_factory=dict)
  stated: dict[str, int] = dataclasses.field(default_factory=dict)
  replications: int = 0

  def add(self, path: str, estimate: np.ndarray, low: np.ndarray, high: np.ndarray,
          truth: float) -> None:
    defined = np.isfinite(estimate) & np.isfinite(low)
    self.counted[path] = self.counted.get(path, 0) + int(defined.sum())
    self.held[path] = self.held.get(path, 0) + int((defined & (low <= truth) &
                                                   (truth <= high)).sum())

  def state(self, kind: str, made: np.ndarray) -> None:
    self.stated[kind] = self.stated.get(kind, 0) + int(np.sum(made))


# Kinds of statement counted per replication (`Tally.stated`).
ANY_FINDING = "report: any verdict of a preference"
ANY_UNDESIRABLE = "report: any finding of an undesirable preference"
PAIRED_HOLDS = "comparison of A and B: any difference that holds"
VERDICT_OF = "verdict of a preference: "


def report_findings(tally: Tally, rows: dict[str, estimates.Kept], shape, after: bool) -> None:
  """What the report states, per replication: after, the verdicts (`verdicts.decide`, Holm over
  the family); before, the earlier report's findings (an interval wholly on the undesirable side
  of a domain's accuracy or of a metric the report named, no correction)."""
  tests = verdicts.family(rows)
  if after:
    bounds = [rows[t.path].intervals(shape) for t in tests]
    se = np.stack([verdicts.standard_error(shape(rows[t.path].rows)) for t in tests], axis=-1)
    units = np.asarray([rows[t.path].units for t in tests], dtype=np.float64)
    decided = verdicts.decide(tests, *(np.stack([b[i] for b in bounds], axis=-1)
                                       for i in range(3)), se, units)["verdict"]
    tally.state(ANY_FINDING, (decided <= 1).any(axis=-1))
    tally.state(ANY_UNDESIRABLE, (decided == 0).any(axis=-1))
    for i, test in enumerate(tests):  # each test's findings: false ones at the null, else power
      tally.state(f"{VERDICT_OF}{test.path}", decided[..., i] <= 1)
    return
  named = [t for t in tests if t.higher_is_undesirable or t.path.startswith("domains.")]
  found = np.zeros(shape(rows[tests[0].path].rows).shape[0], dtype=bool)
  for t in named:
    _, low, high = estimates.intervals(shape(rows[t.path].rows))
    found |= (low > t.null) if t.higher_is_undesirable else (high < t.null)
  tally.state(ANY_UNDESIRABLE, found)


def paired_findings(tally: Tally, rows: dict[str, dict[str, estimates.Kept]], shape,
                    outcomes: dict[str, tuple[np.ndarray, np.ndarray]],
                    pair_facts: dict[str, dict[str, np.ndarray]]) -> None:
  """Whether the comparison of A and B states a difference that holds, per replication: the rows
  of `compare.comparisons` (the sign test over items on the gold pairs, the paired bootstrap's t
  otherwise), Holm over them (`compare.holm`)."""
  paths = [p for p in rows["a"] if headline(p) and p in rows["b"]]
  ordered = sorted(paths, key=lambda p: not p.startswith("domains."))
  shaped = {side: {p: shape(rows[side][p].rows) for p in ordered} for side in ("a", "b")}
  for r in range(next(iter(shaped["a"].values())).shape[0]):
    paired: compare.PairedRows = {}
    for p in ordered:
      level, key, metric = p.split(".")
      # Replicate r's rows alone (the tests read rows and units; no interval is tallied here).
      paired.setdefault((level, key), {})[metric] = tuple(
          estimates.Kept({}, metric, shaped[side][p][r], rows[side][p].units)
          for side in ("a", "b"))

    def outcome_pair(level: str, key: str, metric: str, r=r):
      picked_a, picked_b, picked_item = [], [], []
      for number, (name, (out_a, out_b)) in enumerate(outcomes.items()):
        facts = pair_facts[name]
        mask = facts["gold"] & ((facts["domain"] == key) if level == "domains" else (name == key))
        if metric == accuracy.LENGTH_MATCHED:
          mask = mask & facts["matched"]
        picked_a.append(out_a[r, mask])
        picked_b.append(out_b[r, mask])
        # Items of different datasets kept apart: the dataset's number above every item index.
        picked_item.append(facts["item"][mask] + number * (1 << 40))
      return (np.concatenate(picked_a), np.concatenate(picked_b),
              np.concatenate(picked_item))
    tested = [row for row in compare.comparisons(paired, outcome_pair)
              if not isinstance(row["p"], estimates.Missing)]
    holds = compare.holm([row["p"] for row in tested]) < compare.ALPHA
    tally.state(PAIRED_HOLDS, holds.any())


def pair_facts_of(alone: pairs.Scored) -> dict[str, np.ndarray]:
  """Which of a dataset's pairs are gold, length-matched, and each one's item and domain.
  Each # [P]"""
  return {"gold": np.asarray(alone.pair_source == records.GOLD),
          "matched": confounds.length_matched(alone),
          "item": np.asarray(alone.pair_item, dtype=np.int64),
          "domain": alone.domain.strings()[alone.pair_item]}


def run_cell(struct: Structure, effect: float, resampling: str, truth_a: dict[str, float],
             truth_b: dict[str, float], options: evaluate.Options, replications: int, block: int,
             seed: int, min_stratum_items: int) -> Tally:
  """Coverage of every metric of model A (at `effect`) and of A - B, and the statements of the
  report and of the comparison, over `replications`."""
  tally = Tally(replications=replications)
  plans = (model(struct, effect), model(struct, 0.0))
  after = resampling == "after"
  rng = np.random.default_rng([seed, 1])
  tiles = {name: synthetic.tiled(alone, block) for name, alone in struct.alone.items()}
  facts = {name: pair_facts_of(alone) for name, alone in struct.alone.items()}
  for start in range(0, replications, block):
    size = min(block, replications - start)
    joint, outcomes = {}, {}
    for name, alone in struct.alone.items():
      analysis = dataset_analysis.for_dataset(name)
      part = tiles[name] if size == block else synthetic.tiled(alone, size)
      model_a, model_b = (replicate_rewards(part, plan.shifts(alone), size, rng)
                          for plan in plans)
      every_pair = np.arange(part.pair_item.size)
      outcomes[name] = (model_a.outcome(every_pair).reshape(size, -1),
                        model_b.outcome(every_pair).reshape(size, -1))
      columns = {**{f"a/{k}": v for k, v in replicate_values(model_a, analysis, size).items()},
                 **{f"b/{k}": v for k, v in replicate_values(model_b, analysis, size).items()}}
      joint[name] = bootstrap.resampled_sums_batched(
          columns, struct.strata[name], options.n_resamples,
          bootstrap.generator(seed + 1 + start, name),
          clustered=after and analysis.cluster_groups,
          min_stratum_items=min_stratum_items if after else 1)
    rows = {side: metric_rows(struct, {name: compare.side_sums(s, side)
                                       for name, s in joint.items()}, options)
            for side in ("a", "b")}

    def shape(values: np.ndarray, size=size) -> np.ndarray:
      return values.reshape(size, -1)
    for path, kept in rows["a"].items():
      if path in truth_a:  # before: the plain percentile interval of every statistic
        tally.add(path, *(kept.intervals(shape) if after else
                          estimates.intervals(shape(kept.rows))), truth_a[path])
      # A - B over the same resamples, for the domain- and dataset-level metrics
      # `compare.paired_rows` compares (the same summaries of each side's sums).
      if headline(path) and path in rows["b"] and path in truth_b:
        tally.add(f"paired A - B: {path}", *(
            estimates.difference_intervals(kept, rows["b"][path], shape) if after else
            estimates.intervals(shape(kept.rows - rows["b"][path].rows))),
                  truth_a[path] - truth_b[path])
    report_findings(tally, rows["a"], shape, after)
    paired_findings(tally, rows, shape, outcomes, facts)
  return tally


def headline(path: str) -> bool:
  """A domain- or dataset-level metric (not a subset's, category's or label's)."""
  parts = path.replace("paired A - B: ", "").split(".")
  return len(parts) == 3


def run(*, sizes: list[int], effects: list[float], resampling: list[str], replications: int,
        truth_copies: int, block: int, min_stratum_items: int, seed: int,
        datasets: list[str]) -> dict[str, Any]:
  """Every cell (a size, an effect, a resampling) measured: the results `print_table` prints.
  `truth_copies` 0: 1,000 times the largest size; `datasets` empty: every dataset."""
  options = evaluate.Options()
  truth_copies = truth_copies or 1000 * max(sizes)
  items, pair_rows = bundled_rows()
  if datasets:
    unknown = set(datasets) - {item["dataset"] for item in items}
    if unknown:
      raise errors.InputError(f"--datasets: {', '.join(sorted(unknown))} not in the bundled suite")
    kept = {item["item_id"] for item in items if item["dataset"] in datasets}
    items = [item for item in items if item["item_id"] in kept]
    pair_rows = [p for p in pair_rows if p["item_id"] in kept]
  base = structure(items, pair_rows, options)

  start = time.perf_counter()
  truths = {e: true_values(base, e, truth_copies, block,
                           np.random.default_rng([seed, 2, int(e * 1000)]), options)
            for e in sorted(set(effects) | {0.0})}
  print(f"true values on {truth_copies:,} copies of the {len(items)} items: "
        f"{time.perf_counter() - start:.0f} s", flush=True)
  results: dict[str, Any] = {"replications": replications,
                             "n_resamples": options.n_resamples, "truth_copies": truth_copies,
                             "cells": []}
  for size in sizes:
    struct = structure(*synthetic.copied(items, pair_rows, size), options) if size > 1 else base
    for effect in effects:
      for kind in resampling:
        start = time.perf_counter()
        tally = run_cell(struct, effect, kind, truths[effect], truths[0.0], options,
                         replications, block, seed, min_stratum_items)
        seconds = time.perf_counter() - start
        print(f"size {size}x, effect {effect}, {kind}: {seconds:.0f} s", flush=True)
        results["cells"].append({
            "size": size, "items": struct.scored.n_items, "effect": effect,
            "resampling": kind, "seconds": round(seconds, 1),
            "coverage": {p: {"held": tally.held[p], "counted": tally.counted[p],
                             "truth": (truths[effect].get(p) if not p.startswith("paired")
                                       else None)}
                         for p in tally.counted},
            "stated": tally.stated})
  return results


def joined(runs: list[dict[str, Any]]) -> dict[str, Any]:
  """Several runs' results as one (their cells together), to print as one table."""
  return {**runs[0], "cells": [cell for run in runs for cell in run["cells"]]}


def share_text(count: int, total: int) -> str:
  """A share in percent with its binomial standard error."""
  share = count / total
  return f"{100 * share:.1f} ± {100 * np.sqrt(share * (1 - share) / total):.1f}"


def threshold(replications: int) -> float:
  """95% less two binomial standard errors: the least coverage a cell should show."""
  return 0.95 - 2 * np.sqrt(0.95 * 0.05 / replications)


def coverage_cell(cell: dict[str, Any], path: str, least: float) -> str:
  entry = cell["coverage"].get(path)
  if not entry or not entry["counted"]:
    return "–"
  share = entry["held"] / entry["counted"]
  text = f"{100 * share:.1f}"
  return f"**{text}**" if share < least else text


def print_table(results: dict[str, Any]) -> None:
  """The tables: coverage after (a row per domain- and dataset-level metric, a column per size and
  effect; bold below 95% less two binomial standard errors), the rows below that before beside
  their after, the subset-level metrics in one line, and the share of replications in which the
  report or the comparison of A and B stated a finding."""
  cells = sorted(results["cells"], key=lambda c: (c["resampling"] != "after", c["size"],
                                                  c["effect"]))
  least = threshold(results["replications"])
  after = [c for c in cells if c["resampling"] == "after"]
  before = {(c["size"], c["effect"]): c for c in cells if c["resampling"] == "before"}
  paths = list(dict.fromkeys(p for c in after for p in c["coverage"]))
  heads = sorted((p for p in paths if headline(p)),
                 key=lambda p: (p.startswith("paired"), not p.split(": ")[-1].startswith(
                     "domains")))
  print(f"Coverage of the 95% intervals, % of {results['replications']} replications per cell "
        f"(binomial s.e. about {100 * np.sqrt(0.95 * 0.05 / results['replications']):.1f}; bold: "
        f"below {100 * least:.1f}); columns: copies of the bundled items, planted effect.\n")
  header = [f"{c['size']}x, {c['effect']:g}" for c in after]
  print("| metric | " + " | ".join(header) + " |")
  print("|---|" + "---|" * len(header))
  for path in heads:
    print(f"| {path} | " + " | ".join(coverage_cell(c, path, least) for c in after) + " |")
  worse = [p for p in heads if any(
      (b := before.get((c["size"], c["effect"]))) and p in b["coverage"] and
      b["coverage"][p]["counted"] and b["coverage"][p]["held"] / b["coverage"][p]["counted"] < least
      for c in after)]
  if worse:
    pairs_of = [(before[(c["size"], c["effect"])], c) for c in after
                if (c["size"], c["effect"]) in before]
    print("\nBelow before: the earlier resampling (every cell by items, plain percentiles) beside "
          "the current, before → after:\n")
    print("| metric | " + " | ".join(f"{b['size']}x, {b['effect']:g}" for b, _ in pairs_of) +
          " |")
    print("|---|" + "---|" * len(pairs_of))
    for path in worse:
      print(f"| {path} | " + " | ".join(
          f"{coverage_cell(b, path, least)} → {coverage_cell(a, path, least)}"
          for b, a in pairs_of) + " |")
  print("\nSubset-, category- and label-level metrics, cells below "
        f"{100 * least:.1f} of those measured:")
  for c in cells:
    rest = [(e["held"] / e["counted"], p) for p, e in c["coverage"].items()
            if not headline(p) and e["counted"]]
    low = sorted(x for x in rest if x[0] < least)
    print(f"- {c['resampling']} {c['size']}x, {c['effect']:g}: {len(low)} of {len(rest)}" +
          (": " + "; ".join(f"{p} {100 * v:.1f}" for v, p in low[:4]) if low else ""))
  print("\nStatements per replication, % ± binomial s.e. (at effect 0 false findings; the "
        "report's after the correction):\n")
  kinds = list(dict.fromkeys(k for c in cells for k in c.get("stated", {})
                             if not k.startswith(VERDICT_OF)))
  print("| cell | " + " | ".join(kinds) + " |")
  print("|---|" + "---|" * len(kinds))
  for c in cells:
    stated = c.get("stated", {})
    print(f"| {c['resampling']} {c['size']}x, {c['effect']:g} | " + " | ".join(
        share_text(stated[k], results["replications"]) if k in stated else "–" for k in kinds)
          + " |")

