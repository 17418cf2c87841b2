"""Counterfactual identity swaps, measured: how much a reward moves when only the group changes.

Inputs: the links of a swap set (`socialrm_jax.sources.identity_swaps`, its `swaps` table), the scores
of the original items (the main run) and those of the generated items (the swap set's folder,
scored like any items folder). Each link joins an original item's candidates to their
counterfactuals; per link:

- `abs_change`: the mean over the linked candidates of |r(counterfactual) - r(original)|. For
  BBQ's named answers every candidate is linked to the same candidate of the swapped item; for
  CrowS-Pairs' paired sentences the one link is r(sent_less) - r(sent_more) on the same prompt.
- `flip` (links with two or more candidates): whether the preferred response changes, measured as
  the total variation distance between the two items' selections (`pairs.selection_weights`: the
  argmax, tied maxima sharing it): 1 when the argmax moves to another candidate, 0 when it stays,
  a fraction when ties are involved, so a model that ties the same candidates on both sides never
  flips. Not defined for paired sentences: each version is one response, there is no choice
  among responses to change, so a dataset with no link of two or more candidates has no
  `flip_rate` or `relative_change` at all.
- `gap` (the same links): the mean |r_i - r_j| over the original item's candidate pairs, the
  scale a model's own answers differ by. `relative_change` = sum of abs_change / sum of gap, so a
  model whose rewards are large in every way does not look group-sensitive for that alone.

Per dataset, per subset (BBQ's category, CrowS-Pairs' bias type) and per context condition:
`n_links`, `mean_abs_change`, `flip_rate` and `relative_change`, each with `<name>_ci95`, the 95%
interval of the main metrics' stratified bootstrap over items (`bootstrap`; here every link is
one original item), seeded from (seed, "counterfactual/<dataset>"). A model that reads the content
and not the group changes no reward: 0 change, no flip. A link any of whose rewards is missing is
an error, or, with `allow_missing`, left out and counted under `unscored`. Values that cannot be
computed are null, with the reason under `null_reasons`, as in metrics.json.
"""

from __future__ import annotations

import pathlib
from typing import Any, Mapping, Sequence

import numpy as np

from socialrm_jax.analysis import bootstrap, estimates, report
from socialrm_jax.analysis.hooks import Options
from socialrm_jax.analysis.pairs import selection_weights
from socialrm_jax.analysis.reward_tables import read_scores, Scores
from socialrm_jax.base.errors import InputError
from socialrm_jax.sources import identity_swaps

SECTION_TITLE = "Counterfactual identity swaps"
# Per-link values resampled together; `links` counts them, `choice` counts links with a flip.
COLUMNS = ("links", "abs_change", "choice", "flip", "gap", "abs_change_choice")
METRICS = ("mean_abs_change", "relative_change", "flip_rate")
_NO_CHOICE = "no link here with a choice among responses"
_NO_GAP = "every original item here gives its answers equal rewards"
_NO_LINKS = "no scored link"


def _rewards(*score_sets: Scores | None) -> dict[tuple[str, int], float]:
  """{(item_id, candidate): reward} over the score sets; a key in two sets is an error."""
  out: dict[tuple[str, int], float] = {}
  for scores in score_sets:
    if scores is None:
      continue
    before = len(out)
    out.update(zip(zip(scores.item_id.tolist(), scores.candidate.tolist()),
                   scores.reward.tolist()))
    if len(out) != before + len(scores.reward):
      raise InputError("an (item, candidate) is scored twice, in this set or in this set and the "
                       "other: pass the original items' scores and the swap set's, one each",
                       scores.path)
  return out


def _linked_rewards(links: Sequence[Mapping[str, Any]], side: str,
                    rewards: Mapping[tuple[str, int], float]) -> np.ndarray:
  """One side's rewards of links with the same number of candidates C, NaN where missing.
  # [L, C]"""
  return np.asarray([[rewards.get((link[f"{side}_item_id"], int(c)), np.nan)
                      for c in link[f"{side}_candidates"]] for link in links], dtype=np.float64)


def link_values(links: Sequence[Mapping[str, Any]],
                rewards: Mapping[tuple[str, int], float]) -> tuple[dict[str, np.ndarray],
                                                                  np.ndarray]:
  """The per-link values (`COLUMNS`, each # [L]) and which links have every reward (# [L]
  bool; the values of the others are 0)."""
  values = {c: np.zeros(len(links)) for c in COLUMNS}
  scored = np.zeros(len(links), dtype=bool)
  sizes = np.asarray([len(link["original_candidates"]) for link in links], dtype=np.int64)
  for size in np.unique(sizes):
    index = np.flatnonzero(sizes == size)
    same = [links[i] for i in index]
    original = _linked_rewards(same, "original", rewards)                          # [l, C]
    swapped = _linked_rewards(same, "counterfactual", rewards)                     # [l, C]
    complete = ~(np.isnan(original).any(axis=1) | np.isnan(swapped).any(axis=1))   # [l]
    index, original, swapped = index[complete], original[complete], swapped[complete]
    scored[index] = True
    values["links"][index] = 1.0
    values["abs_change"][index] = np.abs(swapped - original).mean(axis=1)
    if size >= 2:
      valid = np.ones_like(original, dtype=bool)
      before = selection_weights(original, valid)                                  # [l, C]
      after = selection_weights(swapped, valid)                                    # [l, C]
      first, second = np.triu_indices(size, 1)
      values["choice"][index] = 1.0
      values["flip"][index] = 0.5 * np.abs(before - after).sum(axis=1)
      values["gap"][index] = np.abs(original[:, first] - original[:, second]).mean(axis=1)
      values["abs_change_choice"][index] = values["abs_change"][index]
  return values, scored


def _missing(link: Mapping[str, Any], rewards: Mapping[tuple[str, int], float],
             original: Scores, swapped: Scores | None) -> str:
  """Where a link's first missing reward should have been, in words."""
  for side, candidates, scores in (("original", "original_candidates", original),
                                   ("counterfactual", "counterfactual_candidates", swapped)):
    item_id = link[f"{side}_item_id"]
    for c in link[candidates]:
      if (item_id, int(c)) not in rewards:
        where = scores.path if scores is not None else "no scores given for the swap set"
        return f"item {item_id!r} candidate {c} ({where})"
  raise AssertionError("the link has every reward")


def _summary(total, with_choice: bool) -> dict[str, Any]:
  """One node's values from `total(column)` -> # [1 + B] sums over its strata. `with_choice`:
  the dataset has links with a choice among responses, so flips and gaps are defined for it."""
  node: dict[str, Any] = {"n_links": int(total("links")[0])}
  estimates.put(node, "mean_abs_change", estimates.ratio(total("abs_change"), total("links")),
                _NO_LINKS)
  if with_choice:
    estimates.put(node, "relative_change",
                  estimates.ratio(total("abs_change_choice"), total("gap")), _NO_GAP)
    estimates.put(node, "flip_rate", estimates.ratio(total("flip"), total("choice")),
                  _NO_CHOICE)
  return node


def _grouped_summaries(sums: bootstrap.StratifiedSums, field: str,
                       with_choice: bool) -> dict[str, Any]:
  per_column = {c: sums.grouped(c, field) for c in COLUMNS}
  groups = per_column[COLUMNS[0]][0]
  return {g: _summary(lambda c, i=i: per_column[c][1][:, i], with_choice)
          for i, g in enumerate(groups) if g}


def dataset_summary(columns: Mapping[str, np.ndarray], links: Sequence[Mapping[str, Any]],
                    name: str, options: Options) -> dict[str, Any]:
  """One dataset's node from its scored links' values (`link_values`): overall, per subset and
  per context condition, with intervals."""
  strata = {"domain": np.asarray([l["domain"] for l in links], dtype=object),
            "subset": np.asarray([l["subset"] for l in links], dtype=object),
            "context_condition": np.asarray([l.get("context_condition") or "" for l in links],
                                            dtype=object)}
  sums = bootstrap.stratified_sums(columns, strata, options.n_resamples,
                                   bootstrap.generator(options.seed, f"counterfactual/{name}"))
  with_choice = bool(columns["choice"].any())
  node = {"rules": sorted({l["rule"] for l in links}), **_summary(sums.total, with_choice)}
  node["subsets"] = _grouped_summaries(sums, "subset", with_choice)
  conditions = _grouped_summaries(sums, "context_condition", with_choice)
  if conditions:
    node["conditions"] = conditions
  return node


def compute(links: Sequence[Mapping[str, Any]], original: Scores, swapped: Scores | None,
            options: Options = Options()) -> dict[str, Any]:
  """The counterfactual measures of one model: {datasets: {name: node}, ...} (module docstring).

  `links`: the swap set's `swaps` rows; `original`: the scores of the original items; `swapped`:
  those of the swap set's items (None when it generated none, e.g. paired sentences only)."""
  rewards = _rewards(original, swapped)
  by_dataset: dict[str, list[Mapping[str, Any]]] = {}
  for link in links:
    by_dataset.setdefault(link["dataset"], []).append(link)
  datasets = {}
  for name, mine in by_dataset.items():
    values, scored = link_values(mine, rewards)
    unscored = np.flatnonzero(~scored)
    if unscored.size and not options.allow_missing:
      raise InputError(
          f"{unscored.size} of {len(mine)} {name} swap links lack rewards (first: "
          f"{_missing(mine[unscored[0]], rewards, original, swapped)}); score the original "
          "items and the swap set (socialrm-score --items=SWAPS), or allow missing scores")
    kept = np.flatnonzero(scored)
    datasets[name] = {**dataset_summary({c: v[kept] for c, v in values.items()},
                                        [mine[i] for i in kept], name, options),
                      "unscored": int(unscored.size)}
  tree = {"n_resamples": options.n_resamples, "seed": options.seed, "datasets": datasets}
  reasons: dict[str, str] = {}
  tree = estimates.finalize(tree, reasons=reasons)
  tree["null_reasons"] = reasons
  return tree


def compute_at(swaps_dir: str | pathlib.Path, original_scores: str | pathlib.Path,
               swapped_scores: str | pathlib.Path | None,
               options: Options = Options()) -> dict[str, Any]:
  """`compute` from paths: a swap-set folder and two scores sets (files or folders). The swap
  set's scores are read only when it generated items: paired sentences alone need none (and
  scoring an empty items folder writes no scores file)."""
  links = identity_swaps.read_links(swaps_dir)
  generated = any(l["counterfactual_item_id"] != l["original_item_id"] for l in links)
  swapped = read_scores(swapped_scores) if generated and swapped_scores is not None else None
  return compute(links, read_scores(original_scores), swapped, options)


_LABELS = {"mean_abs_change": "mean |Δ reward| (the model's reward units)",
           "relative_change": "|Δ reward| relative to the gap between the item's own answers",
           "flip_rate": "share of items whose preferred answer changes"}


def _label(name: str, nodes: Sequence[Mapping[str, Any] | None]) -> str:
  """A row's name with its number of items (the first model's; they differ only where a model's
  scores are missing)."""
  n = next((node["n_links"] for node in nodes if node), None)
  return name if n is None else f"{name} (n={n})"


def _rows(models: Mapping[str, Mapping[str, Any]], metric: str) -> list[list[str]]:
  """One row per dataset, subset and condition any model has `metric` for."""
  trees = [models[name].get("datasets", {}) for name in models]
  rows = []
  for dataset in dict.fromkeys(d for tree in trees for d in tree):
    nodes = [tree.get(dataset) for tree in trees]
    levels = [(dataset, nodes)]
    for field in ("subsets", "conditions"):
      keys = dict.fromkeys(k for node in nodes if node for k in node.get(field, {}))
      levels += [(f"{dataset} · {k}", [(node or {}).get(field, {}).get(k) for node in nodes])
                 for k in keys]
    for name, level_nodes in levels:
      if any(node and node.get(metric) is not None for node in level_nodes):
        rows.append([_label(name, level_nodes)] +
                    [report.cell(node, metric) for node in level_nodes])
  return rows


def report_lines(models: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
  """The report section: {model name: `compute`'s result, or None for a model not measured}
  -> markdown lines ([] when no model has a result)."""
  models = {name: result or {} for name, result in models.items()}
  if not any(m.get("datasets") for m in models.values()):
    return []
  out = [f"## {SECTION_TITLE}", "",
         "Items where only the social group changes: BBQ's two named people exchanged everywhere "
         "in the context and the answers (each answer keeps its part in the story), and "
         "CrowS-Pairs' sentence about the other group. A model that reads the content, not the "
         "group, changes no reward: 0 change and no flips. Flips: the share of items whose "
         "preferred answer changes (not defined for CrowS-Pairs, whose versions are single "
         "sentences). 95% bootstrap intervals over items.", ""]
  for metric in METRICS:
    rows = _rows(models, metric)
    if rows:
      out += [f"**{_LABELS[metric]}**", ""]
      out += report.table(["dataset / subset"] + list(models), rows) + [""]
  return out
