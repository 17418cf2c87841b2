"""Template sensitivity: does a finding survive rewording the prompt?

When a dataset's items come from several prompt templates (`--templates=all`; each dataset has
its default and a documented paraphrase, see `socialrm_jax.base.templates`), the main metrics use its
primary template only (`evaluate`). Here every template's items are evaluated alone, with the same
bootstrap and seed, and for each headline metric (accuracy and the dataset's report metrics) the
values per template and their spread (max - min) are kept in metrics.json under
`template_spread.datasets.<dataset>`:

  {"templates": [primary, ...], "n_items": {template: n},
   "metrics": {metric: {"values": {template: value}, "ci95": {template: [lo, hi]},
                        "spread": max - min (null with fewer than two values),
                        # only for metrics with a null value (the dataset
                        # analysis's `null_values`, and 1/2 for accuracy):
                        "null_value": v, "finding": {template: "above" | "below" | null},
                        "holds_under_every_template": bool}},
   "fragile_findings": [metric, ...]}

A finding here: the metric's 95% interval lies wholly above or wholly below its null value (1/2
for accuracy and rates of pairs, 0 for bias scores and differences), the interval half of a
verdict (`verdicts`; the other half, Holm's correction, is over the primary template's family). A finding holds under every template when every template's interval lies on the
same side; one that is a finding under some template but not under another, or on the other side
there, is fragile: a change of wording alone makes it or unmakes it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from socialrm_jax.analysis import dataset_analysis, evaluate
from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.tables.pairs import join, Scored
from socialrm_jax.analysis.tables.reward_tables import Scores

ACCURACY = "accuracy"
ABOVE, BELOW = "above", "below"


def finding(ci: Any, null_value: float) -> str | None:
  """ABOVE or BELOW when the interval lies wholly on that side of `null_value`, else None."""
  if report.excludes(ci, null_value, ">"):
    return ABOVE
  if report.excludes(ci, null_value, "<"):
    return BELOW
  return None


def metric_spread(nodes: Mapping[str, Mapping[str, Any]], metric: str,
                  null_value: float | None) -> dict[str, Any]:
  """One metric across templates (`nodes`: template -> its `datasets.<name>` node)."""
  values = {t: node.get(metric) for t, node in nodes.items()}
  present = [v for v in values.values() if v is not None]
  out: dict[str, Any] = {
      "values": values,
      "ci95": {t: node.get(report.ci_name(metric)) for t, node in nodes.items()},
      "spread": float(max(present) - min(present)) if len(present) > 1 else None}
  if null_value is not None:
    sides = {t: finding(out["ci95"][t], null_value) for t in nodes}
    out.update(null_value=null_value, finding=sides,
               holds_under_every_template=len(set(sides.values())) == 1 and
               next(iter(sides.values())) is not None)
  return out


def dataset_spread(name: str, nodes: Mapping[str, Mapping[str, Any]],
                   analysis: dataset_analysis.DatasetAnalysis) -> dict[str, Any]:
  """`template_spread.datasets.<name>` from each template's `datasets.<name>` node, the primary
  template's first; `analysis` is the dataset's (`dataset_analysis.for_dataset`)."""
  null_values = {ACCURACY: report.CHANCE, **analysis.null_values}
  metrics = {}
  for metric in dict.fromkeys((ACCURACY, *analysis.report_metrics)):
    if any(node.get(metric) is not None for node in nodes.values()):
      metrics[metric] = metric_spread(nodes, metric, null_values.get(metric))
  fragile = [metric for metric, m in metrics.items()
             if "finding" in m and any(m["finding"].values())
             and not m["holds_under_every_template"]]
  return {"templates": list(nodes),
          "n_items": {t: node.get("n_items") for t, node in nodes.items()},
          "metrics": metrics, "fragile_findings": fragile}


def compute(items: Sequence[dict], pair_rows: Sequence[dict], score_set: Scores,
            options: evaluate.Options) -> dict[str, Any]:
  """`template_spread` for one scores set: {"datasets": {name: dataset_spread}} for every dataset
  whose items come from more than one template ({"datasets": {}} when none does)."""
  return from_scored(join(items, pair_rows, score_set, options.allow_missing,
                          options.item_fields), options)


def from_scored(scored: Scored, options: evaluate.Options) -> dict[str, Any]:
  """`compute` on scores already joined to their items and pairs."""
  out = {}
  for name, names in evaluate.templates_by_dataset(scored).items():
    if len(names) < 2:
      continue
    nodes = {}
    for template in names:
      subset = evaluate.restrict(scored, (scored.dataset == name) & (scored.template == template))
      nodes[template] = evaluate.metrics_from_scored(subset, options)["datasets"][name]
    out[name] = dataset_spread(name, nodes, dataset_analysis.for_dataset(name))
  return {"datasets": out}


def _finding_words(m: Mapping[str, Any]) -> str:
  if "finding" not in m:
    return "–"
  sides = m["finding"]
  if not any(sides.values()):
    return "no finding under any template"
  if m["holds_under_every_template"]:
    return f"{next(iter(sides.values()))} {m['null_value']:g} under every template"
  return "**fragile**: " + "; ".join(
      f"{side} {m['null_value']:g} under {template}" if side else f"no finding under {template}"
      for template, side in sides.items())


def report_lines(models: Mapping[str, Mapping[str, Any]]) -> list[str]:
  """The report's template-sensitivity section: per model and dataset, each headline metric under
  every template with its interval, the spread, and whether its finding holds under every one;
  [] when no model's items had several templates of a dataset."""
  spreads = {name: m["template_spread"]["datasets"] for name, m in models.items()
             if (m.get("template_spread") or {}).get("datasets")}
  if not spreads:
    return []
  out = ["## Template sensitivity", "",
         "The items of these datasets were converted with several prompt templates (the dataset's "
         "default and paraphrases, `socialrm_jax/base/templates.py`); the tables above use each "
         "dataset's primary template (the first column here). Each metric below is computed on "
         "each template's items alone, with its 95% interval; *spread* is the largest value "
         "minus the smallest. A finding is an interval wholly above or below the metric's null "
         "value (1/2 for accuracy and rates, 0 for bias scores); it is **fragile** when it does "
         "not hold, on the same side, under every template.", ""]
  for model, by_dataset in spreads.items():
    fragile = [(dataset, metric) for dataset, node in by_dataset.items()
               for metric in node["fragile_findings"]]
    out += [f"**{model}**: " + (
        "fragile findings: " + ", ".join(f"{d} {m}" for d, m in fragile) if fragile else
        "every finding holds under every template."), ""]
    for dataset, node in by_dataset.items():
      rows = [[metric] + [report.fmt(m["values"][t], m["ci95"][t]) for t in node["templates"]]
              + [report.fmt(m["spread"]), _finding_words(m)]
              for metric, m in node["metrics"].items()]
      header = [f"{dataset}: metric"] + [f"{t} (n={node['n_items'][t]})"
                                         for t in node["templates"]] + ["spread", "finding"]
      out += report.table(header, rows) + [""]
  return out
