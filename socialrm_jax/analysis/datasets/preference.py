"""The generic dataset's analysis (preference data: gold pairs of a preference label), also that of
every dataset with no analysis of its own (a path source's own name): accuracy per label, and
best-of-N accuracy and RewardBench 2's scores (`analysis.best_of_n`) for rows of response lists."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from socialrm_jax.analysis import dataset_analysis
from socialrm_jax.analysis.metrics import accuracy, best_of_n, verdicts
from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.dataset_analysis import Finding


def label_of(item: Mapping[str, Any]) -> str:
  """An item's label, its stratum group ('' without one)."""
  return str((item.get("attributes") or {}).get("label") or "")


def summary(view) -> dict[str, Any]:
  """Accuracy per label (`labels.<label>`), when the rows had labels; best-of-N accuracy and
  RewardBench 2's scores (`best_of_n`), when rows had lists of responses."""
  node = best_of_n.summary(view.sums)
  labels = [label for label in view.sums.values("group") if label]
  if labels:
    node["labels"] = {label: accuracy.summarise(view.sums, lambda s, label=label: s.group == label)
                      for label in labels}
  return node


def report_sections(names: Sequence[str], nodes: Sequence[Mapping[str, Any] | None]) -> list[str]:
  labels = list(dict.fromkeys(label for n in nodes if n for label in n.get("labels", {})))
  if not labels:
    return []
  rows = [[label] + [report.cell((n or {}).get("labels", {}).get(label), "accuracy")
                     for n in nodes] for label in labels]
  return report.table(["label"] + [f"{name}: accuracy" for name in names], rows) + [""]


def findings(name: str, node: Mapping[str, Any]) -> list[Finding]:
  """Each subset and label (when there are several) where the rejected response wins: its
  accuracy's verdict (`verdicts`) is that the model prefers it. (The source as a whole is its
  domain's finding.)"""
  groups = [(f"**{name}** {kind[:-1]} {key}", n) for kind in ("subsets", "labels")
            if len(node.get(kind, {})) > 1 for key, n in node[kind].items()]
  return [(report.CHANCE - n["accuracy"], f"prefers the rejected response on {where}: accuracy "
           f"{report.cell(n, 'accuracy')} on {n['n_gold_pairs']} pairs")
          for where, n in groups
          if n.get("accuracy") is not None and verdicts.states_undesirable(n, "accuracy")]


ANALYSIS = dataset_analysis.register("preference", dataset_analysis.DatasetAnalysis(
    stratum_group=label_of, item_columns=best_of_n.item_columns,
    item_facts=best_of_n.item_facts, summary=summary,
    report_metrics=("accuracy", "js_distance", best_of_n.SCORE, best_of_n.ACCURACY),
    report_subset_metrics=("accuracy", best_of_n.SCORE),
    # Its accuracy is tested per subset and label too: the findings below name them.
    null_values={"accuracy": report.CHANCE}, tested_parts=("subsets", "labels"),
    report_sections=report_sections, findings=findings))
