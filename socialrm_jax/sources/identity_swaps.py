"""Counterfactual identity swaps: items that differ from converted ones only in the social group.

  python -m socialrm_jax.main.counterfactuals --items=CONVERTED --output_dir=SWAPS [--format=jsonl]
      [--allow_empty]

A model that reads the group rather than the content changes its rewards when only the group term
changes. This module derives, from a converted items table, the counterfactual of every item that
has one, and `analysis/studies/swap_effects.py` measures the reward change. Two rules, chosen by
what the item itself records (never by the dataset's name):

- named answers (BBQ's layout, docs/spec.md sec. 3): the item's `attributes.answer_info` holds one
  `[term, group]` per candidate, exactly one of them tagged `unknown`. The two named answers'
  terms ("grandfather", "grandson") are exchanged at the same time everywhere in the prompt and
  the candidates: whole words, case-insensitive, the first letter's case following the text
  ("Grandfather" at a sentence start becomes "Grandson"), and an indefinite article before a term
  made to fit the new one ("an elderly man" -> "a youthful man"). Candidate i keeps its logical
  part (the person who struggled with the app, or "can't be determined"), so its `desirability`
  (the gold label) stays; what changes is the group it names, so `answer_info`, `answer_groups`
  and the `biased` / `anti_biased` roles of the two named answers are exchanged with it (those
  roles say which answer names the stereotyped group). The derived item is written to a separate
  items table, with the id `<original id>/swap`, `attributes.counterfactual_of` = the original id
  and `attributes.swap` = {term: term'} both ways. Skipped, and counted with the reason: two
  named answers worded differently apart from their terms ("The man carrying a stack of papers" /
  "The man with the wheelchair": such terms are not interchangeable, and exchanging them breaks
  the text, "one wheelchair and the other maneuvering his carrying a stack of papers"; so is "The
  lesbian woman" / "The gay man", whose exchange would give "a lesbian man"); a term that is not
  in the prompt (swapping it would change the answers but not the story); a named answer that does
  not contain its own term or contains the other's; two terms that are the same word; and
  malformed `answer_info`. (With both terms in the prompt, the exchange always changes it.)
- paired sentences (CrowS-Pairs' layout): an item with exactly two candidates, roles `stereotype`
  and `anti_stereotype`. The dataset wrote the counterfactual itself: `sent_less` is `sent_more`
  with the group changed, on the same prompt, so no item is generated (an item with the same
  texts in the other order would get the same rewards); the record links the item's stereotype
  candidate to its own anti_stereotype candidate, and the reward change is r(sent_less) -
  r(sent_more), already scored in the main run. Its terms are the words where the two sentences
  differ; CrowS-Pairs is known to be noisy (Blodgett et al. 2021: some pairs change more than the
  group), so the report counts the records whose sentences differ in more than one place. A
  "flip" of the preferred response is not defined here: each version is one response, there is
  no choice among responses to change (the preference between the two versions is the main
  metrics' stereotype rate).

Every other item has no counterfactual (`no_rule`, counted per dataset). Where the items table
holds several prompt templates of a dataset (`--templates`), only its primary template's items
get counterfactuals, by the main metrics' rule (`analysis/evaluate.py`: the default template when
present, else the first in the table), so no source row counts twice and the swap set costs one
scoring pass of them; the others are counted as `not_primary_template`. Known limits of the
exchange: words tied to a term elsewhere in the context are not exchanged with it (pronouns stay,
and the frame check above looks at the answers only), and the article rule goes by spelling (a
vowel letter or 8, 11, 18: "an"), with a few spelled-out exceptions. On the bundled BBQ slice 96 of
120 items get a counterfactual (the other 24 differ beyond their terms); on the full files of its
six categories 10,628 of 11,956 (1,324 differ beyond their terms, mostly Disability_status's
descriptions such as "carrying a stack of papers", and 4 name a term the prompt does not have).

Outputs, in `--output_dir` (written together, like the converter's, so a failure leaves an earlier
output as it was): the derived items and their pairs (`items.*`, `pairs.*`, a valid items folder:
`socialrm-score --items=SWAPS` scores it), `swaps.*` with one record per counterfactual link
(`SWAPS_SCHEMA`), and `swap_report.json` (per dataset: items read, records by rule, skips by
reason). The derived items never go into the main items table, where they would count twice in the
main metrics. Items of which none has a counterfactual (XSTest alone) are an error: an empty
swap set is written only with `--allow_empty`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import difflib
import functools
import pathlib
import re
from typing import Any, Callable, Iterable, Sequence

import pyarrow as pa

from socialrm_jax.base import records, tables, templates
from socialrm_jax.base.errors import InputError

NAMED_ANSWERS, PAIRED_SENTENCES = "named_answers", "paired_sentences"
SWAP_SUFFIX = "swap"
REPORT_FILE = "swap_report.json"
TABLE_PREFIXES = ("items", "pairs", "swaps")

# Why an item gets no counterfactual.
NO_RULE = "no_rule"
NOT_PRIMARY_TEMPLATE = "not_primary_template"
MALFORMED_ANSWER_INFO = "malformed_answer_info"
SAME_TERM = "same_term"
TERM_NOT_IN_PROMPT = "term_not_in_prompt"
TERM_NOT_IN_ITS_ANSWER = "term_not_in_its_answer"
ANSWER_NAMES_BOTH = "answer_names_both"
ANSWERS_DIFFER_BEYOND_TERMS = "answers_differ_beyond_terms"
# A derived pair whose two texts are equal is dropped, as the converter drops them.
IDENTICAL_PAIR_TEXTS = "identical_pair_texts"

# One row per counterfactual link: the counterfactual item's candidate
# `counterfactual_candidates[j]` is the original item's candidate `original_candidates[j]` with
# the group exchanged. `terms` lists the exchanged [term, term'] spans.
SWAPS_SCHEMA = pa.schema([
    ("original_item_id", pa.string()), ("counterfactual_item_id", pa.string()),
    ("dataset", pa.string()), ("domain", pa.string()), ("subset", pa.string()),
    ("context_condition", pa.string()), ("rule", pa.string()),
    ("original_candidates", pa.list_(pa.int32())),
    ("counterfactual_candidates", pa.list_(pa.int32())),
    ("terms", pa.list_(pa.list_(pa.string()))),
])

# Word edges: a hyphen or a letter next to a term makes it part of a longer word ("old" is not in
# "60-year-old"); an apostrophe after it does not ("grandfather's").
_BEFORE = r"(?<![\w-])"
_AFTER = r"(?![\w-])"
_ARTICLE = r"(?:(?<![\w'-])(?P<article>an?)(?P<space>\s+))?"
# Spellings that the vowel-letter rule gets wrong.
_A_BEFORE = ("eu", "one", "once", "uni", "use", "usu", "ut", "ug", "uk", "ur")
_AN_BEFORE = ("hour", "honest", "honor", "heir")


def indefinite_article(word: str) -> str:
  """"a" or "an" before `word`, by its spelling ("an 80-year-old", "a European")."""
  lower = word.lower()
  digits = re.match(r"\d+", lower)
  if digits:
    return "an" if digits[0].startswith("8") or digits[0] in ("11", "18") else "a"
  if lower.startswith(_AN_BEFORE):
    return "an"
  if lower.startswith(_A_BEFORE):
    return "a"
  return "an" if lower[:1] in ("a", "e", "i", "o", "u") else "a"


def _first_letter_like(text: str, model: str) -> str:
  """`text` with its first letter in the case of `model`'s first letter."""
  if not text or not model:
    return text
  head = text[0].upper() if model[0].isupper() else text[0].lower()
  return head + text[1:]


class Exchange:
  """Exchanges two terms everywhere in a text, at the same time (see the module docstring).

  Where one term holds the other ("no tattoos", "tattoos"), the longer one is matched first, so
  each place in a text is one term or the other, never both."""

  def __init__(self, first: str, second: str):
    self.other = {first.lower(): second, second.lower(): first}
    self.written = {first.lower(): first, second.lower(): second}
    alternatives = "|".join(re.escape(t) for t in sorted((first, second), key=len, reverse=True))
    self.pattern = re.compile(_ARTICLE + _BEFORE + f"(?P<term>{alternatives})" + _AFTER,
                              re.IGNORECASE)

  def found(self, text: str) -> set[str]:
    """The terms (lower-cased) that occur in `text`."""
    return {match["term"].lower() for match in self.pattern.finditer(text)}

  def frame(self, text: str) -> str:
    """`text` with each term (and an article before it) blanked, lower-cased, spaces collapsed:
    two answers whose terms are interchangeable have the same frame ("the _ friend")."""
    return " ".join(self.pattern.sub("_", text).lower().split())

  def _replace(self, match: re.Match) -> str:
    found = match["term"]
    new = self.other[found.lower()]
    if found[:1] != self.written[found.lower()][:1]:  # the text cased the term its own way
      new = _first_letter_like(new, found)
    article = match["article"]
    if article is None:
      return new
    if article.lower() == indefinite_article(found):  # only a fitting article is refitted
      article = _first_letter_like(indefinite_article(new), article)
    return article + match["space"] + new

  def __call__(self, text: str) -> str:
    return self.pattern.sub(self._replace, text)


# BBQ repeats each pair of terms across its templates' items: one compiled pattern per pair.
exchange_for = functools.lru_cache(maxsize=4096)(Exchange)


@dataclasses.dataclass
class Derived:
  """What one item gives: its counterfactual link, and the generated item when there is one."""
  link: dict[str, Any]
  item: records.Item | None = None


def _link(row: dict[str, Any], counterfactual_id: str, rule: str, original: Sequence[int],
          counterfactual: Sequence[int], terms: Sequence[Sequence[str]]) -> dict[str, Any]:
  return {"original_item_id": row["item_id"], "counterfactual_item_id": counterfactual_id,
          "dataset": row["dataset"], "domain": row["domain"], "subset": row["subset"],
          "context_condition": row.get("context_condition"), "rule": rule,
          "original_candidates": list(original), "counterfactual_candidates": list(counterfactual),
          "terms": [list(t) for t in terms]}


def _named(answer_info: Any, k: int) -> list[int] | None:
  """The indices of the two named answers, or None when `answer_info` is not one [term, group]
  per candidate with exactly one tagged unknown."""
  if not isinstance(answer_info, list) or len(answer_info) != k:
    return None
  if not all(isinstance(a, list) and len(a) == 2 and all(isinstance(x, str) and x for x in a)
             for a in answer_info):
    return None
  named = [i for i, (_, group) in enumerate(answer_info) if group != records.UNKNOWN]
  return named if len(named) == 2 and k == 3 else None  # two named answers and one unknown


def swap_named_answers(row: dict[str, Any]) -> Derived | str:
  """The named-answers rule: the derived item, or the reason there is none."""
  attributes = row.get("attributes") or {}
  candidates = list(row["candidates"])
  named = _named(attributes.get("answer_info"), len(candidates))
  if named is None:
    return MALFORMED_ANSWER_INFO
  first, second = named
  info = [list(a) for a in attributes["answer_info"]]
  term, other = info[first][0], info[second][0]
  if term.lower() == other.lower():
    return SAME_TERM
  exchange = exchange_for(term, other)
  if exchange.found("\n".join(m["content"] for m in row["prompt"])) != {term.lower(),
                                                                         other.lower()}:
    return TERM_NOT_IN_PROMPT
  in_first, in_second = exchange.found(candidates[first]), exchange.found(candidates[second])
  if term.lower() not in in_first or other.lower() not in in_second:
    return TERM_NOT_IN_ITS_ANSWER
  if len(in_first) > 1 or len(in_second) > 1:
    return ANSWER_NAMES_BOTH
  if exchange.frame(candidates[first]) != exchange.frame(candidates[second]):
    return ANSWERS_DIFFER_BEYOND_TERMS
  prompt = [{**m, "content": exchange(m["content"])} for m in row["prompt"]]
  swapped = [exchange(c) for c in candidates]
  roles = list(row["roles"])
  roles[first], roles[second] = roles[second], roles[first]
  info[first], info[second] = info[second], info[first]
  new_attributes = {**attributes, "answer_info": info, "counterfactual_of": row["item_id"],
                    "swap": {term: other, other: term}}
  if isinstance(attributes.get("answer_groups"), list):
    new_attributes["answer_groups"] = [a[1] for a in info]
  item_id = records.make_item_id(row["item_id"], SWAP_SUFFIX)
  desirability = list(row["desirability"])
  item = records.Item(
      item_id=item_id, domain=row["domain"], dataset=row["dataset"], subset=row["subset"],
      split=row["split"], prompt=prompt, candidates=swapped, roles=roles,
      desirability=desirability, context_condition=row.get("context_condition"),
      template=row["template"], attributes=new_attributes,
      pairs=records.implied_pairs(desirability, roles))
  every = range(len(candidates))
  return Derived(_link(row, item_id, NAMED_ANSWERS, every, every, [[term, other]]), item)


def differing_spans(first: str, second: str) -> list[list[str]]:
  """The word spans where two sentences differ, as [span in first, span in second]."""
  a, b = first.split(), second.split()
  matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
  return [[" ".join(a[i1:i2]), " ".join(b[j1:j2])]
          for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def is_paired_sentences(row: dict[str, Any]) -> bool:
  return sorted(row["roles"]) == sorted((records.STEREOTYPE, records.ANTI_STEREOTYPE))


def link_paired_sentences(row: dict[str, Any]) -> Derived:
  """The paired-sentences rule: the stereotype sentence's counterfactual is the item's own
  anti-stereotype sentence."""
  more = row["roles"].index(records.STEREOTYPE)
  less = row["roles"].index(records.ANTI_STEREOTYPE)
  terms = differing_spans(row["candidates"][more], row["candidates"][less])
  return Derived(_link(row, row["item_id"], PAIRED_SENTENCES, [more], [less], terms))


def derive(row: dict[str, Any]) -> Derived | str:
  """The counterfactual of one items-table row, or the reason it has none."""
  if "answer_info" in (row.get("attributes") or {}):
    return swap_named_answers(row)
  if is_paired_sentences(row):
    return link_paired_sentences(row)
  return NO_RULE


@dataclasses.dataclass
class SwapSet:
  """The derived items with their pair rows, the links, and the report."""
  items: list[dict[str, Any]]
  pairs: list[dict[str, Any]]
  links: list[dict[str, Any]]
  report: dict[str, Any]


def _dataset_report() -> dict[str, Any]:
  return {"items_read": 0, "records": collections.Counter(), "generated_items": 0, "pairs": 0,
          "skips": collections.Counter(), "drops": collections.Counter(),
          "records_with_several_differing_spans": 0}


def primary_templates(rows: Iterable[dict[str, Any]]) -> dict[str, str]:
  """Each dataset's primary template (`templates.by_dataset`), in one pass over the rows."""
  found = templates.by_dataset((row["dataset"], row.get("template") or "") for row in rows)
  return {name: names[0] for name, names in found.items()}


class _Deriving:
  """Derives items one at a time, counting per dataset what it reads, skips, links and makes."""

  def __init__(self, primary: dict[str, str]):
    self.primary = primary
    self.per_dataset: dict[str, dict[str, Any]] = collections.defaultdict(_dataset_report)

  def __call__(self, row: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None,
                                                   list[dict[str, Any]]]:
    """(the link or None, the generated item's row or None, its pair rows) of one item."""
    counts = self.per_dataset[row["dataset"]]
    counts["items_read"] += 1
    if (row.get("template") or "") != self.primary[row["dataset"]]:
      counts["skips"][NOT_PRIMARY_TEMPLATE] += 1
      return None, None, []
    derived = derive(row)
    if isinstance(derived, str):
      counts["skips"][derived] += 1
      return None, None, []
    link = derived.link
    counts["records"][link["rule"]] += 1
    counts["records_with_several_differing_spans"] += (
        link["rule"] == PAIRED_SENTENCES and len(link["terms"]) > 1)
    if derived.item is None:
      return link, None, []
    item = derived.item
    counts["generated_items"] += 1
    pairs = []
    for chosen, rejected, source in item.pairs:
      if item.candidates[chosen] == item.candidates[rejected]:
        counts["drops"][IDENTICAL_PAIR_TEXTS] += 1
        continue
      pairs.append(records.pair_row(item, chosen, rejected, source))
      counts["pairs"] += 1
    # The item's fields as they are (`Item.row` deep-copies them, which is most of the time over
    # the full BBQ, and these lists are new already).
    return link, {k: v for k, v in vars(item).items() if k != "pairs"}, pairs

  def report(self) -> dict[str, Any]:
    datasets = {}
    for name, counts in self.per_dataset.items():
      node = {k: dict(sorted(v.items())) if isinstance(v, collections.Counter) else v
              for k, v in counts.items()}
      if not counts["records"][PAIRED_SENTENCES]:
        del node["records_with_several_differing_spans"]
      datasets[name] = node
    every = self.per_dataset.values()
    return {"items_read": sum(c["items_read"] for c in every),
            "records": sum(sum(c["records"].values()) for c in every),
            "generated_items": sum(c["generated_items"] for c in every),
            "pairs": sum(c["pairs"] for c in every), "datasets": datasets}


def derive_all(rows: Iterable[dict[str, Any]]) -> SwapSet:
  """Derives the swap set of converted items (rows of an items table), in their order, in
  memory (`derive_into` streams a table of any size)."""
  rows = list(rows)
  deriving = _Deriving(primary_templates(rows))
  out = SwapSet([], [], [], {})
  for row in rows:
    link, item, pairs = deriving(row)
    if link is not None:
      out.links.append(link)
    if item is not None:
      out.items.append(item)
    out.pairs.extend(pairs)
  out.report = deriving.report()
  return out


def _write_tables(output_dir: str | pathlib.Path, fmt: str,
                  fill: Callable[[dict[str, tables.TableWriter]], dict[str, Any]]) -> dict[str, Any]:
  """Writes the items, pairs and swaps tables, which `fill(writers)` adds rows to, and the report
  it returns, into `output_dir` at once (see `tables.staged_folder`: if `fill` raises, the folder
  is left as it was); tables of another format left there by an earlier run are removed, so a
  reader never finds two. Returns the report."""
  schemas = {"items": records.ITEMS_SCHEMA, "pairs": records.PAIRS_SCHEMA, "swaps": SWAPS_SCHEMA}
  with tables.staged_folder(output_dir) as stage:
    with contextlib.ExitStack() as stack:
      writers = {prefix: stack.enter_context(tables.TableWriter(
          stage / tables.table_name(prefix, fmt), fmt, schemas[prefix],
          hf_columns=records.pairs_to_trl if prefix == "pairs" else None))
                 for prefix in TABLE_PREFIXES}
      report = fill(writers)
    tables.atomic_write_json(stage / REPORT_FILE, {"format": fmt, **report})
  for other in tables.FORMATS:
    if other != fmt:
      for prefix in TABLE_PREFIXES:
        tables.remove(pathlib.Path(output_dir) / tables.table_name(prefix, other))
  return report


def derive_into(read: Callable[[], Iterable[dict[str, Any]]], output_dir: str | pathlib.Path,
                fmt: str = "parquet", allow_empty: bool = True,
                name: str = "the items") -> dict[str, Any]:
  """Derives the swap set of the items `read()` gives and writes it into `output_dir` as it goes:
  two passes over `read()` (the primary templates, then the items), so memory holds a batch of
  rows, not the items (`tables.TableWriter`). Returns the report. A set with no counterfactual
  at all is refused unless `allow_empty` (`name` says where the items came from), and then the
  folder is left as it was."""
  deriving = _Deriving(primary_templates(read()))

  def fill(writers: dict[str, tables.TableWriter]) -> dict[str, Any]:
    for row in read():
      link, item, pairs = deriving(row)
      if link is not None:
        writers["swaps"].add([link])
      if item is not None:
        writers["items"].add([item])
      if pairs:
        writers["pairs"].add(pairs)
    report = deriving.report()
    if not report["records"] and not allow_empty:
      raise InputError(f"no item has a counterfactual ({report['items_read']} items of "
                       f"{', '.join(report['datasets']) or 'no dataset'}; swaps need BBQ's named "
                       "answers or CrowS-Pairs' paired sentences): nothing to swap "
                       "(--allow_empty writes the empty set)", name)
    return report
  return _write_tables(output_dir, fmt, fill)


def derive_to(items_path: str | pathlib.Path, output_dir: str | pathlib.Path,
              fmt: str = "parquet", allow_empty: bool = False) -> dict[str, Any]:
  """Reads a converted items table, a batch at a time, and writes its swap set into
  `output_dir` (`derive_into`); returns the report. A set with no counterfactual at all is
  refused unless `allow_empty`."""
  if pathlib.Path(output_dir).exists() and not pathlib.Path(output_dir).is_dir():
    raise InputError("the output folder names a file; give a folder (new or existing)", output_dir)
  return derive_into(lambda: tables.iter_rows(items_path, "items"), output_dir, fmt,
                     allow_empty=allow_empty, name=str(items_path))


def read_links(swaps_dir: str | pathlib.Path) -> list[dict[str, Any]]:
  """The swaps table of a swap-set folder."""
  return tables.read_rows(swaps_dir, "swaps")
