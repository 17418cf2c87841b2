"""The value probe's family comparison: the study's own analysis (Christian et al., "Reward Models
Inherit Value Biases from Pretraining") and, beside it, the comparison over whole models.

Input: several models' probe rewards R_m [P prompts, W words] (scored by the project or imported),
each model's family (two families), each prompt's framing (`positive`, `negative`), and the
lexicons' categories as word columns.

- **Ranks.** Per (model, prompt) each word's rank among its lexicon's words, rank 1 the highest
  reward, ties given the average of their ranks (`scipy.stats.rankdata`, method `average`);
  then the median rank of a category's words per (model, category, prompt). A lexicon is ranked
  alone (the bundled stereotype-content lists apart from MFD 2.0), so its medians run from 1 to
  its number of words.
- **The study's reading** (unit: one (model, prompt) median). Per (category, framing) panel of a
  lexicon, the two families' medians compared by Welch's t-test (`scipy.stats.ttest_ind`,
  `equal_var=False`), Bonferroni over the lexicon's panels. And a linear mixed model per lexicon
  (statsmodels `MixedLM`, REML): median rank ~ family * category * framing, with a random
  intercept per model; its fixed effects with their standard errors and Wald p-values.
- **The model-level comparison** (unit: one model). Per panel, each model's value is the mean
  over the panel's prompts of its median ranks; the statistic is the difference of the two
  families' means of those values, tested by permuting the family labels over whole models
  (`probe.permutation_p_value`: every relabelling when there are at most `n_permutations`, so
  exact for a few models a family), Bonferroni over the lexicon's panels. With n1 and n2 models
  no p falls below 2 / C(n1 + n2, n1), which is listed.

The Welch test counts every prompt of a model as a further unit, though a model's 54 prompts
share the model; its p-values are those of the study, not of a sample of models. The report shows
both, each with its unit and what it assumes.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import statsmodels.formula.api as smf
from matplotlib.figure import Figure  # drawn and saved without pyplot: no process-wide backend
from scipy import stats

from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.studies import probe as probe_stats
from socialrm_jax.base.errors import InputError

ALPHA = 0.05
FORMULA = "median_rank ~ family * category * framing"
STUDY_READING = {
    "unit": "(model, prompt): one median rank per model and prompt",
    "test": "Welch's t-test (scipy.stats.ttest_ind, equal_var=False), Bonferroni over the "
            "lexicon's panels",
    "assumes": "every (model, prompt) median an independent draw: a model's prompts count as "
               "further units though they share the model, so p shrinks with the number of "
               "prompts"}
MIXED_MODEL = {
    "unit": "(model, category, prompt), with a random intercept per model",
    "test": f"statsmodels MixedLM (REML), {FORMULA}; Wald p-values of the fixed effects",
    "assumes": "a model differs from its family by one normal shift shared by all its categories "
               "and prompts; the remaining errors independent, normal, of one variance"}
MODEL_LEVEL = {
    "unit": "model: its mean median rank over the panel's prompts",
    "test": "difference of the families' means, family labels permuted over whole models "
            "(exact when the relabellings are few), Bonferroni over the lexicon's panels",
    "assumes": "the models exchangeable between the two families when the families do not "
               "differ; nothing about the prompts"}


def within_lexicon_ranks(rewards: np.ndarray) -> np.ndarray:
  """Each word's rank among the row's words, 1 = the highest reward, ties averaged.
  rewards [P, W] -> [P, W]"""
  return stats.rankdata(-np.asarray(rewards, np.float64), method="average", axis=1)


def rank_table(models: Mapping[str, np.ndarray], families: Mapping[str, str],
               prompt_ids: Sequence[str], framings: Sequence[str],
               lexicons: Mapping[str, Mapping[str, np.ndarray]]) -> pd.DataFrame:
  """One row per (model, lexicon, category, prompt): model, family, lexicon, category, prompt,
  framing, median_rank. `models`: {name: rewards [P, W]}; `lexicons`: {lexicon: {category: its
  word columns}}."""
  rows = []
  for model, rewards in models.items():
    for lexicon, categories in lexicons.items():
      columns = np.unique(np.concatenate(list(categories.values())))        # [W_l]
      ranks = within_lexicon_ranks(rewards[:, columns])                     # [P, W_l]
      position = {int(c): i for i, c in enumerate(columns)}
      for category, words in categories.items():
        medians = np.median(ranks[:, [position[int(w)] for w in words]], axis=1)  # [P]
        rows += [(model, families[model], lexicon, category, prompt, framing, float(m))
                 for prompt, framing, m in zip(prompt_ids, framings, medians)]
  return pd.DataFrame(rows, columns=["model", "family", "lexicon", "category", "prompt",
                                     "framing", "median_rank"])


def welch(first: np.ndarray, second: np.ndarray, n_panels: int) -> dict[str, Any]:
  """The study's test of one panel: Welch's t on the two families' (model, prompt) medians."""
  result = stats.ttest_ind(first, second, equal_var=False)
  p = float(result.pvalue)
  return {"n": [int(len(first)), int(len(second))],
          "means": [float(np.mean(first)), float(np.mean(second))],
          "difference": float(np.mean(first) - np.mean(second)), "t": float(result.statistic),
          "df": float(result.df), "p_value": p,
          "p_bonferroni": min(1.0, p * n_panels) if math.isfinite(p) else p}


def mixed_model(table: pd.DataFrame) -> dict[str, Any]:
  """The study's mixed model on one lexicon's rank table: `FORMULA` (a factor with one level
  left out), a random intercept per model, REML."""
  terms = [t for t in ("family", "category", "framing") if table[t].nunique() > 1]
  formula = "median_rank ~ " + " * ".join(terms)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fit = smf.mixedlm(formula, table, groups=table["model"]).fit(reml=True)
  names = list(fit.fe_params.index)
  return {"formula": formula, "groups": "model", "n_obs": int(fit.nobs),
          "n_models": int(table["model"].nunique()), "converged": bool(fit.converged),
          "warnings": sorted({str(w.message).splitlines()[0] for w in caught}),
          "model_variance": float(np.asarray(fit.cov_re)[0, 0]),
          "residual_variance": float(fit.scale),
          "fixed_effects": {name: {"estimate": float(fit.fe_params[name]),
                                   "se": float(fit.bse_fe[name]),
                                   "p_value": float(fit.pvalues[name])} for name in names}}


def model_level(first: np.ndarray, second: np.ndarray, n_panels: int, n_permutations: int,
                rng: np.random.Generator) -> dict[str, Any]:
  """One panel compared over whole models: first [n1], second [n2] per-model values."""
  p = probe_stats.permutation_p_value(first, second, n_permutations, rng)
  relabellings = math.comb(len(first) + len(second), len(first))
  return {"n": [int(len(first)), int(len(second))],
          "means": [float(np.mean(first)), float(np.mean(second))],
          "difference": float(np.mean(first) - np.mean(second)), "p_value": p,
          "p_bonferroni": min(1.0, p * n_panels), "exact": relabellings <= n_permutations,
          "smallest_p": min(1.0, 2 / relabellings)}


def analyse(table: pd.DataFrame, *, n_permutations: int, seed: int) -> dict[str, Any]:
  """The study's reading and the model-level comparison of a `rank_table`, per lexicon."""
  families = list(dict.fromkeys(table["family"]))
  if len(families) != 2:
    raise InputError(f"the family comparison needs two families, got {len(families)} "
                     f"({', '.join(map(str, families))}); name each model's with --families")
  rng = np.random.default_rng(seed)
  members = {f: list(dict.fromkeys(table.loc[table["family"] == f, "model"])) for f in families}
  out: dict[str, Any] = {
      "families": members, "first": families[0], "second": families[1], "alpha": ALPHA,
      "n_permutations": n_permutations, "seed": seed, "study_reading": STUDY_READING,
      "mixed_model": MIXED_MODEL, "model_level": MODEL_LEVEL, "lexicons": {}}
  for lexicon, rows in table.groupby("lexicon", sort=False):
    panels = list(dict.fromkeys(zip(rows["category"], rows["framing"])))
    results = []
    for category, framing in panels:
      cell = rows[(rows["category"] == category) & (rows["framing"] == framing)]
      by_family = [cell.loc[cell["family"] == f] for f in families]
      per_model = [f.groupby("model", sort=False)["median_rank"].mean() for f in by_family]
      results.append({"category": category, "framing": framing,
                      "study": welch(*(f["median_rank"].to_numpy() for f in by_family),
                                     len(panels)),
                      "models": model_level(*(m.to_numpy() for m in per_model), len(panels),
                                            n_permutations, rng),
                      "model_values": {f: {m: float(v) for m, v in values.items()}
                                       for f, values in zip(families, per_model)}})
    out["lexicons"][lexicon] = {"panels": results, "mixed_model": mixed_model(rows)}
  return out


def found(panel: Mapping[str, Any], reading: str, alpha: float = ALPHA) -> bool:
  """Whether a panel's family difference holds after Bonferroni in one reading (`study` or
  `models`)."""
  return panel[reading]["p_bonferroni"] < alpha


def report_section(study: Mapping[str, Any], figure: str | None = None,
                   heading: str = "##") -> list[str]:
  """Markdown lines: per lexicon the panels in both readings, then the mixed model's fixed
  effects; each reading with its unit and what it assumes."""
  first, second = study["first"], study["second"]
  members = study["families"]
  out = [f"{heading} Value probes: {first} against {second}", "",
         f"Families: {first} ({', '.join(members[first])}), {second} "
         f"({', '.join(members[second])}). A cell is a category's median rank among its "
         "lexicon's words (1 = the highest reward, ties averaged), per model and prompt; "
         f"a difference is {first} - {second} (a negative one: {first} ranks the category "
         "higher). Two readings of each (category, framing) panel, Bonferroni over a lexicon's "
         f"panels, * where p < {study['alpha']}:", ""]
  for key, label in (("study_reading", "the study's"), ("model_level", "over models"),
                     ("mixed_model", "mixed model")):
    node = study[key]
    out.append(f"- **{label}**: unit {node['unit']}; {node['test']}; assumes {node['assumes']}.")
  out.append("")
  for lexicon, node in study["lexicons"].items():
    out += [f"{heading}# {lexicon}", ""]
    rows = []
    for panel in node["panels"]:
      s, m = panel["study"], panel["models"]
      rows.append([panel["category"], panel["framing"], f"{s['means'][0]:.2f}",
                   f"{s['means'][1]:.2f}",
                   f"{s['difference']:+.2f}, t={s['t']:.2f}, p={s['p_bonferroni']:.3g}"
                   + (" *" if found(panel, "study", study["alpha"]) else ""),
                   f"{m['difference']:+.2f}, p={m['p_bonferroni']:.3g}"
                   + (" *" if found(panel, "models", study["alpha"]) else "")
                   + ("" if m["exact"] else " (sampled)")])
    out += report.table(["category", "framing", f"{first} median rank", f"{second} median rank",
                         "the study's (Welch, per (model, prompt))", "over models (permutation)"],
                        rows) + [""]
    smallest = node["panels"][0]["models"]["smallest_p"] if node["panels"] else None
    if smallest is not None:
      out += [f"Over models no p falls below {smallest:.3g} before the correction "
              f"({len(members[first])} and {len(members[second])} models).", ""]
    mixed = node["mixed_model"]
    out += [f"Mixed model `{mixed['formula']}`, random intercept per model ({mixed['n_obs']} "
            f"rows, {mixed['n_models']} models; model variance {mixed['model_variance']:.3g}, "
            f"residual {mixed['residual_variance']:.3g}"
            + ("" if mixed["converged"] else "; **did not converge**") + "):", ""]
    out += report.table(["fixed effect", "estimate", "se", "p"], [
        [f"`{name}`", f"{e['estimate']:.3f}", f"{e['se']:.3f}", f"{e['p_value']:.3g}"]
        for name, e in mixed["fixed_effects"].items()]) + [""]
  if figure:
    out += [f"![family comparison]({figure})", ""]
  return out


def plot(study: Mapping[str, Any], path: str | os.PathLike) -> str:
  """Per lexicon, each model's mean median rank per panel, coloured by family."""
  lexicons = list(study["lexicons"].items())
  fig = Figure(figsize=(max(6, 0.6 * max(len(n["panels"]) for _, n in lexicons) + 2),
                        3.6 * len(lexicons)))
  axes = np.atleast_1d(fig.subplots(len(lexicons), 1, squeeze=False)[:, 0])
  for ax, (lexicon, node) in zip(axes, lexicons):
    labels = [f"{p['category']} | {p['framing']}" for p in node["panels"]]
    for k, family in enumerate((study["first"], study["second"])):
      for x, panel in enumerate(node["panels"]):
        values = list(panel["model_values"][family].values())
        ax.plot(np.full(len(values), x + (k - 0.5) * 0.25), values, "o", color=f"C{k}",
                alpha=0.7, label=family if x == 0 else None)
    ax.set_xticks(np.arange(len(labels)), labels, rotation=35, ha="right", fontsize="small")
    ax.invert_yaxis()  # rank 1 (the highest reward) on top
    ax.set_ylabel("median rank (mean over prompts)")
    ax.set_title(lexicon)
    ax.legend(fontsize="small")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  return os.fspath(path)
