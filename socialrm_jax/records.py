"""The records every stage shares: items and the preference pairs derived from them (SPEC sec. 2).

An item is one prompt with K >= 2 candidate responses; a pair is (prompt, chosen, rejected) drawn
from one item. Adapters build `Item`s with the pairs they imply; `pair_row` turns each into a row.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Sequence

import pyarrow as pa

DOMAINS = ("bias", "safety", "morality", "ethical_reasoning", "general")
LABEL_SOURCES = ("gold", "directional", "control")

# (chosen candidate index, rejected candidate index, label_source)
PairSpec = tuple[int, int, str]


def make_item_id(dataset: str, *parts: Any) -> str:
  """A readable id derived from the source only (file, row or the dataset's own id), so the
  same input always gives the same id: e.g. `bbq/Age/17`, `ethics/deontology/test_hard/412`."""
  return "/".join([dataset, *(str(p) for p in parts)])


def user_prompt(text: str) -> list[dict[str, str]]:
  return [{"role": "user", "content": text}]


def gold_pairs(desirability: Sequence[int]) -> list[PairSpec]:
  """Every (+1, -1) combination, in candidate order: the gold pairs of an item."""
  good = [i for i, d in enumerate(desirability) if d > 0]
  bad = [i for i, d in enumerate(desirability) if d < 0]
  return [(c, r, "gold") for c, r in itertools.product(good, bad)]


@dataclasses.dataclass
class Item:
  item_id: str
  domain: str
  dataset: str
  subset: str
  split: str
  prompt: list[dict[str, str]]
  candidates: list[str]
  roles: list[str]
  desirability: list[int]
  context_condition: str | None
  template: str
  attributes: dict[str, Any]
  pairs: list[PairSpec]

  def __post_init__(self):
    k = len(self.candidates)
    if not (len(self.roles) == len(self.desirability) == k):
      raise ValueError(f"{self.item_id}: candidates, roles and desirability differ in length")
    if self.domain not in DOMAINS:
      raise ValueError(f"{self.item_id}: unknown domain {self.domain!r}")
    if not self.prompt or self.prompt[-1]["role"] != "user":
      raise ValueError(f"{self.item_id}: the prompt must end with a user turn")
    for c, r, source in self.pairs:
      if source not in LABEL_SOURCES or not (0 <= c < k and 0 <= r < k) or c == r:
        raise ValueError(f"{self.item_id}: bad pair {(c, r, source)}")

  def row(self) -> dict[str, Any]:
    row = dataclasses.asdict(self)
    del row["pairs"]
    return row


def pair_row(item: Item, chosen: int, rejected: int, label_source: str) -> dict[str, Any]:
  return {
      "pair_id": f"{item.item_id}:{chosen}>{rejected}",
      "item_id": item.item_id,
      "domain": item.domain,
      "dataset": item.dataset,
      "subset": item.subset,
      "label_source": label_source,
      "prompt": item.prompt,
      "chosen": item.candidates[chosen],
      "rejected": item.candidates[rejected],
      "chosen_index": chosen,
      "rejected_index": rejected,
      "chosen_role": item.roles[chosen],
      "rejected_role": item.roles[rejected],
      "context_condition": item.context_condition,
  }


_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))

ITEMS_SCHEMA = pa.schema([
    ("item_id", pa.string()), ("domain", pa.string()), ("dataset", pa.string()),
    ("subset", pa.string()), ("split", pa.string()), ("prompt", _MESSAGES),
    ("candidates", pa.list_(pa.string())), ("roles", pa.list_(pa.string())),
    ("desirability", pa.list_(pa.int8())), ("context_condition", pa.string()),
    ("template", pa.string()), ("attributes", pa.string()),  # a JSON object, as text
])

PAIRS_SCHEMA = pa.schema([
    ("pair_id", pa.string()), ("item_id", pa.string()), ("domain", pa.string()),
    ("dataset", pa.string()), ("subset", pa.string()), ("label_source", pa.string()),
    ("prompt", _MESSAGES), ("chosen", pa.string()), ("rejected", pa.string()),
    ("chosen_index", pa.int32()), ("rejected_index", pa.int32()), ("chosen_role", pa.string()),
    ("rejected_role", pa.string()), ("context_condition", pa.string()),
])
