"""The value-bias ablation grid's statistics: agency - communion per run and checkpoint, the test of
the base family's effect across runs, the table and the plot.

A grid (`orchestrators/ablation.py`) trains one reward model per (data source, base, quantity,
seed) and probes its checkpoints with the value probe (`orchestrators/probe.py`). A
checkpoint's value is the probe's communion - agency contrast with its sign turned, agency -
communion (competence - warmth: a positive value favours agency), with the probe's 95% bootstrap
interval over words and prompts (the interval of the negated resamples is the negated, swapped
interval).

The base-family effect: the final checkpoints' agency - communion values of the runs of one
family against the other's, by a two-sided Mann-Whitney U test (`scipy.stats.mannwhitneyu`,
its exact null distribution unless values are tied, then the normal approximation). A run is one
observation; its seed, quantity and data source are what varies within a family. The same test
is given per (data source, quantity) cell when each family has a run there, and at step 0
(the base with its fresh score head, before any preference data: the same weights for every
data source and quantity, so one checkpoint per base and seed counts).
"""

from __future__ import annotations

import io
import os
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from scipy import stats

from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.studies import probe as probe_stats
from socialrm_jax.base import tables

# The probe's contrast the grid reads, and the name the grid gives its negation.
CONTRAST = probe_stats.COMMUNION_AGENCY[0]
VALUE = "agency - communion"


def agency_minus_communion(probe: Mapping[str, Any]) -> dict[str, Any]:
  """{value, ci95, p_value} of agency - communion from one probe.json."""
  node = probe["contrasts"][CONTRAST]
  low, high = node["ci95"]
  return {"value": -float(node["difference"]), "ci95": [-float(high), -float(low)],
          "p_value": float(node["p_value"])}


def family_test(by_family: Mapping[str, Sequence[float]]) -> dict[str, Any] | None:
  """The two families' values compared: {families, n, means, difference (first - second), u
  (the first family's U), p_value, method}; None unless there are exactly two families with a
  value each."""
  groups = {name: np.asarray(v, np.float64) for name, v in by_family.items() if len(v)}
  if len(groups) != 2:
    return None
  (first, x), (second, y) = groups.items()
  # The method is named, not left to scipy's "auto", so the one recorded is the one computed:
  # exact unless values are tied (its null distribution has no ties); a grid has few runs.
  tied = len(np.unique(np.concatenate([x, y]))) < len(x) + len(y)
  method = "asymptotic" if tied else "exact"
  result = stats.mannwhitneyu(x, y, alternative="two-sided", method=method)
  return {"families": [first, second], "n": [len(x), len(y)],
          "means": [float(x.mean()), float(y.mean())],
          "difference": float(x.mean() - y.mean()), "u": float(result.statistic),
          "p_value": float(result.pvalue), "method": method}


def final_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
  """Each run's last audited checkpoint."""
  last: dict[str, Mapping[str, Any]] = {}
  for row in rows:
    if row["run"] not in last or row["step"] > last[row["run"]]["step"]:
      last[row["run"]] = row
  return list(last.values())


def _by_family(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
  out: dict[str, list[float]] = {}
  for row in rows:
    out.setdefault(row["family"], []).append(row["value"])
  return out


def summarise(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """The grid's tests: over all runs' final checkpoints, at step 0, and per (source, quantity).
  `rows` are the audited checkpoints: {run, source, base, family, quantity, seed, step, value,
  ci95, p_value}."""
  final = final_rows(rows)
  cells = {}
  for source, quantity in dict.fromkeys((r["source"], r["quantity"]) for r in final):
    test = family_test(_by_family([r for r in final if (r["source"], r["quantity"]) ==
                                   (source, quantity)]))
    if test is not None:
      cells[f"{source}/{quantity}"] = test
  # Step 0 is the base with the score head its seed draws, whatever the data: one per (base, seed).
  initial = {(r["base"], r["seed"]): r for r in rows if r["step"] == 0}
  return {"final": family_test(_by_family(final)),
          "step_0": family_test(_by_family(list(initial.values()))), "cells": cells}


def _test_text(test: Mapping[str, Any] | None) -> str:
  if test is None:
    return "not tested (it needs two base families with a run each)"
  (a, b), (na, nb) = test["families"], test["n"]
  return (f"{a} (n={na}, mean {test['means'][0]:.3f}) vs {b} (n={nb}, mean "
          f"{test['means'][1]:.3f}): difference {test['difference']:.3f}, Mann-Whitney "
          f"U={test['u']:g}, p={test['p_value']:.3g} ({test['method']})")


def report_lines(rows: Sequence[Mapping[str, Any]], tests: Mapping[str, Any],
                 figure: str | None = None) -> list[str]:
  """Markdown: one row per run (step 0 and its final checkpoint, each with its interval), then
  the base-family tests."""
  final = {r["run"]: r for r in final_rows(rows)}
  first = {}
  for row in rows:
    if row["run"] not in first or row["step"] < first[row["run"]]["step"]:
      first[row["run"]] = row
  table_rows = []
  for run, end in sorted(final.items(), key=lambda kv: (kv[1]["source"], kv[1]["base"],
                                                         kv[1]["quantity"], kv[1]["seed"])):
    start = first[run]
    table_rows.append([end["source"], end["base"], end["family"], str(end["quantity"]),
                       str(end["seed"]), f"{start['step']}: " + report.fmt(start["value"],
                                                                        start["ci95"]),
                       f"{end['step']}: " + report.fmt(end["value"], end["ci95"]),
                       f"{end['p_value']:.3g}"])
  out = [f"{VALUE} (competence - warmth words of the value probe) of each run's first and last "
         "audited checkpoint (step: value [95% bootstrap interval over words and prompts]); p: "
         "the probe's permutation test over words at the last checkpoint.", ""]
  out += report.table(["data", "base", "family", "pairs", "seed", "first checkpoint",
                       "last checkpoint", "p"], table_rows) + [""]
  out += [f"Base-family effect on the last checkpoints: {_test_text(tests['final'])}.", "",
          f"At step 0 (before training): {_test_text(tests['step_0'])}.", ""]
  if tests["cells"]:
    out += report.table(["data/pairs", "base-family test on the last checkpoints"],
                        [[cell, _test_text(test)] for cell, test in tests["cells"].items()])
    out += [""]
  if figure:
    out += [f"![{VALUE} by base and quantity]({figure})", ""]
  return out


def plot(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> str | None:
  """Left: each run's last checkpoint by quantity (log axis), a colour per base and a marker per
  data source, with its interval, and the mean over seeds joined per base. Right: every run's
  value along its audited steps."""
  if not rows:
    return None
  final = final_rows(rows)
  bases = list(dict.fromkeys(r["base"] for r in rows))
  sources = list(dict.fromkeys(r["source"] for r in rows))
  colours = {b: f"C{i}" for i, b in enumerate(bases)}
  markers = {s: "os^Dv<>p*h"[i % 10] for i, s in enumerate(sources)}
  seeds = sorted({r["seed"] for r in rows})
  fig = Figure(figsize=(12, 4.5))
  left, right = fig.subplots(1, 2)
  for base in bases:
    for source in sources:
      runs = [r for r in final if r["base"] == base and r["source"] == source]
      if not runs:
        continue
      for r in runs:
        # Seeds side by side around their quantity (a multiplicative offset on the log axis).
        shift = 1.0 + 0.04 * (seeds.index(r["seed"]) - (len(seeds) - 1) / 2 +
                              0.5 * bases.index(base))
        left.errorbar([r["quantity"] * shift], [r["value"]],
                      yerr=[[r["value"] - r["ci95"][0]], [r["ci95"][1] - r["value"]]],
                      fmt=markers[source], color=colours[base], capsize=3, alpha=0.8)
      quantities = sorted({r["quantity"] for r in runs})
      means = [np.mean([r["value"] for r in runs if r["quantity"] == q]) for q in quantities]
      left.plot(quantities, means, "-", color=colours[base],
                label=f"{base} ({source})" if len(sources) > 1 else base)
    for run in dict.fromkeys(r["run"] for r in rows if r["base"] == base):
      steps = sorted((r for r in rows if r["run"] == run), key=lambda r: r["step"])
      right.plot([r["step"] for r in steps], [r["value"] for r in steps], "o-",
                 color=colours[base], alpha=0.6, markersize=3)
  left.set_xscale("log")
  quantities = sorted({r["quantity"] for r in final})
  left.set_xticks(quantities, [str(q) for q in quantities])
  left.minorticks_off()
  left.set_xlabel("preference pairs (nested prefixes of one shuffle)")
  left.set_ylabel(f"{VALUE} (95% CI over words and prompts)")
  left.set_title("last checkpoint of each run (one point per seed)")
  left.legend(fontsize="small")
  right.set_xscale("symlog", linthresh=1)
  right.set_xlabel("training step")
  right.set_title("along training (one line per run)")
  for ax in (left, right):
    ax.axhline(0, color="gray", linewidth=1)
  right.legend(handles=[right.plot([], [], "o-", color=colours[b])[0] for b in bases],
               labels=bases, fontsize="small")
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=120)
  tables.atomic_write_bytes(path, buffer.getvalue())
  return os.fspath(path)


def log_spaced_steps(total: int, count: int) -> list[int]:
  """Step 0, then `count` steps spaced evenly on a log scale from 1 to `total` (rounded, distinct;
  the last is `total`)."""
  if total < 1 or count < 1:
    return [0]
  points = np.geomspace(1, total, count) if count > 1 else np.asarray([total])
  return [0] + sorted({min(total, max(1, int(round(p)))) for p in points} | {total})

