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

import dataclasses
import itertools
import pathlib
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.resampling import bootstrap, estimates
from socialrm_jax.analysis.tables import item_ids, pairs
from socialrm_jax.analysis.tables.categorical import Categorical, Coder
from socialrm_jax.analysis.dataset_analysis import Options
from socialrm_jax.analysis.tables.item_ids import IdArray
from socialrm_jax.analysis.tables.pairs import selection_weights
from socialrm_jax.analysis.tables.reward_tables import score_parts, Scores
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.sources import identity_swaps

SECTION_TITLE = "Counterfactual identity swaps"
# Per-link values resampled together; `links` counts them, `choice` counts links with a flip.
COLUMNS = ("links", "abs_change", "choice", "flip", "gap", "abs_change_choice")
METRICS = ("mean_abs_change", "relative_change", "flip_rate")
_NO_CHOICE = "no link here with a choice among responses"
_NO_GAP = "every original item here gives its answers equal rewards"
_NO_LINKS = "no scored link"


# The columns of the swaps table the measures read (not the terms).
LINK_COLUMNS = ("original_item_id", "counterfactual_item_id", "dataset", "domain", "subset",
                "context_condition", "rule", "original_candidates", "counterfactual_candidates")
_LINK_TEXTS = ("dataset", "domain", "subset", "context_condition", "rule")
SIDES = ("original", "counterfactual")


@dataclasses.dataclass(frozen=True)
class LinkTable:
  """The swaps table as the measures keep it: L links as arrays, no Python object per link, so a
  swap set of any size costs tens of bytes a link. C: the most candidates a link joins."""
  original: IdArray            # [L] original_item_id
  counterfactual: IdArray      # [L] counterfactual_item_id
  texts: dict[str, Categorical]  # `_LINK_TEXTS`, each [L] ('' when null)
  n_candidates: np.ndarray     # [L] int32: candidates the link joins, on each side
  candidates: np.ndarray       # [2, L, C] int32: original, counterfactual candidates (-1 past)

  def __len__(self) -> int:
    return self.n_candidates.size

  def link(self, i: int) -> dict[str, Any]:
    """Link i as a row (the fields an error message names)."""
    n = int(self.n_candidates[i])
    return {"original_item_id": self.original[i], "counterfactual_item_id":
            self.counterfactual[i], **{f"{side}_candidates": self.candidates[s, i, :n].tolist()
                                       for s, side in enumerate(SIDES)}}


def link_table(rows: Iterable[Mapping[str, Any]], path=None) -> LinkTable:
  """The links of swaps-table rows, read `tables.BATCH_ROWS` at a time; a link whose two sides
  join different numbers of candidates is an error naming its row."""
  coders = {name: Coder() for name in _LINK_TEXTS}
  blocks: dict[str, list] = {name: [] for name in (*_LINK_TEXTS, *SIDES, "n", "candidates")}
  number, rows = 0, iter(rows)
  while batch := list(itertools.islice(rows, tables.BATCH_ROWS)):
    for side in SIDES:
      blocks[side].append(IdArray.of([str(row[f"{side}_item_id"]) for row in batch]))
    for name in _LINK_TEXTS:
      blocks[name].append(coders[name].codes([row.get(name) or "" for row in batch]))
    lists = [[list(row[f"{side}_candidates"]) for row in batch] for side in SIDES]
    n = np.fromiter(map(len, lists[0]), np.int32, len(batch))
    bad = np.flatnonzero(n != np.fromiter(map(len, lists[1]), np.int32, len(batch)))
    if bad.size:
      raise InputError("the link joins different numbers of original and counterfactual "
                       "candidates", path, number + int(bad[0]) + 1)
    width = int(n.max(initial=0))
    padded = np.full((2, len(batch), width), -1, dtype=np.int32)
    for s, side_lists in enumerate(lists):
      for i, values in enumerate(side_lists):
        padded[s, i, :len(values)] = values
    blocks["n"].append(n)
    blocks["candidates"].append(padded)
    number += len(batch)
  width = max([1, *(b.shape[2] for b in blocks["candidates"])])
  candidates = np.full((2, number, width), -1, dtype=np.int32)
  start = 0
  for block in blocks["candidates"]:
    candidates[:, start:start + block.shape[1], :block.shape[2]] = block
    start += block.shape[1]
  return LinkTable(*(IdArray.concatenate(blocks[side]) for side in SIDES),
                   {name: coders[name].finish(blocks[name]) for name in _LINK_TEXTS},
                   np.concatenate(blocks["n"] or [np.zeros(0, np.int32)]), candidates)


def read_link_table(swaps_dir: str | pathlib.Path) -> LinkTable:
  """The swaps table of a swap-set folder, a batch of rows at a time (`LINK_COLUMNS` only)."""
  table = link_table(tables.iter_rows(swaps_dir, identity_swaps.TABLE_PREFIXES[2], LINK_COLUMNS),
                     swaps_dir)
  tables.release_unused_memory()
  return table


class LinkedRewards:
  """The rewards of the links' candidates, put in place as score sets come, a part at a time
  (`reward_tables.score_parts`): the ids the links name are found by hash (`IdIndex`), and a
  score row of an item or candidate no link names is passed over, so memory grows with the
  links, not with the score sets. An (item, candidate) of a link scored twice, in one set or in
  two, is an error."""

  def __init__(self, links: LinkTable):
    self.links = links
    ids = IdArray.concatenate([links.original, links.counterfactual])      # [2L]
    self.index = item_ids.IdIndex.of(ids)
    self.slot = self.index.positions(ids)                                  # [2L] one per id
    self.k = int(links.candidates.max(initial=-1)) + 1                     # candidates 0..k-1
    self.rewards = np.full(ids.size * self.k, np.nan)                      # [2L * k]
    self.paths: list[str | None] = [None, None]  # the set each side's rewards come from

  def add(self, parts: Scores | Iterable[Scores] | None, side: int,
          path: str | None = None) -> None:
    """Puts a score set's rewards in place; `side` (0 original, 1 counterfactual) records its
    path (`path`, else its first part's) for messages about that side's missing rewards."""
    if parts is None:
      return
    self.paths[side] = path
    for part in [parts] if isinstance(parts, Scores) else parts:
      self.paths[side] = self.paths[side] or part.path
      slot = self.index.positions(part.names)[part.item]                  # [R]
      keep = np.flatnonzero((slot >= 0) & (part.candidate >= 0) & (part.candidate < self.k))
      flat = slot[keep] * self.k + part.candidate[keep]                    # [r]
      del slot
      ordered = np.sort(flat)
      twice = np.flatnonzero(ordered[1:] == ordered[:-1])
      again = ordered[twice] if twice.size else flat[~np.isnan(self.rewards[flat])]
      if again.size:
        repeated = int(again[0])
        raise InputError(
            f"item {str(self.index.ids[repeated // self.k])!r} candidate {repeated % self.k} is "
            "scored twice, in this set or in this set and the other: pass the original items' "
            "scores and the swap set's, one each", part.path)
      self.rewards[flat] = part.reward[keep]

  def side(self, side: int, index: np.ndarray) -> np.ndarray:
    """The rewards of links `index` [l] on one side, NaN where missing or past a link's
    candidates. # [l, C]"""
    slot = self.slot[side * len(self.links) + index]                       # [l]
    candidates = self.links.candidates[side, index]                        # [l, C]
    found = self.rewards[slot[:, None] * self.k + np.maximum(candidates, 0)]
    return np.where(candidates >= 0, found, np.nan)

  def missing(self, i: int) -> str:
    """Where link i's first missing reward should have been, in words."""
    link = self.links.link(i)
    for s, side in enumerate(SIDES):
      rewards = self.side(s, np.asarray([i]))[0]
      for c, reward in zip(link[f"{side}_candidates"], rewards):
        if np.isnan(reward):
          where = self.paths[s] or ("no scores given for the swap set" if s else "no scores")
          return f"item {link[f'{side}_item_id']!r} candidate {c} ({where})"
    raise AssertionError("the link has every reward")


def link_values(links: LinkTable, rewards: LinkedRewards) -> tuple[dict[str, np.ndarray],
                                                                    np.ndarray]:
  """The per-link values (`COLUMNS`, each # [L]) and which links have every reward (# [L]
  bool; the values of the others are 0)."""
  values = {c: np.zeros(len(links)) for c in COLUMNS}
  scored = np.zeros(len(links), dtype=bool)
  for size in np.unique(links.n_candidates):
    for index in pairs.item_chunks(np.flatnonzero(links.n_candidates == size)):
      original = rewards.side(0, index)[:, :size]                                # [l, C]
      swapped = rewards.side(1, index)[:, :size]                                 # [l, C]
      complete = ~(np.isnan(original).any(axis=1) | np.isnan(swapped).any(axis=1))  # [l]
      index, original, swapped = index[complete], original[complete], swapped[complete]
      scored[index] = True
      values["links"][index] = 1.0
      values["abs_change"][index] = np.abs(swapped - original).mean(axis=1)
      if size >= 2:
        valid = np.ones_like(original, dtype=bool)
        before = selection_weights(original, valid)                              # [l, C]
        after = selection_weights(swapped, valid)                                # [l, C]
        first, second = np.triu_indices(size, 1)
        values["choice"][index] = 1.0
        values["flip"][index] = 0.5 * np.abs(before - after).sum(axis=1)
        values["gap"][index] = np.abs(original[:, first] - original[:, second]).mean(axis=1)
        values["abs_change_choice"][index] = values["abs_change"][index]
  return values, scored


def _summary(total, with_choice: bool) -> dict[str, Any]:
  """One node's values from `total(column)` -> # [1 + B] sums over its strata. `with_choice`:
  the dataset has links with a choice among responses, so flips and gaps are defined for it."""
  node: dict[str, Any] = {"n_links": int(total("links")[0])}
  estimates.put(node, "mean_abs_change", estimates.ratio(total("abs_change"), total("links")),
                _NO_LINKS, total("links")[0])
  if with_choice:
    estimates.put(node, "relative_change",
                  estimates.ratio(total("abs_change_choice"), total("gap")), _NO_GAP,
                  total("choice")[0])
    estimates.put(node, "flip_rate", estimates.ratio(total("flip"), total("choice")),
                  _NO_CHOICE, total("choice")[0], share=True)
  return node


def _grouped_summaries(sums: bootstrap.StratifiedSums, field: str,
                       with_choice: bool) -> dict[str, Any]:
  per_column = {c: sums.grouped(c, field) for c in COLUMNS}
  groups = per_column[COLUMNS[0]][0]
  return {g: _summary(lambda c, i=i: per_column[c][1][:, i], with_choice)
          for i, g in enumerate(groups) if g}


def dataset_summary(columns: Mapping[str, np.ndarray], links: LinkTable, index: np.ndarray,
                    name: str, options: Options) -> dict[str, Any]:
  """One dataset's node from the values (`link_values`, each # [n]) of its scored links
  `index` [n]: overall, per subset and per context condition, with intervals."""
  strata = {field: links.texts[field][index].strings()
            for field in ("domain", "subset", "context_condition")}
  sums = bootstrap.stratified_sums(columns, strata, options.n_resamples,
                                   bootstrap.generator(options.seed, f"counterfactual/{name}"))
  with_choice = bool(columns["choice"].any())
  rule = links.texts["rule"]
  node = {"rules": sorted(rule.categories[np.unique(rule.codes[index])].tolist()),
          **_summary(sums.total, with_choice)}
  node["subsets"] = _grouped_summaries(sums, "subset", with_choice)
  conditions = _grouped_summaries(sums, "context_condition", with_choice)
  if conditions:
    node["conditions"] = conditions
  return node


def compute(links: LinkTable | Sequence[Mapping[str, Any]], original: Scores | Iterable[Scores],
            swapped: Scores | Iterable[Scores] | None, options: Options = Options(),
            paths: tuple[str | None, str | None] = (None, None)) -> dict[str, Any]:
  """The counterfactual measures of one model: {datasets: {name: node}, ...} (module docstring).

  `links`: the swap set's `swaps` rows, or their `LinkTable`; `original`: the scores of the
  original items (the main run); `swapped`: those of the swap set's items (None when it generated
  none, e.g. paired sentences only). Each score set is `Scores` or its parts
  (`reward_tables.score_parts`), read one at a time; `paths` name the two sets in messages
  (default: their first parts' paths)."""
  if not isinstance(links, LinkTable):
    links = link_table(links)
  rewards = LinkedRewards(links)
  rewards.add(original, 0, paths[0])
  rewards.add(swapped, 1, paths[1])
  values, scored = link_values(links, rewards)
  dataset = links.texts["dataset"]
  datasets = {}
  for code, name in enumerate(dataset.categories.tolist()):
    mine = np.flatnonzero(dataset.codes == code)                                   # [n]
    if not mine.size:
      continue
    unscored = mine[~scored[mine]]
    if unscored.size and not options.allow_missing:
      raise InputError(
          f"{unscored.size} of {mine.size} {name} swap links lack rewards (first: "
          f"{rewards.missing(int(unscored[0]))}); score the original items and the swap set "
          "(socialrm-score --items=SWAPS), or allow missing scores")
    kept = mine[scored[mine]]
    datasets[name] = {**dataset_summary({c: v[kept] for c, v in values.items()}, links, kept,
                                        name, options), "unscored": int(unscored.size)}
  tree = {"n_resamples": options.n_resamples, "seed": options.seed, "datasets": datasets}
  reasons: dict[str, str] = {}
  tree = estimates.finalize(tree, reasons=reasons)
  tree["null_reasons"] = reasons
  return tree


def compute_at(swaps_dir: str | pathlib.Path, original_scores: str | pathlib.Path,
               swapped_scores: str | pathlib.Path | None,
               options: Options = Options()) -> dict[str, Any]:
  """`compute` from paths: a swap-set folder and two scores sets (files or folders), each read
  a part at a time, so memory grows with the links' arrays only. The swap set's scores are read
  only when it generated items: paired sentences alone need none (and scoring an empty items
  folder writes no scores file)."""
  links = read_link_table(swaps_dir)
  generated = not (np.array_equal(links.original.offsets, links.counterfactual.offsets) and
                   np.array_equal(links.original.data, links.counterfactual.data))
  swapped = (score_parts(swapped_scores, vectors=False)
             if generated and swapped_scores is not None else None)
  return compute(links, score_parts(original_scores, vectors=False), swapped, options,
                 (str(original_scores), swapped_scores and str(swapped_scores)))


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
