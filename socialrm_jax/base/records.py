"""The records every stage shares: items and the preference pairs derived from them (docs/spec.md
sec. 2), and the vocabulary they are written in: domains, candidate roles, context conditions and
label sources (docs/spec.md sec. 1).

An item is one prompt with K >= 2 candidate responses; a pair is (prompt, chosen, rejected) drawn
from one item. Adapters build `Item`s with the pairs they imply; `pair_row` turns each into a row.
The vocabulary lives here, not in the adapters or the metrics, because both sides must agree on
it: an adapter writes `BIASED`, the BBQ metrics count it. An `Item` with a role or a condition
outside the vocabulary is refused, so a typo fails at conversion rather than vanishing from a
metric; a new dataset whose candidates are something new adds its role here.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DOMAINS = ("bias", "safety", "morality", "ethical_reasoning", "general")
GOLD, DIRECTIONAL, CONTROL = "gold", "directional", "control"
LABEL_SOURCES = (GOLD, DIRECTIONAL, CONTROL)

# Candidate roles: what a candidate is, socially.
UNKNOWN, BIASED, ANTI_BIASED, UNRESOLVED = "unknown", "biased", "anti_biased", "unresolved"
STEREOTYPE, ANTI_STEREOTYPE, UNRELATED = "stereotype", "anti_stereotype", "unrelated"
COMPLIANCE, REFUSAL, PARTIAL_REFUSAL = "compliance", "refusal", "partial_refusal"
MORAL, IMMORAL = "moral", "immoral"
REASONABLE, UNREASONABLE = "reasonable", "unreasonable"
CORRECT_TRAIT, WRONG_TRAIT = "correct_trait", "wrong_trait"
JUDGED_WRONG, JUDGED_ACCEPTABLE = "judged_wrong", "judged_acceptable"
MORE_PLEASANT, LESS_PLEASANT = "more_pleasant", "less_pleasant"
CHOSEN, REJECTED = "chosen", "rejected"  # a preference dataset's own label (HH-RLHF, user data)
ROLES = (UNKNOWN, BIASED, ANTI_BIASED, UNRESOLVED, STEREOTYPE, ANTI_STEREOTYPE, UNRELATED,
         COMPLIANCE, REFUSAL, PARTIAL_REFUSAL, MORAL, IMMORAL, REASONABLE, UNREASONABLE,
         CORRECT_TRAIT, WRONG_TRAIT, JUDGED_WRONG, JUDGED_ACCEPTABLE, MORE_PLEASANT, LESS_PLEASANT,
         CHOSEN, REJECTED)

# Context conditions: the variants of one question whose metrics are compared (BBQ's contexts that
# do or do not answer it; Moral Stories' prompts with and without the norm).
AMBIGUOUS, DISAMBIGUATED = "ambiguous", "disambiguated"
WITH_NORM, WITHOUT_NORM = "with_norm", "without_norm"
CONDITIONS = (AMBIGUOUS, DISAMBIGUATED, WITH_NORM, WITHOUT_NORM)

# The pairs roles imply where no candidate is labelled desirable (docs/spec.md sec. 1 and 3): the
# directional pair puts the stereotype as rejected; the control pairs check that a related
# sentence beats an unrelated one. (chosen role, rejected role, label_source), in pair order.
ROLE_PAIRS = ((ANTI_STEREOTYPE, STEREOTYPE, DIRECTIONAL), (STEREOTYPE, UNRELATED, CONTROL),
              (ANTI_STEREOTYPE, UNRELATED, CONTROL))

# (chosen candidate index, rejected candidate index, label_source)
PairSpec = tuple[int, int, str]

# RewardBench 2's Ties rows, as an item's `id` attribute: a prompt's reference row `ref:N` and its
# tied row `tied:N`. The preference adapter checks them as it converts; the best-of-N metrics
# group an item's rows by them.
TIES_ID = re.compile(r"(ref|tied):(\d+)")
REFERENCE, TIED = "ref", "tied"


def ties_id(value: Any) -> tuple[str, str] | None:
  """(`ref` or `tied`, N) of a RewardBench 2 Ties id `ref:N` / `tied:N`, else None."""
  match = TIES_ID.fullmatch(str(value)) if value is not None else None
  return (match.group(1), match.group(2)) if match else None


def make_item_id(dataset: str, *parts: Any) -> str:
  """A readable id derived from the source only (file, row or the dataset's own id), so the
  same input always gives the same id: e.g. `bbq/Age/17`, `ethics/deontology/test_hard/412`."""
  return "/".join([dataset, *(str(p) for p in parts)])


TEMPLATE_MARK = "@"


def templated_item_id(item_id: str, template: str) -> str:
  """The id of an item a non-default prompt template made: its default item's id and the
  template's name (`bbq/Age/17@bbq.paraphrase`), so both can sit in one table while default items
  keep the ids they always had. (An adapter's own ids are source names and numbers joined by
  `/`; none ends in `@` and a template's name.)"""
  return f"{item_id}{TEMPLATE_MARK}{template}"


def user_prompt(text: str) -> list[dict[str, str]]:
  return [{"role": "user", "content": text}]


def gold_pairs(desirability: Sequence[int]) -> list[PairSpec]:
  """Every (+1, -1) combination, in candidate order: the gold pairs of an item."""
  good = [i for i, d in enumerate(desirability) if d > 0]
  bad = [i for i, d in enumerate(desirability) if d < 0]
  return [(c, r, GOLD) for c, r in itertools.product(good, bad)]


def implied_pairs(desirability: Sequence[int], roles: Sequence[str]) -> list[PairSpec]:
  """The pairs an item's labels and roles imply: its gold pairs, then the `ROLE_PAIRS` its roles
  allow. The adapters build their items' pairs with it, and a scorer given items without a pairs
  table counts pairs with it, so the two never disagree."""
  pairs = gold_pairs(desirability)
  for chosen_role, rejected_role, source in ROLE_PAIRS:
    if chosen_role in roles and rejected_role in roles:
      chosen, rejected = roles.index(chosen_role), roles.index(rejected_role)
      if all((c, r) != (chosen, rejected) for c, r, _ in pairs):
        pairs.append((chosen, rejected, source))
  return pairs


def item_pairs(row: dict[str, Any]) -> list[tuple[int, int]]:
  """(chosen, rejected) of the pairs an items-table row implies (see `implied_pairs`)."""
  return [(c, r) for c, r, _ in implied_pairs(row.get("desirability") or [],
                                              list(row.get("roles") or []))]


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
    unknown = sorted(set(self.roles) - set(ROLES))
    if unknown:
      raise ValueError(f"{self.item_id}: roles {unknown} are not in records.ROLES")
    if self.context_condition is not None and self.context_condition not in CONDITIONS:
      raise ValueError(f"{self.item_id}: context condition {self.context_condition!r} is not in "
                       "records.CONDITIONS")
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


# TRL's preference formats: RewardTrainer (trl/trainer/reward_trainer.py, `tokenize_fn`) reads the
# columns `prompt` (optional), `chosen` and `rejected`, and with a prompt it tokenizes
# `prompt + chosen` and `prompt + rejected`: strings joined to strings ("standard"), or message
# lists joined to message lists ("conversational", rendered through the chat template). Our
# prompts are message lists, so in TRL's format each response is a one-message list,
# [{"role": "assistant", "content": text}]; the HF export of the pairs stores them so, and every
# other column as `PAIRS_SCHEMA` has it.
TRL_RESPONSE_COLUMNS = (CHOSEN, REJECTED)
ASSISTANT = "assistant"


def pairs_to_trl(table: pa.Table) -> pa.Table:
  """Pairs with `chosen` and `rejected` as one assistant message each (TRL's types)."""
  for name in TRL_RESPONSE_COLUMNS:
    if name not in table.column_names or table.schema.field(name).type != pa.string():
      continue
    text = table.column(name).combine_chunks()                               # [P] string
    message = pa.StructArray.from_arrays([pa.repeat(pa.scalar(ASSISTANT), len(text)), text],
                                         names=["role", "content"])
    offsets = pa.array(np.arange(len(text) + 1, dtype=np.int32))
    table = table.set_column(table.column_names.index(name), name,
                             pa.ListArray.from_arrays(offsets, message))
  return table


def pairs_from_trl(table: pa.Table) -> pa.Table:
  """Undoes `pairs_to_trl`: each one-message response back to its text."""
  for name in TRL_RESPONSE_COLUMNS:
    if name not in table.column_names or not pa.types.is_list(table.schema.field(name).type):
      continue
    messages = table.column(name).combine_chunks()
    if messages.null_count or pc.any(pc.not_equal(messages.value_lengths(), 1)).as_py():
      raise ValueError(f"pairs column {name!r} should hold one message per row")
    table = table.set_column(table.column_names.index(name), name,
                             messages.flatten().field("content"))
  return table
