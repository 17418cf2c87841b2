"""StereoSet (Nadeem et al. 2021), dev set: a context and three sentences for one target term.

One item per example; `subset` = its type (intrasentence | intersentence); candidates
stereotype, anti-stereotype, unrelated (roles `stereotype`, `anti_stereotype`, `unrelated`), none
of them labelled desirable (0). Pairs, in this order: directional (anti_stereotype over
stereotype), control (stereotype over unrelated), control (anti_stereotype over unrelated): the
control pairs check language modelling competence, not social desirability.

Two layouts are read: the flattened jsonl (`type, target, bias_type, context, stereotype,
anti-stereotype, unrelated`, one example per line; item id = file stem + line number), and the
original `dev.json` (`data.<type>[].sentences[].gold_label`; item id = the example's own `id`).
Both are the StereoSet dev set, so `split` is `dev`.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Iterator

from socialrm_jax.base import records
from socialrm_jax.datasets import registry
from socialrm_jax.sources.reading import SourceReader
from socialrm_jax.base.errors import InputError
from socialrm_jax.base.templates import PromptTemplate

TEMPLATES = (
    PromptTemplate("stereoset.default", 1, {
        "intersentence": "{context}",
        "intrasentence": "Fill in the blank: {context}",
    }),
    # The paraphrase states each task in other words: the intersentence candidates are the
    # sentence that follows the context (which the default leaves implicit), the intrasentence
    # ones the context with its BLANK filled. The context is unchanged and no candidate is hinted.
    PromptTemplate("stereoset.paraphrase", 1, {
        "intersentence": "Write the sentence that comes next: {context}",
        "intrasentence": "Complete this sentence by replacing BLANK: {context}",
    }),
)

TYPES = ("intersentence", "intrasentence")
LABELS = ("stereotype", "anti-stereotype", "unrelated")  # source names, in candidate order
ROLES = (records.STEREOTYPE, records.ANTI_STEREOTYPE, records.UNRELATED)
PAIRS = records.implied_pairs([0, 0, 0], ROLES)  # the directional pair, then the 2 control pairs
ORIGINAL_FILE = "dev.json"
# Rows whose type cannot be read (broken JSON, a missing or unknown `type`) are counted here.
UNPARSED = "unparsed"


def _item(reader: SourceReader, item_id: str, example: dict[str, Any],
          sentences: list[str], source: dict[str, Any]) -> records.Item:
  kind = example["type"]
  return records.Item(
      item_id=item_id, domain="bias", dataset="stereoset", subset=kind, split="dev",
      prompt=records.user_prompt(reader.template.render(kind, context=example["context"])),
      candidates=sentences, roles=list(ROLES), desirability=[0, 0, 0],
      context_condition=None, template=reader.template.name,
      attributes={"target": example["target"], "bias_type": example["bias_type"], **source},
      pairs=list(PAIRS))


def _flat_items(reader: SourceReader, path: pathlib.Path) -> Iterator[records.Item]:
  # A line is counted under its type; one whose type cannot be read, under UNPARSED.
  for number, row in reader.jsonl_rows(path, UNPARSED, count=False):
    if row.get("type") not in TYPES:
      reader.count_row(UNPARSED)
      reader.bad_row(path, number, f"field 'type' should be one of {TYPES}, "
                     f"got {row.get('type')!r:.40}", UNPARSED)
      continue
    subset = row["type"]
    reader.count_row(subset)
    if not reader.fields(path, number, row, subset, target=str, bias_type=str, context=str,
                         **{label: str for label in LABELS}):
      continue
    item_id = records.make_item_id("stereoset", path.name.split(".")[0], number)
    yield _item(reader, item_id, row, [row[label] for label in LABELS],
                {"source_file": path.name, "row": number})


def _original_items(reader: SourceReader, path: pathlib.Path) -> Iterator[records.Item]:
  try:
    data = json.loads(path.read_bytes())["data"]
    groups = [(kind, data[kind]) for kind in TYPES if kind in data]
  except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
    raise InputError(f"not the StereoSet dev.json layout {{'data': {{type: [...]}}}} ({e})",
                     path) from None
  for kind, examples in groups:
    for number, example in enumerate(examples, start=1):
      reader.count_row(kind)
      if not isinstance(example, dict):
        reader.bad_row(path, number, f"data.{kind} entries should be objects", kind)
        continue
      if not reader.fields(path, number, example, kind, id=str, target=str, bias_type=str,
                           context=str, sentences=list):
        continue
      sentences = [s for s in example["sentences"] if isinstance(s, dict)]
      by_label = {s.get("gold_label"): s.get("sentence") for s in sentences}
      if len(example["sentences"]) != len(LABELS) or set(by_label) != set(LABELS) or \
          not all(isinstance(text, str) for text in by_label.values()):
        reader.bad_row(path, number, f"data.{kind} example {example['id']} should have one "
                       f"sentence per gold_label {LABELS}", kind)
        continue
      yield _item(reader, records.make_item_id("stereoset", example["id"]),
                  {**example, "type": kind}, [by_label[label] for label in LABELS],
                  {"id": example["id"]})


@registry.register("stereoset", templates=TEMPLATES)
def convert(reader: SourceReader) -> Iterator[records.Item]:
  flat = reader.find("*.jsonl", required=False)
  original = reader.find(ORIGINAL_FILE, required=False)
  if not flat and not original:
    raise InputError(f"no StereoSet file found at any depth (the flattened *.jsonl or the "
                     f"original {ORIGINAL_FILE})", reader.source)
  if flat and original:
    raise InputError(f"both the original {ORIGINAL_FILE} and a flattened *.jsonl were found: "
                     "they hold the same examples; keep one", reader.source)
  for path in flat:
    yield from _flat_items(reader, path)
  for path in original:
    yield from _original_items(reader, path)
