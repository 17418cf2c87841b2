"""The report's figures, one function per figure, each taking `{model name: metrics.json tree}`
(and, for a figure a dataset's analysis draws, the dataset's name) and writing one PNG. A figure
with nothing to show (no model has the data) is not written and its function returns None, so the
report can say so.

Each is drawn on its own `matplotlib.figure.Figure` and saved with `Figure.savefig`, so no
backend is chosen for the process (pyplot and `matplotlib.use` are for applications).
"""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from socialrm_jax.analysis.dataset_analysis import Models, for_dataset

DPI = 120


def _bars_with_intervals(ax, labels: list[str], models: Models, value_of, width_total: float = 0.8):
  """Grouped bars: one group per label, one bar per model, error bars from the intervals."""
  width = width_total / max(len(models), 1)
  x = np.arange(len(labels))
  for m, (name, metrics) in enumerate(models.items()):
    values, low, high = [], [], []
    for label in labels:
      value, ci = value_of(metrics, label)
      values.append(np.nan if value is None else value)
      low.append(0 if value is None or ci is None else value - ci[0])
      high.append(0 if value is None or ci is None else ci[1] - value)
    ax.bar(x + (m - (len(models) - 1) / 2) * width, values, width, yerr=[low, high], capsize=3,
           label=name)
  ax.set_xticks(x, labels, rotation=30, ha="right")
  ax.legend(fontsize="small")


def _save(fig: Figure, path: str | os.PathLike) -> str:
  fig.tight_layout()
  fig.savefig(path, dpi=DPI)
  return os.fspath(path)


def domain_accuracy(models: Models, path: str | os.PathLike) -> str | None:
  domains = list(dict.fromkeys(d for m in models.values() for d in m.get("domains", {})))
  if not domains:
    return None
  fig = Figure(figsize=(1.6 + 1.2 * len(domains), 4))
  ax = fig.subplots()
  _bars_with_intervals(ax, domains, models, lambda m, d: (
      m["domains"].get(d, {}).get("accuracy"), m["domains"].get(d, {}).get("ci95")))
  ax.axhline(0.5, color="gray", linestyle="--", linewidth=1)
  ax.set_ylim(0, 1)
  ax.set_ylabel("accuracy on gold pairs (95% CI)")
  ax.set_title("Preference for the socially desirable response, per domain")
  return _save(fig, path)


def category_bias_scores(models: Models, path: str | os.PathLike, dataset: str) -> str | None:
  """Bias scores per category and context condition (BBQ's analysis draws it)."""
  def category(m, c):
    return m.get("datasets", {}).get(dataset, {}).get("categories", {}).get(c, {})
  categories = list(dict.fromkeys(c for m in models.values()
                                  for c in m.get("datasets", {}).get(dataset, {})
                                  .get("categories", {})))
  if not categories:
    return None
  fig = Figure(figsize=(2 + 2.4 * len(categories), 4))
  axes = fig.subplots(1, 2, sharey=True)
  for ax, condition in zip(axes, ("ambiguous", "disambiguated")):
    name = f"bias_score_{condition}"
    _bars_with_intervals(ax, categories, models, lambda m, c, name=name: (
        category(m, c).get(name), category(m, c).get(f"{name}_ci95")))
    ax.axhline(0, color="gray", linewidth=1)
    ax.set_title(f"{dataset} bias score, {condition} contexts")
  axes[0].set_ylabel("bias score (+: stereotyped answer)")
  axes[0].set_ylim(-1, 1)
  return _save(fig, path)


def bias_tradeoff(models: Models, path: str | os.PathLike, dataset: str) -> str | None:
  """Bias avoidance against context faithfulness, one point per model (BBQ's analysis draws it)."""
  points = {name: m["datasets"][dataset] for name, m in models.items()
            if m.get("datasets", {}).get(dataset, {}).get("bias_avoidance") is not None
            and m["datasets"][dataset].get("context_faithfulness") is not None}
  if not points:
    return None
  fig = Figure(figsize=(5, 5))
  ax = fig.subplots()
  for name, node in points.items():
    x, y = node["bias_avoidance"], node["context_faithfulness"]
    x_ci, y_ci = node.get("bias_avoidance_ci95"), node.get("context_faithfulness_ci95")
    xerr = [[x - x_ci[0]], [x_ci[1] - x]] if x_ci else None
    yerr = [[y - y_ci[0]], [y_ci[1] - y]] if y_ci else None
    ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", capsize=3, label=name)
    ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 5), fontsize="small")
  ax.set_xlim(0, 1)
  ax.set_ylim(0, 1)
  ax.set_xlabel(f"bias avoidance ({dataset} accuracy, ambiguous)")
  ax.set_ylabel(f"context faithfulness ({dataset} accuracy, disambiguated)")
  ax.set_title("Bias avoidance vs. context faithfulness")
  ax.legend(fontsize="small")
  return _save(fig, path)


def selection_shares(models: Models, path: str | os.PathLike) -> str | None:
  datasets = list(dict.fromkeys(d for m in models.values()
                                for d, node in m.get("datasets", {}).items()
                                if node.get("selection_shares")))
  if not datasets:
    return None
  height = 0.9 + (0.45 * len(models) + 0.6) * len(datasets)
  fig = Figure(figsize=(9, height))
  axes = fig.subplots(len(datasets), 1, squeeze=False)
  for ax, dataset in zip(axes[:, 0], datasets):
    names = list(models)
    roles = list(dict.fromkeys(r for m in models.values()
                               for r in m["datasets"].get(dataset, {}).get("selection_shares", {})))
    left = np.zeros(len(names))
    for role in roles:
      shares = np.asarray([models[n]["datasets"].get(dataset, {}).get("selection_shares", {})
                           .get(role, 0.0) for n in names])
      ax.barh(names, shares, left=left, label=role)
      left += shares
    ax.set_xlim(0, 1)
    ax.set_title(f"{dataset}: share of items whose top-reward candidate has each role",
                 fontsize="small")
    ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
  return _save(fig, path)


# Figures of every report; a dataset's analysis adds its own (`DatasetAnalysis.figures`).
FIGURES = {
    "domain_accuracy.png": domain_accuracy,
    "selection_shares.png": selection_shares,
}


def write_all(models: Models, output_dir: str | os.PathLike) -> dict[str, str | None]:
  """Writes every figure into `output_dir`: the generic ones, then those of the analyses of the
  datasets the models were evaluated on; {file name: path, or None when not drawn}."""
  figures = dict(FIGURES)
  names = dict.fromkeys(d for m in models.values() for d in m.get("datasets", {}))
  for analysis in dict.fromkeys(for_dataset(name) for name in names):
    figures.update(analysis.figures)
  return {name: draw(models, os.path.join(output_dir, name)) for name, draw in figures.items()}
