"""Vocabulary-scan statistics: ranks over the whole vocabulary, where lexicon words fall, and how
rankings agree; the report section and the plot.

The scan (`socialrm_jax/vocabulary_scan.py`) gives each prompt a reward for every token scanned.
- **Rank and percentile** (`rank_and_percentile`): within a prompt, rank 1 is the highest reward,
  ties broken by token id (the lower id first); percentile = 100 (N - rank) / (N - 1): 100 for the
  highest, 0 for the lowest (100 when N = 1).
- **Lexicon words**: a word counts when one token decodes to it, as written or capitalised, with or
  without one leading space ("honest", " honest", "Honest", " Honest"); its percentile is the mean
  over those tokens (listed). Words no single token spells are counted as missing.
- **Categories**: the median of the words' percentiles, with a 95% percentile-bootstrap interval
  over words (`bootstrap.N_RESAMPLES` resamples, seeded).
- **Contrasts** (`values.contrasts`: communion - agency, virtue - vice per foundation): the
  difference of the two categories' mean percentiles, its bootstrap interval (each category's
  words resampled on their own), the permutation p-value of `values.permutation_p_value`, and the
  Mann-Whitney U of the first category's percentiles against the second's with its two-sided
  p-value (normal approximation with tie and continuity corrections, as
  `scipy.stats.mannwhitneyu(method="asymptotic")`) and the rank-biserial correlation
  r = 2 U / (n1 n2) - 1 (+1: every word of the first above every word of the second).
- **Frequency confound**: Spearman's rho between reward and token id (BPE ids follow merge order,
  so a low id is roughly a frequent token: a negative rho means frequent tokens score higher).
- **Across prompts**: Spearman's rho between two prompts' rewards over the same tokens (a token
  loved for "greatest" should be hated for "worst": negative).
- **Two models sharing a tokenizer** (`compare_models`): per prompt, Spearman's rho and Kendall's
  tau-b between their rewards, and the overlap of their top and bottom 100 tokens.

Ranks, Spearman, Kendall's tau-b (O(n log n), scipy's algorithm) and Mann-Whitney are computed
with numpy and tested against `scipy.stats`.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from socialrm_jax.analysis import report, values  # noqa: E402

TOP = 25              # Top and bottom tokens listed per prompt.
OVERLAP = 100         # Top and bottom tokens two models' rankings are compared on.
INVERSION_BLOCK = 256  # Kendall's discordant pairs: counted by brute force within such blocks.


# Ranks and rank statistics.

def rank_and_percentile(rewards: np.ndarray,
                        token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Ranks (1 = highest reward, ties by token id) and percentiles of one prompt's rewards [N]."""
  order = np.lexsort((token_ids, -rewards))                              # [N] best first
  rank = np.empty(len(rewards), np.int64)
  rank[order] = np.arange(1, len(rewards) + 1)
  n = len(rewards)
  percentile = 100.0 * (n - rank) / (n - 1) if n > 1 else np.full(n, 100.0)
  return rank, percentile


def average_ranks(x: np.ndarray) -> np.ndarray:
  """1-based ranks of x [n], ties given their average rank (scipy.stats.rankdata's default)."""
  x = np.asarray(x)
  order = np.argsort(x, kind="mergesort")
  sorted_x = x[order]
  starts = np.r_[True, sorted_x[1:] != sorted_x[:-1]]
  group = np.cumsum(starts) - 1                                          # [n] tie group, sorted
  bounds = np.r_[np.nonzero(starts)[0], len(x)]
  mean_rank = (bounds[:-1] + bounds[1:] + 1) / 2.0                       # [groups]
  out = np.empty(len(x))
  out[order] = mean_rank[group]
  return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
  """Spearman's rho: Pearson's r of the average ranks (nan when either is constant)."""
  rx, ry = average_ranks(x), average_ranks(y)
  rx, ry = rx - rx.mean(), ry - ry.mean()
  denominator = math.sqrt(float(rx @ rx) * float(ry @ ry))
  return float(rx @ ry / denominator) if denominator else float("nan")


def count_inversions(y: np.ndarray) -> int:
  """Pairs i < j with y[i] > y[j]: within blocks by brute force, then merging sorted blocks (each
  element of a right block counts the left block's larger elements with searchsorted)."""
  y = np.asarray(y)
  inversions, blocks = 0, []
  for start in range(0, len(y), INVERSION_BLOCK):
    block = y[start:start + INVERSION_BLOCK]
    inversions += int(np.triu(block[:, None] > block[None, :], 1).sum())
    blocks.append(np.sort(block, kind="mergesort"))
  while len(blocks) > 1:
    merged = []
    for i in range(0, len(blocks) - 1, 2):
      left, right = blocks[i], blocks[i + 1]
      inversions += int((len(left) - np.searchsorted(left, right, side="right")).sum())
      merged.append(np.sort(np.concatenate([left, right]), kind="mergesort"))
    if len(blocks) % 2:
      merged.append(blocks[-1])
    blocks = merged
  return inversions


def _tied_pairs(x: np.ndarray) -> int:
  _, counts = np.unique(x, return_counts=True)
  return int((counts * (counts - 1) // 2).sum())


def kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
  """Kendall's tau-b (ties corrected), as scipy.stats.kendalltau computes it."""
  x, y = np.asarray(x), np.asarray(y)
  n = len(x)
  order = np.lexsort((y, x))                                             # by x, then y
  xs, ys = x[order], y[order]
  discordant = count_inversions(ys)
  joint = np.r_[True, (xs[1:] != xs[:-1]) | (ys[1:] != ys[:-1]), True]
  runs = np.diff(np.nonzero(joint)[0]).astype(np.int64)
  both_tied = int((runs * (runs - 1) // 2).sum())
  x_tied, y_tied = _tied_pairs(x), _tied_pairs(y)
  total = n * (n - 1) // 2
  if total in (x_tied, y_tied):
    return float("nan")
  concordant_minus_discordant = total - x_tied - y_tied + both_tied - 2 * discordant
  return float(concordant_minus_discordant / math.sqrt(total - x_tied) / math.sqrt(total - y_tied))


def mann_whitney(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
  """U of x against y, its two-sided p-value (normal approximation, tie and continuity
  corrections: scipy's method="asymptotic") and the rank-biserial correlation."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  n1, n2 = len(x), len(y)
  ranks = average_ranks(np.concatenate([x, y]))
  u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
  n = n1 + n2
  _, ties = np.unique(np.concatenate([x, y]), return_counts=True)
  variance = n1 * n2 / 12 * ((n + 1) - (ties ** 3 - ties).sum() / (n * (n - 1)))
  mean = n1 * n2 / 2
  if variance <= 0:
    p = 1.0
  else:
    z = (abs(u - mean) - 0.5) / math.sqrt(variance)
    p = min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))
  return {"u": u, "p_value": float(p), "rank_biserial": 2 * u / (n1 * n2) - 1}


# Lexicon words among the tokens.

def word_forms(word: str) -> list[str]:
  """The token texts that spell `word`: as written and capitalised, each with a leading space."""
  forms = dict.fromkeys([word, word[:1].upper() + word[1:]])
  return [f for form in forms for f in (form, " " + form)]


def lexicon_tokens(categories: Mapping[str, Sequence[str]],
                   texts: Sequence[str]) -> dict[str, dict[str, list[int]]]:
  """{category: {word: positions of the tokens spelling it}} (words no token spells left out)."""
  position = {}
  for i, text in enumerate(texts):
    position.setdefault(text, i)
  out = {}
  for name, words in categories.items():
    found = {}
    for word in words:
      spots = [position[f] for f in word_forms(word) if f in position]
      if spots:
        found[word] = spots
    out[name] = found
  return out


def _bootstrap_resamples(values_: np.ndarray, n_resamples: int,
                         rng: np.random.Generator) -> np.ndarray:
  """[n_resamples, n] resamples of values [n] with replacement."""
  return values_[rng.integers(0, len(values_), size=(n_resamples, len(values_)))]


def category_summary(word_percentiles: Mapping[str, Mapping[str, float]], *, n_resamples: int,
                     n_permutations: int, rng: np.random.Generator) -> dict[str, Any]:
  """Per category: words, median percentile and its interval; per contrast: the difference of
  mean percentiles, its interval, the permutation p-value, Mann-Whitney U and rank-biserial."""
  out: dict[str, Any] = {"categories": {}, "contrasts": {}}
  arrays = {name: np.asarray(list(words.values()), np.float64)
            for name, words in word_percentiles.items()}
  means = {}
  for name, array in arrays.items():
    if not len(array):
      out["categories"][name] = {"n_words": 0, "median_percentile": None, "ci95": None}
      continue
    resamples = _bootstrap_resamples(array, n_resamples, rng)            # [B, n]
    means[name] = resamples.mean(axis=1)
    out["categories"][name] = {"n_words": int(len(array)),
                               "median_percentile": float(np.median(array)),
                               "ci95": values.interval(np.median(resamples, axis=1))}
  for name, first, second in values.contrasts(list(arrays)):
    x, y = arrays[first], arrays[second]
    if len(x) < 2 or len(y) < 2:
      continue
    out["contrasts"][name] = {
        "first": first, "second": second,
        "difference": float(x.mean() - y.mean()),
        "ci95": values.interval(means[first] - means[second]),
        "p_value": values.permutation_p_value(x, y, n_permutations, rng),
        "mann_whitney": mann_whitney(x, y)}
  return out


def _token_row(token_id: int, text: str, reward: float) -> dict:
  return {"token_id": int(token_id), "token": text, "reward": float(reward)}


def prompt_summary(rewards: np.ndarray, token_ids: np.ndarray, texts: Sequence[str],
                   lexicon: Mapping[str, Mapping[str, list[int]]], *, n_resamples: int,
                   n_permutations: int, rng: np.random.Generator) -> dict[str, Any]:
  """One prompt's statistics over its rewards [N] of tokens `token_ids` [N] (texts [N])."""
  rank, percentile = rank_and_percentile(rewards, token_ids)
  order = np.argsort(rank)
  words = {name: {word: float(percentile[spots].mean()) for word, spots in found.items()}
           for name, found in lexicon.items()}
  return {
      "n_tokens": int(len(rewards)),
      "reward": {"mean": float(rewards.mean()), "std": float(rewards.std()),
                 "min": float(rewards.min()), "max": float(rewards.max())},
      "top": [_token_row(token_ids[i], texts[i], rewards[i]) for i in order[:TOP]],
      "bottom": [_token_row(token_ids[i], texts[i], rewards[i]) for i in order[::-1][:TOP]],
      "frequency_confound": {"spearman_reward_token_id": spearman(rewards, token_ids)},
      "lexicon_words": {name: {word: {"percentile": p,
                                      "tokens": [texts[s] for s in lexicon[name][word]]}
                               for word, p in found.items()} for name, found in words.items()},
      **category_summary(words, n_resamples=n_resamples, n_permutations=n_permutations, rng=rng)}


def summarise(rewards: Mapping[str, np.ndarray], token_ids: np.ndarray, texts: Sequence[str],
              categories: Mapping[str, Sequence[str]], *, n_resamples: int,
              n_permutations: int, seed: int) -> dict[str, Any]:
  """scan.json's statistics: `prompts.<id>` (see `prompt_summary`), the lexicon's coverage, and
  `across_prompts` (Spearman's rho of every two prompts). rewards {prompt_id: [N]}."""
  rng = np.random.default_rng(seed)
  lexicon = lexicon_tokens(categories, texts)
  out: dict[str, Any] = {
      "n_resamples": n_resamples, "n_permutations": n_permutations, "seed": seed,
      "lexicon_coverage": {name: {"words": len(categories[name]), "single_token": len(found),
                                  "missing": sorted(set(categories[name]) - set(found))}
                           for name, found in lexicon.items()},
      "prompts": {p: prompt_summary(r, token_ids, texts, lexicon, n_resamples=n_resamples,
                                    n_permutations=n_permutations, rng=rng)
                  for p, r in rewards.items()},
      "across_prompts": []}
  names = list(rewards)
  for i, first in enumerate(names):
    for second in names[i + 1:]:
      out["across_prompts"].append({"first": first, "second": second,
                                    "spearman": spearman(rewards[first], rewards[second])})
  return out


def compare_models(first: Mapping[str, np.ndarray], second: Mapping[str, np.ndarray],
                   token_ids: np.ndarray) -> dict[str, Any]:
  """Per prompt both scans hold: Spearman, Kendall's tau-b, and the overlap of the top and bottom
  `OVERLAP` tokens (the share of one model's that are the other's), over the same tokens."""
  out = {}
  for prompt in first:
    if prompt not in second:
      continue
    a, b = first[prompt], second[prompt]
    rank_a, _ = rank_and_percentile(a, token_ids)
    rank_b, _ = rank_and_percentile(b, token_ids)
    k = min(OVERLAP, len(a))
    top = len(set(np.nonzero(rank_a <= k)[0]) & set(np.nonzero(rank_b <= k)[0])) / k
    low = len(a) - k
    bottom = len(set(np.nonzero(rank_a > low)[0]) & set(np.nonzero(rank_b > low)[0])) / k
    out[prompt] = {"spearman": spearman(a, b), "kendall_tau_b": kendall_tau(a, b),
                   f"top_{OVERLAP}_overlap": top, f"bottom_{OVERLAP}_overlap": bottom}
  return out


# Report and plot.

def _tokens_cell(rows: Sequence[dict], n: int = 10) -> str:
  return ", ".join(f"`{r['token']!r}`" for r in rows[:n]).replace("|", "\\|")


def reward_head_lines(scan: Mapping[str, Any]) -> list[str]:
  """Which output of a custom reward head (scan.json's `reward_head`) the scan ranks."""
  head = scan.get("reward_head")
  if not head:
    return []
  settings, outputs = scan.get("settings", {}), head["outputs"]
  if settings.get("objective_weights"):
    which = f"the weighted sum ({settings['objective_weights']}) of the outputs"
  else:
    index = settings.get("objective") or 0
    which = f"output {index}, `{outputs[index]}`,"
  return [f"The reward is {which} of the `{head['class']}` head, whose outputs are: "
          + ", ".join(f"{i} `{name}`" for i, name in enumerate(outputs)) + ".", ""]


def report_section(scan: Mapping[str, Any], figure: str | None = None,
                   heading: str = "##") -> list[str]:
  """Markdown lines for one model's scan (scan.json)."""
  stats = scan["statistics"]
  prompts = scan["prompts"]
  tokens = scan["tokens"]
  scanned = f"{tokens['scanned']:,} of "
  which = (f"The first tokens of the vocabulary by id ({scanned}" if tokens.get("max_tokens")
           else f"Every token of the vocabulary ({scanned}")
  out = [f"{heading} Vocabulary scan: {scan['model']}", "",
         f"{which}{tokens['vocabulary']:,} ids; {tokens['excluded']} special tokens left out) "
         f"as the one-word answer to each prompt (`{scan['prompt_set']}`), scored with "
         f"the `{scan['proxy']}` proxy, each token id placed between the chat template's answer "
         "prefix and its end of turn. Percentile 100 is the highest reward among the tokens.", ""]
  out += reward_head_lines(scan)
  for prompt_id, node in stats["prompts"].items():
    out += [f"{heading}# {prompts[prompt_id]!r}", "",
            f"- top tokens: {_tokens_cell(node['top'])}",
            f"- bottom tokens: {_tokens_cell(node['bottom'])}",
            f"- frequency confound: Spearman rho(reward, token id) = "
            f"{node['frequency_confound']['spearman_reward_token_id']:.3f}", ""]
    out += report.table(["category", "words", "median percentile [95% CI]"], [
        [name, str(c["n_words"]),
         "–" if c["median_percentile"] is None else report.fmt(c["median_percentile"], c["ci95"])]
        for name, c in node["categories"].items()]) + [""]
    if node["contrasts"]:
      out += report.table(
          ["contrast", "difference of mean percentiles [95% CI]", "permutation p", "U", "U's p",
           "rank-biserial"],
          [[name, report.fmt(c["difference"], c["ci95"]), f"{c['p_value']:.3g}",
            f"{c['mann_whitney']['u']:.1f}", f"{c['mann_whitney']['p_value']:.3g}",
            f"{c['mann_whitney']['rank_biserial']:.3f}"]
           for name, c in node["contrasts"].items()]) + [""]
  for pair in stats["across_prompts"]:
    out += [f"Rank agreement of {pair['first']} and {pair['second']}: Spearman rho = "
            f"{pair['spearman']:.3f}.", ""]
  for other, by_prompt in (scan.get("comparisons") or {}).items():
    out += report.table(["prompt", f"Spearman vs {other}", "Kendall tau-b",
                         f"top-{OVERLAP} overlap", f"bottom-{OVERLAP} overlap"],
                        [[p, f"{c['spearman']:.3f}", f"{c['kendall_tau_b']:.3f}",
                          f"{c[f'top_{OVERLAP}_overlap']:.2f}",
                          f"{c[f'bottom_{OVERLAP}_overlap']:.2f}"]
                         for p, c in by_prompt.items()]) + [""]
  if figure:
    out += [f"![vocabulary scan]({figure})", ""]
  return out


def plot(rewards: Mapping[str, np.ndarray], prompts: Mapping[str, str],
         lexicon_rewards: Mapping[str, Mapping[str, np.ndarray]], path: str | os.PathLike) -> str:
  """Per prompt (a column): the reward distribution over the whole vocabulary (top), and each
  lexicon category's words as ticks on the same axis (bottom). lexicon_rewards {prompt: {category:
  [words]}}."""
  fig, axes = plt.subplots(2, len(rewards), figsize=(6.5 * len(rewards), 7), squeeze=False,
                           gridspec_kw={"height_ratios": [1, 1.3]}, sharex="col")
  for column, (prompt_id, values_) in enumerate(rewards.items()):
    top, bottom = axes[0, column], axes[1, column]
    top.hist(values_, bins=100, color="0.55")
    top.set_yscale("log")
    top.set_title(f"{prompts[prompt_id]}", fontsize="medium")
    top.set_ylabel("tokens")
    categories = lexicon_rewards[prompt_id]
    for row, (name, words) in enumerate(categories.items()):
      bottom.plot(words, np.full(len(words), row), "|", markersize=10)
    bottom.set_yticks(range(len(categories)), list(categories), fontsize="small")
    bottom.set_ylim(len(categories) - 0.5, -0.5)
    bottom.set_xlabel("reward")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return os.fspath(path)
