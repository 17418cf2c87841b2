"""The pairs behind a rate: each dataset's pairs where the model most prefers the response it
should not, shown in metrics.json (`datasets.<name>.worst_pairs`) and in the report.

For a dataset with gold pairs these are the gold pairs with the largest margin for the rejected
(socially undesirable) response, r(rejected) - r(chosen). Where there is no correct answer
(CrowS-Pairs, StereoSet) they are the directional pairs with the largest stereotype-consistent
margin, r(stereotype) - r(anti-stereotype): the pair's rejected side is the stereotype. A margin
at or below 0 means the model preferred the right (or the non-stereotyped) response even there.
Texts are cut to `MAX_CHARACTERS`; the item id finds the whole item in the items table.

The metrics keep no texts and no ids (`pairs.Scored`): `worst_pairs` picks the pairs from the
arrays and reads the ids of the few it weighs from the items table (`Scored.ids_of`), and
`add_texts` fills in their prompts and responses from the table's rows with those ids.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Iterable, Mapping

import numpy as np

from socialrm_jax.base import records
from socialrm_jax.analysis.tables.pairs import Scored, item_chunks

WORST_PAIRS = 5
# The items table's columns `add_texts` reads.
ITEM_COLUMNS = ("item_id", "prompt", "candidates")
MAX_CHARACTERS = 600  # of each text in metrics.json; the report cuts the prompt further
ELLIPSIS = " [...]"


def cut(text: str, limit: int = MAX_CHARACTERS) -> str:
  return text if len(text) <= limit else text[:limit - len(ELLIPSIS)].rstrip() + ELLIPSIS


def prompt_text(messages: Any) -> str:
  """A conversation as one text: 'role: content' per turn (a single user turn as it is)."""
  messages = list(messages or [])
  if len(messages) == 1 and messages[0].get("role") == "user":
    return str(messages[0].get("content", ""))
  return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in messages)


def worst_pairs(scored: Scored, index: np.ndarray, count: int = WORST_PAIRS) -> list[dict]:
  """The `count` pairs of items `index` [n] whose rejected response beats the chosen one by the
  most: gold pairs when the items have any, else directional ones ([] when neither). Ties in the
  margin go by item id, then the pair's candidates, so the list does not depend on item order."""
  mine = np.zeros(scored.n_items, dtype=bool)
  mine[index] = True
  mine = mine[scored.pair_item]                                               # [P]
  source = next((s for s in (records.GOLD, records.DIRECTIONAL)
                 if np.any(mine & (scored.pair_source == s))), None)
  if source is None:
    return []
  # Only pairs tied with the count-th largest margin or above can be in: kept a chunk of items
  # at a time, those of the pairs so far (the threshold only rises, so none dropped comes back).
  pairs, margin = np.zeros(0, np.int64), np.zeros(0)                         # [p], [p]
  for chunk in item_chunks(index):
    more = scored.pairs_of(chunk)[0]
    more = more[scored.pair_source[more] == source]
    pairs, margin = np.concatenate([pairs, more]), np.concatenate([margin,
                                                                   -scored.reward_margin(more)])
    if pairs.size > count:
      least = np.partition(margin, pairs.size - count)[pairs.size - count]
      pairs, margin = pairs[margin >= least], margin[margin >= least]
  ids = scored.ids_of(scored.pair_item[pairs])
  order = sorted(range(len(pairs)), key=lambda j: (-margin[j], ids[j], int(scored.pair_chosen[
      pairs[j]]), int(scored.pair_rejected[pairs[j]])))[:count]
  out = []
  for j in order:
    p = pairs[j]
    chosen, rejected = int(scored.pair_chosen[p]), int(scored.pair_rejected[p])
    out.append({
        "item_id": ids[j], "label_source": source,
        "prompt": None, "chosen": None, "rejected": None,  # filled in by `add_texts`
        "chosen_index": chosen, "rejected_index": rejected,
        "chosen_role": str(scored.roles[scored.pair_item[p], chosen]),
        "rejected_role": str(scored.roles[scored.pair_item[p], rejected]),
        "chosen_reward": float(scored.rewards[scored.pair_item[p], chosen]),
        "rejected_reward": float(scored.rewards[scored.pair_item[p], rejected]),
        "margin": float(margin[j])})
  return out


def add_texts(trees: Iterable[Mapping[str, Any]],
              rows_of: Callable[[Collection[str]], Iterable[Mapping[str, Any]]]) -> None:
  """Fills in the prompt and both responses of every worst pair of metrics.json `trees`
  (`datasets.<name>.worst_pairs`) from the items table: `rows_of(ids)` gives the rows of items
  `ids` (at least; `tables.iter_rows(..., item_ids=ids)`), read once."""
  wanted: dict[str, list[dict]] = {}
  for tree in trees:
    for node in (tree.get("datasets") or {}).values():
      for pair in (node or {}).get("worst_pairs") or ():
        wanted.setdefault(pair["item_id"], []).append(pair)
  if not wanted:
    return
  for item in rows_of(set(wanted)):
    for pair in wanted.pop(str(item["item_id"]), ()):
      pair["prompt"] = cut(prompt_text(item.get("prompt")))
      pair["chosen"] = cut(str(item["candidates"][pair["chosen_index"]]))
      pair["rejected"] = cut(str(item["candidates"][pair["rejected_index"]]))
    if not wanted:
      break


PROMPT_LINES = 4  # of a prompt in the report
SECTION_TITLE = "Worst pairs"  # the report's section (report.html folds its pairs)


def _quote(text: str, lines: int | None = None) -> list[str]:
  rows = text.splitlines() or [""]
  if lines is not None and len(rows) > lines:
    rows = rows[:lines] + ["[...]"]
  return [f"> {row}" if row else ">" for row in rows]


def report_lines(models: Any) -> list[str]:
  """The report's 'Worst pairs' section: per model and dataset, the pairs of `worst_pairs`."""
  out: list[str] = []
  for name, metrics in models.items():
    for dataset, node in (metrics.get("datasets") or {}).items():
      pairs = (node or {}).get("worst_pairs") or []
      if not pairs:
        continue
      what = ("largest margin for the rejected response" if pairs[0]["label_source"] ==
              records.GOLD else "largest stereotype-consistent margin (stereotype over "
              "anti-stereotype)")
      out += [f"### {name}: {dataset}", "", f"The {len(pairs)} pairs with the {what}.", ""]
      for rank, pair in enumerate(pairs, start=1):
        out += [f"**{rank}. `{pair['item_id']}`**: margin {pair['margin']:+.4f} "
                f"(rejected {pair['rejected_reward']:.4f}, chosen {pair['chosen_reward']:.4f})",
                "", "Prompt:", *_quote(pair["prompt"], PROMPT_LINES), "",
                f"Rejected ({pair['rejected_role']}):", *_quote(pair["rejected"]), "",
                f"Chosen ({pair['chosen_role']}):", *_quote(pair["chosen"]), ""]
  return [f"## {SECTION_TITLE}", "", "Where each model most prefers the response it should not: "
          "item ids find the whole items; texts cut to "
          f"{MAX_CHARACTERS} characters.", "", *out] if out else []
