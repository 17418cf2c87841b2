"""Per-objective metrics for multi-objective reward models.

A score head with L outputs keeps each candidate's whole reward vector in the scores (`rewards`);
`reward` is what `--objective` / `--objective_weights` made of it, and every metric uses that. To
show which objective carries a preference, every metric is also computed with each output alone
as the reward (the same items, pairs, bootstrap and seed), and metrics.json keeps the headline
numbers of each under `objectives.<index>`: per domain and dataset `accuracy` and `ci95`, and
the dataset's own rate where it has one without gold pairs (`stereotype_rate`, `ss`). The report
shows them as one table per model, a column per objective.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, Sequence

from socialrm_jax.analysis import evaluate
from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.tables import pairs
from socialrm_jax.analysis.tables.reward_tables import Scores

# The dataset-level values kept per objective, beside accuracy, when the dataset reports them.
DATASET_RATES = ("stereotype_rate", "ss")


def per_objective(items: pairs.ItemTable | Sequence[dict],
                  pair_table: pairs.PairTable | Sequence[dict],
                  parts: Callable[[], Iterable[Scores]],
                  options: evaluate.Options, names: Sequence[str] = ()) -> dict[str, Any]:
  """{"objectives": {index: headline metrics}} when every row of the scores carries a vector, of
  one length L >= 2, else {}. `parts()` reads the scores set (`reward_tables.score_parts`) once
  more: once to see the vectors, then once per objective, so one part is in memory at a time.
  `names`: the outputs' names (a custom reward head's, from run.json), kept as each objective's `name`."""
  lengths = set()
  for part in parts():
    if part.rewards is None:
      return {}
    lengths.add(part.rewards.shape[1])
  if len(lengths) != 1 or min(lengths) < 2:
    return {}
  out = {}
  for index in range(min(lengths)):
    one = (dataclasses.replace(part, reward=part.rewards[:, index], rewards=None)
           for part in parts())
    metrics = evaluate.metrics_from_scored(
        pairs.join(items, pair_table, one, options.allow_missing, options.item_fields), options)
    out[str(index)] = {
        **({"name": names[index]} if index < len(names) else {}),
        "domains": {d: {k: node.get(k) for k in ("accuracy", "ci95")}
                    for d, node in metrics["domains"].items()},
        "datasets": {d: {k: node[k] for k in ("accuracy", "ci95", *DATASET_RATES,
                                               *(f"{r}_ci95" for r in DATASET_RATES)) if k in node}
                     for d, node in metrics["datasets"].items()}}
  return {"objectives": out}


def report_lines(models: Mapping[str, Mapping[str, Any]]) -> list[str]:
  """The report's per-objective section: for each model whose scores carry vectors, domains and
  datasets down, objectives across."""
  with_vectors = {name: m["objectives"] for name, m in models.items() if m.get("objectives")}
  if not with_vectors:
    return []
  out = ["## Per objective", "",
         "The reward model's head has several outputs; every metric above uses the `reward` the "
         "scoring run reduced them to (`--objective` / `--objective_weights`, see its manifest). "
         "Here each output alone is the reward: gold-pair accuracy per domain and dataset (and "
         "the stereotype rates of datasets without gold pairs), with 95% intervals.", ""]
  for name, objectives in with_vectors.items():
    indices = list(objectives)
    rows = []
    for level in ("domains", "datasets"):
      for key in dict.fromkeys(k for o in objectives.values() for k in o[level]):
        for metric in ("accuracy", *DATASET_RATES):
          nodes = [objectives[i][level].get(key) for i in indices]
          if any(n and n.get(metric) is not None for n in nodes):
            rows.append([f"{key}: {metric}" if metric != "accuracy" else key] +
                        [report.cell(n, metric) for n in nodes])
    out += [f"**{name}**", ""]
    headers = [f"{i}: {objectives[i]['name']}" if "name" in objectives[i] else f"objective {i}"
               for i in indices]
    out += report.table(["domain / dataset"] + headers, rows) + [""]
  return out
