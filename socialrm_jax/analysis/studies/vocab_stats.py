"""Vocabulary-scan statistics: ranks over the whole vocabulary, word frequency, the two tails,
where lexicon words fall, how rankings agree across models and families; the report section and
the plot. Every test statistic is `scipy.stats`'.

The scan (`socialrm_jax/orchestrators/vocab_scan.py`) gives each prompt a reward for every token scanned.
- **Rank and percentile** (`rank_and_percentile`): within a prompt, rank 1 is the highest reward,
  ties broken by token id (the lower id first); percentile = 100 (N - rank) / (N - 1): 100 for the
  highest, 0 for the lowest (100 when N = 1).
- **Words and their frequency** (`token_word`, `zipf_frequencies`): a token is a word when its
  text, less one leading space, is letters only and `wordfreq`'s bundled English list holds it;
  its frequency is that word's Zipf value (log10 of occurrences per billion words: "the" 7.7,
  a rare word 1 to 2; wordfreq folds case). Per prompt: Spearman's rho of reward against Zipf
  frequency over the word tokens with its p-value (`scipy.stats.spearmanr`), the mean percentile
  per one-unit Zipf bin (the binned plot), and the share of the top and bottom 1,000 tokens that
  are words at all, beside the vocabulary's share. The FAccT study's "overvaluation of frequent
  tokens" reads as rho > 0. Spearman's rho against token id stays as a rougher check (BPE ids
  follow merge order: a low id is roughly a frequent token, so there a negative rho).
- **Tails** (`tail_summary`): per prompt, the top and bottom 100 and 1,000 tokens: the spread of
  their rewards (max - min, and in standard deviations of the whole vocabulary's rewards), the
  share that are words and their median Zipf frequency, and how many spell a word of each lexicon
  category: the study's "asymmetries between high- and low-scoring tokens".
- **Lexicon words**: a word counts when one token decodes to it, as written or capitalised, with or
  without one leading space ("honest", " honest", "Honest", " Honest"); its percentile is the mean
  over those tokens (listed). Words no single token spells are counted as missing.
- **Categories**: the median of the words' percentiles, with a 95% percentile-bootstrap interval
  over words (`bootstrap.N_RESAMPLES` resamples, seeded).
- **Contrasts** (`probe.contrasts`: communion - agency, virtue - vice per foundation): the
  difference of the two categories' mean percentiles, its bootstrap interval (each category's
  words resampled on their own), the permutation p-value of `probe.permutation_p_value`, and the
  Mann-Whitney U of the first category's percentiles against the second's with its two-sided
  p-value (`scipy.stats.mannwhitneyu`, asymptotic) and the rank-biserial correlation
  r = 2 U / (n1 n2) - 1 (+1: every word of the first above every word of the second).
- **Across prompts**: Spearman's rho between two prompts' rewards over the same tokens (a token
  loved for "greatest" should be hated for "worst": negative).
- **Across scans** (`align_scans`, `agreement`): two or more models' scans are compared over the
  same tokens when they share a tokenizer, else over the words every vocabulary spells (a word's
  reward: the mean over its tokens, case folded). Per prompt and pair of models: Spearman's rho
  and Kendall's tau-b over everything, and within each tail (100 and 1,000) the overlap (the share
  of one model's tail that is the other's) and Kendall's tau-b on the union of the two tails; then
  the mean over pairs of each, so "models agree on what is worst more than on what is best" can
  be read (or refuted) from the top and bottom columns.
- **Families** (`family_contrasts`): a family label per scan (Llama-based, Gemma-based, ...). For
  every two families, prompt and lexicon contrast: the difference of the families' mean contrast
  (each model's difference of mean percentiles), with a two-sided permutation test over models
  (family labels permuted; exact when there are few splits). With n1 and n2 models the smallest
  p a split can give is 2 / C(n1 + n2, n1) (listed): 4 models a family reach 0.029, 3 only 0.1.
"""

from __future__ import annotations

import itertools
import math
from importlib import metadata
import os
import warnings
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure  # drawn and saved without pyplot: no process-wide backend
from scipy import stats

from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.studies import probe as probe_stats

TOP = 25                 # Top and bottom tokens listed per prompt.
TAILS = (100, 1000)      # Tails summarised per prompt and compared across models.
LANGUAGE = "en"          # wordfreq's list the words' frequencies come from.
# One-unit Zipf bins; wordfreq's English words lie between 1 and about 8.
ZIPF_EDGES = np.arange(1.0, 9.0)


# Ranks and rank statistics (scipy's, nan where a side is constant).

def rank_and_percentile(rewards: np.ndarray,
                        token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Ranks (1 = highest reward, ties by token id) and percentiles of one prompt's rewards [N]."""
  order = np.lexsort((token_ids, -rewards))                              # [N] best first
  rank = np.empty(len(rewards), np.int64)
  rank[order] = np.arange(1, len(rewards) + 1)
  n = len(rewards)
  percentile = 100.0 * (n - rank) / (n - 1) if n > 1 else np.full(n, 100.0)
  return rank, percentile


def _varies(*arrays: np.ndarray) -> bool:
  return all(len(a) > 1 and np.ptp(a) > 0 for a in arrays)


def spearman(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
  """Spearman's rho of x [n] and y [n] with its two-sided p-value."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if not _varies(x, y):
    return {"rho": float("nan"), "p_value": float("nan"), "n": int(len(x))}
  result = stats.spearmanr(x, y)
  return {"rho": float(result.statistic), "p_value": float(result.pvalue), "n": int(len(x))}


def kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
  """Kendall's tau-b (ties corrected) of x [n] and y [n]."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  return float(stats.kendalltau(x, y).statistic) if _varies(x, y) else float("nan")


def mann_whitney(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
  """U of x against y, its two-sided p-value (normal approximation with tie and continuity
  corrections) and the rank-biserial correlation."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  with warnings.catch_warnings():  # all values tied: scipy's p is nan, as it should be
    warnings.simplefilter("ignore", RuntimeWarning)
    result = stats.mannwhitneyu(x, y, method="asymptotic")
  u = float(result.statistic)
  return {"u": u, "p_value": float(result.pvalue), "rank_biserial": 2 * u / (len(x) * len(y)) - 1}


# Words and their frequency.

def token_word(text: str) -> str | None:
  """The word a token's text spells (less one leading space), if it is letters only."""
  word = text[1:] if text.startswith(" ") else text
  return word if word.isalpha() else None


def zipf_frequencies(texts: Sequence[str]) -> np.ndarray:
  """Each token's word's Zipf frequency in wordfreq's English list [N]; nan for a token that is
  no word (not letters, or not in the list)."""
  # Imported here: wordfreq (with ftfy) takes most of a second to import, which every audit,
  # probe and vocabulary-scan command would otherwise pay at start, its refusals and --help too.
  import wordfreq  # pylint: disable=import-outside-toplevel
  out = np.full(len(texts), np.nan)
  for i, text in enumerate(texts):
    word = token_word(text)
    if word is not None and (zipf := wordfreq.zipf_frequency(word, LANGUAGE)) > 0:
      out[i] = zipf
  return out


def frequency_summary(rewards: np.ndarray, percentile: np.ndarray, order: np.ndarray,
                      zipf: np.ndarray) -> dict[str, Any]:
  """Reward against word frequency for one prompt: rewards, percentile, zipf [N]; order [N] the
  token positions best first."""
  words = ~np.isnan(zipf)                                                # [N]
  k = min(TAILS[-1], len(rewards))
  bin_of = np.clip(np.digitize(zipf[words], ZIPF_EDGES) - 1, 0, len(ZIPF_EDGES) - 2)
  bins = []
  for b in range(len(ZIPF_EDGES) - 1):
    inside = percentile[words][bin_of == b]
    if len(inside):
      bins.append({"zipf": [float(ZIPF_EDGES[b]), float(ZIPF_EDGES[b + 1])],
                   "n": int(len(inside)), "mean_percentile": float(inside.mean()),
                   "quartiles": [float(q) for q in np.percentile(inside, [25, 75])]})
  return {
      "spearman_reward_zipf": spearman(rewards[words], zipf[words]),
      "zipf_bins": bins,
      "not_words": {"n": int((~words).sum()),
                    "mean_percentile": float(percentile[~words].mean()) if (~words).any()
                    else None},
      f"top_{k}_word_share": float(words[order[:k]].mean()),
      f"bottom_{k}_word_share": float(words[order[::-1][:k]].mean()),
      "vocabulary_word_share": float(words.mean())}


def tail_summary(rewards: np.ndarray, order: np.ndarray, zipf: np.ndarray,
                 lexicon_positions: Mapping[str, set[int]]) -> dict[str, Any]:
  """The top and bottom tails (`TAILS`) of one prompt: the spread of their rewards, their words
  and their lexicon make-up. order [N]: positions best first."""
  sd = float(rewards.std())
  out = {}
  for k in TAILS:
    k = min(k, len(rewards))
    for side, tail in (("top", order[:k]), ("bottom", order[::-1][:k])):
      r, z = rewards[tail], zipf[tail]
      spread = float(r.max() - r.min())
      out[f"{side}_{k}"] = {
          "n": int(k), "reward_range": [float(r.min()), float(r.max())], "spread": spread,
          "spread_sd": spread / sd if sd else None,
          "word_share": float((~np.isnan(z)).mean()),
          "median_zipf": float(np.nanmedian(z)) if (~np.isnan(z)).any() else None,
          "lexicon_tokens": {name: len(spots & set(tail.tolist()))
                             for name, spots in lexicon_positions.items()}}
  return out


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
                               "ci95": probe_stats.interval(np.median(resamples, axis=1))}
  for name, first, second in probe_stats.contrasts(list(arrays)):
    x, y = arrays[first], arrays[second]
    if len(x) < 2 or len(y) < 2:
      continue
    out["contrasts"][name] = {
        "first": first, "second": second,
        "difference": float(x.mean() - y.mean()),
        "ci95": probe_stats.interval(means[first] - means[second]),
        "p_value": probe_stats.permutation_p_value(x, y, n_permutations, rng),
        "mann_whitney": mann_whitney(x, y)}
  return out



def _token_row(token_id: int, text: str, reward: float) -> dict:
  return {"token_id": int(token_id), "token": text, "reward": float(reward)}


def prompt_summary(rewards: np.ndarray, token_ids: np.ndarray, texts: Sequence[str],
                   zipf: np.ndarray, lexicon: Mapping[str, Mapping[str, list[int]]], *,
                   n_resamples: int, n_permutations: int,
                   rng: np.random.Generator) -> dict[str, Any]:
  """One prompt's statistics over its rewards [N] of tokens `token_ids` [N] (texts [N], their
  words' Zipf frequencies [N])."""
  rank, percentile = rank_and_percentile(rewards, token_ids)
  order = np.argsort(rank)                                               # [N] best first
  words = {name: {word: float(percentile[spots].mean()) for word, spots in found.items()}
           for name, found in lexicon.items()}
  positions = {name: {s for spots in found.values() for s in spots}
               for name, found in lexicon.items()}
  return {
      "n_tokens": int(len(rewards)),
      "reward": {"mean": float(rewards.mean()), "std": float(rewards.std()),
                 "min": float(rewards.min()), "max": float(rewards.max())},
      "top": [_token_row(token_ids[i], texts[i], rewards[i]) for i in order[:TOP]],
      "bottom": [_token_row(token_ids[i], texts[i], rewards[i]) for i in order[::-1][:TOP]],
      "frequency": {**frequency_summary(rewards, percentile, order, zipf),
                    "spearman_reward_token_id": spearman(rewards, token_ids)},
      "tails": tail_summary(rewards, order, zipf, positions),
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
  zipf = zipf_frequencies(texts)
  out: dict[str, Any] = {
      "n_resamples": n_resamples, "n_permutations": n_permutations, "seed": seed,
      "word_frequency": {"source": f"wordfreq {metadata.version('wordfreq')} ({LANGUAGE}, Zipf)",
                         "word_tokens": int((~np.isnan(zipf)).sum())},
      "lexicon_coverage": {name: {"words": len(categories[name]), "single_token": len(found),
                                  "missing": sorted(set(categories[name]) - set(found))}
                           for name, found in lexicon.items()},
      "prompts": {p: prompt_summary(r, token_ids, texts, zipf, lexicon, n_resamples=n_resamples,
                                    n_permutations=n_permutations, rng=rng)
                  for p, r in rewards.items()},
      "across_prompts": []}
  for first, second in itertools.combinations(rewards, 2):
    out["across_prompts"].append({"first": first, "second": second,
                                  "spearman": spearman(rewards[first], rewards[second])["rho"]})
  return out


# Across scans: agreement and families.

def align_scans(scans: Mapping[str, tuple[Mapping[str, np.ndarray], np.ndarray, Sequence[str]]]
                ) -> tuple[str, list, dict[str, dict[str, np.ndarray]]]:
  """(unit, keys [K], {model: {prompt: rewards [K]}}) of scans {model: (rewards {prompt: [N_m]},
  token ids [N_m], texts [N_m])}, over the prompts every scan holds: the same tokens when every
  scan holds the same ones ("token"), else the words every vocabulary spells ("word": a word's
  reward is the mean over its tokens, case folded)."""
  first_ids, first_texts = next(iter(scans.values()))[1:]
  prompts = [p for p in next(iter(scans.values()))[0] if all(p in s[0] for s in scans.values())]
  if all(np.array_equal(ids, first_ids) and list(texts) == list(first_texts)
         for _, ids, texts in scans.values()):
    return "token", first_ids.tolist(), {m: {p: np.asarray(r[p], np.float64) for p in prompts}
                                         for m, (r, _, _) in scans.items()}
  groups = {}
  for model, (_, _, texts) in scans.items():
    spots: dict[str, list[int]] = {}
    for i, text in enumerate(texts):
      if (word := token_word(text)) is not None:
        spots.setdefault(word.lower(), []).append(i)
    groups[model] = spots
  keys = sorted(set.intersection(*(set(g) for g in groups.values())))
  return "word", keys, {m: {p: np.asarray([r[p][groups[m][k]].mean() for k in keys])
                            for p in prompts} for m, (r, _, _) in scans.items()}


def _tail_agreement(a: np.ndarray, b: np.ndarray, k: int) -> dict[str, float]:
  """Overlap and Kendall's tau-b on the union, of the top and of the bottom k of a and b [K]."""
  out = {}
  for side, sign in (("top", -1), ("bottom", 1)):
    tail_a = np.argsort(sign * a, kind="stable")[:k]
    tail_b = np.argsort(sign * b, kind="stable")[:k]
    union = np.union1d(tail_a, tail_b)
    out[f"{side}_overlap"] = len(np.intersect1d(tail_a, tail_b)) / k
    out[f"{side}_tau_b"] = kendall_tau(a[union], b[union])
  return out


def agreement(unit: str, keys: Sequence, rewards: Mapping[str, Mapping[str, np.ndarray]]
              ) -> dict[str, Any]:
  """How two or more scans' rankings agree (see the module docstring), from `align_scans`."""
  pairs, by_prompt = [], {}
  for first, second in itertools.combinations(rewards, 2):
    for prompt, a in rewards[first].items():
      b = rewards[second][prompt]
      pairs.append({"first": first, "second": second, "prompt": prompt,
                    "spearman": spearman(a, b)["rho"], "kendall_tau_b": kendall_tau(a, b),
                    "tails": {str(k): _tail_agreement(a, b, min(k, len(a))) for k in TAILS}})
  for prompt in dict.fromkeys(p["prompt"] for p in pairs):
    mine = [p for p in pairs if p["prompt"] == prompt]
    by_prompt[prompt] = {k: {name: float(np.nanmean([p["tails"][k][name] for p in mine]))
                             for name in mine[0]["tails"][k]} for k in mine[0]["tails"]}
  return {"unit": unit, "n": len(keys), "models": list(rewards), "pairs": pairs,
          "mean_over_pairs": by_prompt}


def family_contrasts(differences: Mapping[str, Mapping[str, Mapping[str, float]]],
                     families: Mapping[str, str], *, n_permutations: int,
                     seed: int) -> list[dict[str, Any]]:
  """For every two families, prompt and contrast all models have: the difference of the families'
  mean contrast and its permutation p-value over models. differences {model: {prompt: {contrast:
  difference of mean percentiles}}}; families {model: family}."""
  rng = np.random.default_rng(seed)
  models = list(differences)
  names = list(dict.fromkeys(families[m] for m in models))
  shared = [(p, c) for p, node in differences[models[0]].items() for c in node
            if all(c in differences[m].get(p, {}) for m in models)]
  out = []
  for first, second in itertools.combinations(names, 2):
    a = [m for m in models if families[m] == first]
    b = [m for m in models if families[m] == second]
    for prompt, contrast in shared:
      x = np.asarray([differences[m][prompt][contrast] for m in a])
      y = np.asarray([differences[m][prompt][contrast] for m in b])
      out.append({"prompt": prompt, "contrast": contrast, "families": [first, second],
                  "models": [a, b], "means": [float(x.mean()), float(y.mean())],
                  "difference": float(x.mean() - y.mean()),
                  "p_value": probe_stats.permutation_p_value(x, y, n_permutations, rng),
                  "smallest_p": min(1.0, 2 / math.comb(len(a) + len(b), len(a)))})
  return out


def contrast_differences(statistics: Mapping[str, Any]) -> dict[str, dict[str, float]]:
  """{prompt: {contrast: difference of mean percentiles}} of a scan's statistics."""
  return {p: {c: node["difference"] for c, node in prompt["contrasts"].items()}
          for p, prompt in statistics["prompts"].items()}


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


def _frequency_lines(node: Mapping[str, Any]) -> list[str]:
  freq = node["frequency"]
  rho, token_id = freq["spearman_reward_zipf"], freq["spearman_reward_token_id"]
  shares = {key: value for key, value in freq.items() if key.endswith("_word_share")}
  k = next(key for key in shares if key.startswith("top_")).split("_")[1]
  return [f"- word frequency: Spearman rho(reward, Zipf frequency) = {rho['rho']:.3f} "
          f"(p = {rho['p_value']:.3g}, {rho['n']:,} word tokens); words are "
          f"{100 * shares[f'top_{k}_word_share']:.1f}% of the top {int(k):,} tokens, "
          f"{100 * shares[f'bottom_{k}_word_share']:.1f}% of the bottom {int(k):,} "
          f"({100 * freq['vocabulary_word_share']:.1f}% of the vocabulary); rho(reward, token id) "
          f"= {token_id['rho']:.3f}"]


def _tails_table(node: Mapping[str, Any]) -> list[str]:
  rows = []
  for name, tail in node["tails"].items():
    side, k = name.split("_")
    counts = ", ".join(f"{c} {n}" for c, n in tail["lexicon_tokens"].items() if n)
    rows.append([f"{side} {int(k):,}", f"{tail['spread']:.3g}",
                 "–" if tail["spread_sd"] is None else f"{tail['spread_sd']:.2f}",
                 f"{100 * tail['word_share']:.0f}%",
                 "–" if tail["median_zipf"] is None else f"{tail['median_zipf']:.2f}",
                 counts or "none"])
  return report.table(["tail", "reward spread", "spread (SD)", "words", "median Zipf",
                       "lexicon tokens"], rows) + [""]


def report_section(scan: Mapping[str, Any], figure: str | None = None,
                   heading: str = "##") -> list[str]:
  """Markdown lines for one model's scan (scan.json), and its comparison with other scans."""
  stats_ = scan["statistics"]
  prompts = scan["prompts"]
  tokens = scan["tokens"]
  scanned = f"{tokens['scanned']:,} of "
  which = (f"The first tokens of the vocabulary by id ({scanned}" if tokens.get("max_tokens")
           else f"Every token of the vocabulary ({scanned}")
  out = [f"{heading} Vocabulary scan: {scan['model']}", "",
         f"{which}{tokens['vocabulary']:,} ids; {tokens['excluded']} special tokens left out) "
         f"as the one-word answer to each prompt (`{scan['prompt_set']}`), scored with "
         f"the `{scan['proxy']}` proxy, each token id placed where the chat template puts an "
         "answer, before its end of turn. Percentile 100 is the highest reward among the tokens. "
         f"Word frequency: {stats_['word_frequency']['source']}; "
         f"{stats_['word_frequency']['word_tokens']:,} tokens are words.", ""]
  out += reward_head_lines(scan)
  for prompt_id, node in stats_["prompts"].items():
    out += [f"{heading}# {prompts[prompt_id]!r}", "",
            f"- top tokens: {_tokens_cell(node['top'])}",
            f"- bottom tokens: {_tokens_cell(node['bottom'])}",
            *_frequency_lines(node), ""]
    out += report.table(["Zipf frequency", "word tokens", "mean percentile [quartiles]"], [
        [f"{b['zipf'][0]:g}-{b['zipf'][1]:g}", f"{b['n']:,}",
         f"{b['mean_percentile']:.1f} [{b['quartiles'][0]:.1f}, {b['quartiles'][1]:.1f}]"]
        for b in node["frequency"]["zipf_bins"]] + [
        ["not a word", f"{node['frequency']['not_words']['n']:,}",
         "–" if node["frequency"]["not_words"]["mean_percentile"] is None
         else f"{node['frequency']['not_words']['mean_percentile']:.1f}"]]) + [""]
    out += _tails_table(node)
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
  for pair in stats_["across_prompts"]:
    out += [f"Rank agreement of {pair['first']} and {pair['second']}: Spearman rho = "
            f"{pair['spearman']:.3f}.", ""]
  if scan.get("agreement"):
    out += agreement_section(scan["agreement"], heading)
  if scan.get("family_contrasts"):
    out += family_section(scan["family_contrasts"], scan.get("families") or {}, heading)
  if figure:
    out += [f"![vocabulary scan]({figure})", ""]
  return out


def agreement_section(node: Mapping[str, Any], heading: str = "##") -> list[str]:
  """Markdown lines: the agreement of two or more scans (`agreement`)."""
  unit = "tokens" if node["unit"] == "token" else "words every vocabulary spells"
  out = [f"{heading}# Vocabulary scans: agreement between models", "",
         f"{', '.join(node['models'])}: over {node['n']:,} {unit}. Overlap: the share of one "
         "model's tail that is the other's; tau-b in a tail: Kendall's tau-b on the union of the "
         "two models' tails.", ""]
  tails = [str(k) for k in TAILS]
  header = ["model", "other model", "prompt", "Spearman", "Kendall tau-b"]
  for k in tails:
    header += [f"top-{k} overlap", f"bottom-{k} overlap", f"top-{k} tau-b", f"bottom-{k} tau-b"]
  rows = []
  for pair in node["pairs"]:
    row = [pair["first"], pair["second"], pair["prompt"], f"{pair['spearman']:.3f}",
           f"{pair['kendall_tau_b']:.3f}"]
    for k in tails:
      t = pair["tails"].get(k) or next(iter(pair["tails"].values()))
      row += [f"{t['top_overlap']:.2f}", f"{t['bottom_overlap']:.2f}", f"{t['top_tau_b']:.3f}",
              f"{t['bottom_tau_b']:.3f}"]
    rows.append(row)
  out += report.table(header, rows) + [""]
  for prompt, by_k in node["mean_over_pairs"].items():
    for k, m in by_k.items():
      more = "worst" if m["bottom_overlap"] > m["top_overlap"] else "best"
      out.append(f"- {prompt}, tails of {int(k):,}: mean overlap top {m['top_overlap']:.2f}, "
                 f"bottom {m['bottom_overlap']:.2f}; mean tau-b top {m['top_tau_b']:.3f}, "
                 f"bottom {m['bottom_tau_b']:.3f}: the models share more of what is {more}.")
  return out + [""]


def family_section(rows: Sequence[Mapping[str, Any]], families: Mapping[str, str],
                   heading: str = "##") -> list[str]:
  """Markdown lines: the family contrasts (`family_contrasts`)."""
  out = [f"{heading}# Families", "",
         "Families: " + "; ".join(f"{f}: {', '.join(m for m, g in families.items() if g == f)}"
                                  for f in dict.fromkeys(families.values())) + ". A contrast's "
         "value per model is its difference of mean percentiles; the family difference is the "
         "difference of the families' means, its p a permutation test over models (the smallest "
         "p the models allow beside it).", ""]
  out += report.table(["prompt", "contrast", "families", "means", "difference", "p",
                       "smallest p"],
                      [[r["prompt"], r["contrast"], " - ".join(r["families"]),
                        " / ".join(f"{m:.1f}" for m in r["means"]), f"{r['difference']:.1f}",
                        f"{r['p_value']:.3g}", f"{r['smallest_p']:.3g}"] for r in rows])
  return out + [""]


def plot(rewards: Mapping[str, np.ndarray], prompts: Mapping[str, str],
         lexicon_rewards: Mapping[str, Mapping[str, np.ndarray]],
         frequency: Mapping[str, Mapping[str, Any]], path: str | os.PathLike) -> str:
  """Per prompt (a column): the reward distribution over the whole vocabulary (top), each lexicon
  category's words as ticks on the same axis (middle), and the mean percentile per Zipf-frequency
  bin with its quartiles, non-words apart (bottom). lexicon_rewards {prompt: {category: [words]}};
  frequency {prompt: its `frequency_summary`}."""
  fig = Figure(figsize=(6.5 * len(rewards), 10))
  axes = fig.subplots(3, len(rewards), squeeze=False,
                      gridspec_kw={"height_ratios": [1, 1.3, 1.1]})
  for column, (prompt_id, values_) in enumerate(rewards.items()):
    top, middle, bottom = axes[:, column]
    top.hist(values_, bins=100, color="0.55")
    top.set_yscale("log")
    top.set_title(f"{prompts[prompt_id]}", fontsize="medium")
    top.set_ylabel("tokens")
    categories = lexicon_rewards[prompt_id]
    for row, (name, words) in enumerate(categories.items()):
      middle.plot(words, np.full(len(words), row), "|", markersize=10)
    middle.set_yticks(range(len(categories)), list(categories), fontsize="small")
    middle.set_ylim(len(categories) - 0.5, -0.5)
    middle.set_xlim(top.get_xlim())
    middle.set_xlabel("reward")
    bins = frequency[prompt_id]["zipf_bins"]
    centres = np.asarray([sum(b["zipf"]) / 2 for b in bins])
    means = np.asarray([b["mean_percentile"] for b in bins])
    quartiles = np.asarray([b["quartiles"] for b in bins]).reshape(-1, 2)
    bottom.errorbar(centres, means, yerr=[means - quartiles[:, 0], quartiles[:, 1] - means],
                    fmt="o-", capsize=3, label="words (mean, quartiles)")
    not_words = frequency[prompt_id]["not_words"]["mean_percentile"]
    if not_words is not None:
      bottom.axhline(not_words, color="gray", linestyle="--", label="not words (mean)")
    rho = frequency[prompt_id]["spearman_reward_zipf"]["rho"]
    bottom.set_title(f"Spearman rho(reward, Zipf) = {rho:.3f}", fontsize="small")
    bottom.set_xlabel("Zipf frequency of the token's word (wordfreq)")
    bottom.set_ylabel("percentile")
    bottom.set_ylim(0, 100)
    bottom.legend(fontsize="small")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  return os.fspath(path)
