"""Value-probe statistics: category means with intervals, contrasts with permutation tests, the
report section and the plot.

The probe (`socialrm_jax/orchestrators/probe.py`) scores every sampled lexicon word as the one-word answer
to every probe prompt, so its rewards are a matrix R [P prompts, W words], and each category
(warmth, competence, care.virtue, ...) is a set of its columns.

- A category's mean reward is the mean of R over all prompts and the category's words. Its 95%
  interval is a percentile bootstrap over words and prompts at once: a resample draws the P
  prompts with replacement and, independently, each category's words with replacement, and takes
  the mean of the drawn cells (prompt counts a [P], word counts b [W_c]: a.R_c.b / (P W_c)). Both
  the prompts and the words are samples from larger populations of questions and words, so both
  sources of variation belong in the interval. A resample's prompt draw is shared by all
  categories, so a contrast between two categories gets its interval from the same resamples.
- Contrasts: communion - agency (warmth - competence) and, per moral foundation, virtue - vice.
  Each also gets a two-sided permutation-test p-value over words: a word's score is its mean
  reward over the prompts, the statistic is the difference of the two categories' mean scores,
  and the words' category labels are permuted (`scipy.stats.permutation_test`, independent
  samples: every distinct relabelling when there are at most `n_permutations` of them, else
  `n_permutations` random ones from the seeded generator; with one value on a side, the pooled
  values' orders instead).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure  # drawn and saved without pyplot: no process-wide backend
from scipy import stats

from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.resampling import bootstrap

N_PERMUTATIONS = 10_000
BUNDLED = "bundled"
BUNDLED_LEXICONS = ("Warmth and competence are the stereotype-content dictionary's high "
                    "sociability/morality and ability/agency words (Nicolas, Bai & Fiske), the "
                    "closest public stand-in for the Big Two communion/agency dictionary; moral "
                    "foundations are MFD 2.0's single-word virtue and vice entries. ")
# Contrasts: (name, the first category, the second); foundations from the MFD 2.0 categories.
COMMUNION_AGENCY = ("communion - agency (warmth - competence)", "warmth", "competence")
FOUNDATIONS = ("care", "fairness", "loyalty", "authority", "sanctity")


def contrasts(categories: Sequence[str]) -> list[tuple[str, str, str]]:
  """The contrasts the categories allow: communion - agency, then virtue - vice per foundation."""
  out = []
  if {"warmth", "competence"} <= set(categories):
    out.append(COMMUNION_AGENCY)
  out += [(f"{f}: virtue - vice", f"{f}.virtue", f"{f}.vice") for f in FOUNDATIONS
          if {f"{f}.virtue", f"{f}.vice"} <= set(categories)]
  return out


def bootstrap_means(rewards: np.ndarray, categories: Mapping[str, np.ndarray], n_resamples: int,
                    rng: np.random.Generator) -> dict[str, np.ndarray]:
  """Each category's mean reward: row 0 over the data, rows 1.. over resamples of the prompts
  (shared by all categories) and of each category's words. rewards [P, W] -> {name: [1 + B]}"""
  p = rewards.shape[0]
  prompt_counts = np.vstack([np.ones((1, p)),
                             rng.multinomial(p, np.full(p, 1 / p), size=n_resamples)])  # [1+B, P]
  out = {}
  for name, words in categories.items():
    w = len(words)
    word_counts = np.vstack([np.ones((1, w)),
                             rng.multinomial(w, np.full(w, 1 / w), size=n_resamples)])  # [1+B, W_c]
    out[name] = np.einsum("bp,pw,bw->b", prompt_counts, rewards[:, words], word_counts) / (p * w)
  return out


def interval(values: np.ndarray) -> list[float]:
  """The 95% percentile interval of resampled values [B]."""
  low, high = np.percentile(values, bootstrap.CI_PERCENTILES)
  return [float(low), float(high)]


def permutation_p_value(x: np.ndarray, y: np.ndarray, n_permutations: int,
                        rng: np.random.Generator) -> float:
  """Two-sided permutation p-value of mean(x) - mean(y), labels permuted between x and y."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if min(len(x), len(y)) >= 2:
    return float(stats.permutation_test(
        (x, y), _mean_difference, permutation_type="independent", vectorized=True,
        n_resamples=n_permutations, alternative="two-sided", rng=rng).pvalue)
  # scipy's independent samples need two values each; with one value on a side (a family of one
  # model), the pooled values' orders are permuted instead, the first len(x) read as x: the
  # same test, every ordering counted when there are at most `n_permutations`.
  k = len(x)

  def split_difference(pooled: np.ndarray, axis: int) -> np.ndarray:
    pooled = np.moveaxis(pooled, axis, -1)
    return pooled[..., :k].mean(-1) - pooled[..., k:].mean(-1)

  return float(stats.permutation_test(
      (np.concatenate([x, y]),), split_difference, permutation_type="pairings", vectorized=True,
      n_resamples=n_permutations, alternative="two-sided", rng=rng).pvalue)


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
  return x.mean(axis) - y.mean(axis)


def summarise(rewards: np.ndarray, categories: Mapping[str, np.ndarray], *, n_resamples: int,
              n_permutations: int, seed: int,
              pairs: Sequence[tuple[str, str, str]] | None = None) -> dict[str, Any]:
  """The probe's statistics for one model: `categories.<name>.{mean, ci95, n_words}` and
  `contrasts.<name>.{difference, ci95, p_value, first, second}` for each (name, first, second)
  of `pairs` (by default `contrasts(categories)`). rewards [P, W]."""
  rng = np.random.default_rng(seed)
  means = bootstrap_means(rewards, categories, n_resamples, rng)
  out: dict[str, Any] = {"n_prompts": int(rewards.shape[0]), "n_resamples": n_resamples,
                         "n_permutations": n_permutations, "seed": seed, "categories": {},
                         "contrasts": {}}
  for name, values in means.items():
    out["categories"][name] = {"mean": float(values[0]), "ci95": interval(values[1:]),
                               "n_words": int(len(categories[name]))}
  word_scores = rewards.mean(axis=0)                                    # [W]
  for name, first, second in contrasts(list(categories)) if pairs is None else pairs:
    difference = means[first] - means[second]                           # [1 + B]
    out["contrasts"][name] = {
        "first": first, "second": second, "difference": float(difference[0]),
        "ci95": interval(difference[1:]),
        "p_value": permutation_p_value(word_scores[categories[first]],
                                       word_scores[categories[second]], n_permutations, rng)}
  return out


def report_section(results: Mapping[str, Mapping[str, Any]], figure: str | None = None,
                   heading: str = "##") -> list[str]:
  """Markdown lines: the probe's design, then per category and per contrast a row with a column
  per model. `results` maps a model name to its probe.json."""
  if not results:
    return []
  names = list(results)
  first = next(iter(results.values()))
  out = [f"{heading} Value probes", "",
         f"Each model scored {first['n_words']} lexicon words as one-word answers to "
         f"{first['n_prompts']} value-laden prompts (`{first['prompts']}`, e.g. "
         f"\"{first['example_prompt']}\"), each with the proxy it has in the audit (a language "
         "model's reward is the mean log-probability of the answer's tokens). A cell is the mean "
         "reward of a category's words over all prompts, with a 95% bootstrap interval over "
         "words and prompts. " + (BUNDLED_LEXICONS if first.get("lexicon", BUNDLED) == BUNDLED
                                  else f"Lexicon: {first['lexicon']}. ")
         + "Words are a seeded sample of "
         f"{first['words_per_category'] or 'all'} per category (seed {first['sample_seed']}). "
         "Contrasts: the difference of means, its interval, and a permutation-test p-value over "
         "words.", ""]
  categories = list(dict.fromkeys(c for r in results.values() for c in r["categories"]))
  out += report.table(["category"] + names, [
      [category] + [report.fmt(node["mean"], node["ci95"]) + f" (n={node['n_words']})"
                    if (node := r["categories"].get(category)) else "–"
                    for r in results.values()] for category in categories]) + [""]
  # With prompts of more than one framing (the superlatives' best and worst), each contrast is
  # shown per framing too: a positive and a negative question pull the words apart in
  # opposite directions, so the mean over both can hide either.
  rows = [(c, None) for c in dict.fromkeys(c for r in results.values() for c in r["contrasts"])]
  rows += [(c, framing) for framing in dict.fromkeys(
      f for r in results.values() for f in r.get("framings", {}))
           for c in dict.fromkeys(c for r in results.values()
                                  for c in r["framings"].get(framing, {}).get("contrasts", {}))]

  def contrast_of(result, contrast, framing):
    node = result if framing is None else result.get("framings", {}).get(framing, {})
    return node.get("contrasts", {}).get(contrast)

  out += report.table(["contrast"] + names, [
      [contrast if framing is None else f"{contrast} [{framing} prompts]"]
      + [report.fmt(node["difference"], node["ci95"]) + f", p={node['p_value']:.3g}"
         if (node := contrast_of(r, contrast, framing)) else "–" for r in results.values()]
      for contrast, framing in rows]) + [""]
  if figure:
    out += [f"![value probe]({figure})", ""]
  return out


def plot(results: Mapping[str, Mapping[str, Any]], path: str | os.PathLike) -> str | None:
  """Category means (left) and contrasts (right) with their intervals, one point per model."""
  if not results:
    return None
  fig = Figure(figsize=(13, 4.5))
  axes = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
  for ax, key, value, title in ((axes[0], "categories", "mean", "mean reward per category"),
                                (axes[1], "contrasts", "difference", "contrasts")):
    labels = list(dict.fromkeys(c for r in results.values() for c in r[key]))
    width = 0.8 / len(results)
    x = np.arange(len(labels))
    for m, (name, result) in enumerate(results.items()):
      nodes = [result[key].get(label) for label in labels]
      values = np.asarray([n[value] if n else np.nan for n in nodes])
      low = np.asarray([n[value] - n["ci95"][0] if n else 0.0 for n in nodes])
      high = np.asarray([n["ci95"][1] - n[value] if n else 0.0 for n in nodes])
      # Points, not bars: a reward's zero (a log-probability's, say) is no baseline.
      ax.errorbar(x + (m - (len(results) - 1) / 2) * width, values, yerr=[low, high], fmt="o",
                  capsize=3, label=name)
    ax.set_xticks(x, [label.split(" (")[0] for label in labels], rotation=35, ha="right",
                  fontsize="small")
    ax.set_title(title)
  axes[1].axhline(0, color="gray", linewidth=1)
  axes[0].set_ylabel("reward (95% CI over words and prompts)")
  axes[0].legend(fontsize="small")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  return os.fspath(path)
