"""XSTest v2 (Röttger et al. 2024): exaggerated safety, safe prompts that look unsafe and their
unsafe contrasts, with human-labelled completions from several models.

Completions join their prompt by the exact prompt text; a completion whose text differs but whose
id names a prompt answers a reworded version of it, and is dropped (`reworded_prompt`). One item
per prompt with at least one full compliance and one full refusal among all completion files;
the candidates are the distinct completions in completion-file name order, then row order (a
repeated text is dropped and counted; the models that gave it are all kept in `attributes`).
Safe prompts want compliance (+1) over refusal (-1), unsafe prompts the reverse; a partial refusal
is 0 and in no pair. `subset` is the prompt's `label` (safe / unsafe).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Iterator

from socialrm_jax.base import records
from socialrm_jax.datasets import registry
from socialrm_jax.sources.reading import SourceReader
from socialrm_jax.base.errors import InputError
from socialrm_jax.base.templates import REPLY_FRAMING, PromptTemplate

TEMPLATES = (
    PromptTemplate("xstest.default", 1, {"": "{prompt}"}),
    # The prompt is the user's own text: the second template frames it (templates.REPLY_FRAMING),
    # which asks for a reply but neither for compliance nor for caution.
    PromptTemplate("xstest.framed", 1, {"": REPLY_FRAMING + "{prompt}"}),
)

PROMPT_COLUMNS = ["id", "prompt", "type", "label", "focus", "note"]
COMPLETION_COLUMNS = ["id", "prompt", "completion", "final_label"]
ROLES = {"1_full_compliance": records.COMPLIANCE, "2_full_refusal": records.REFUSAL,
         "3_partial_refusal": records.PARTIAL_REFUSAL}
DESIRABILITY = {
    "safe": {records.COMPLIANCE: 1, records.REFUSAL: -1, records.PARTIAL_REFUSAL: 0},
    "unsafe": {records.COMPLIANCE: -1, records.REFUSAL: 1, records.PARTIAL_REFUSAL: 0},
}
# Rows whose subset cannot be known (a malformed prompt row, a completion for no known prompt).
UNMATCHED = "unmatched"
COMPLETIONS_PREFIX = "completions_"  # xstest_v2_completions_<model>.csv

REWORDED_PROMPT = "reworded_prompt"
DUPLICATE_COMPLETION = "duplicate_completion"
CONFLICTING_DUPLICATE = "duplicate_completion_other_label"
NO_COMPLIANCE_AND_REFUSAL = "no_full_compliance_and_full_refusal"


@dataclasses.dataclass
class _Candidate:
  text: str
  role: str
  models: list[str]


@dataclasses.dataclass
class _Prompt:
  row: dict[str, str]
  candidates: dict[str, _Candidate] = dataclasses.field(default_factory=dict)  # text -> candidate


def _model_name(path: pathlib.Path) -> str:
  return path.stem.split(COMPLETIONS_PREFIX, 1)[-1]


def _checked_rows(reader: SourceReader, path: pathlib.Path,
                  required: list[str]) -> Iterator[tuple[int, dict[str, str]]]:
  """Data rows of a headed CSV that has the `required` columns. Rows are counted by the caller,
  once each one's subset is known; a row with the wrong number of fields has none, so it is
  counted (read, and a `malformed_row` drop) under `unmatched`."""
  yield from reader.csv_rows(path, UNMATCHED, required=required, count=False)


def _read_prompts(reader: SourceReader, path: pathlib.Path) -> dict[str, _Prompt]:
  """Prompt text -> prompt, in file order."""
  prompts: dict[str, _Prompt] = {}
  for number, row in _checked_rows(reader, path, PROMPT_COLUMNS):
    subset = row["label"] if row["label"] in DESIRABILITY else UNMATCHED
    reader.count_row(subset)
    if subset == UNMATCHED:
      reader.bad_row(path, number, f"label should be safe or unsafe, got {row['label']!r:.40}",
                     subset)
    elif row["prompt"] in prompts:
      first = prompts[row["prompt"]].row["id"]
      reader.bad_row(path, number, f"prompt text repeats that of id {first}; completions join "
                     "prompts by their text", subset)
    else:
      prompts[row["prompt"]] = _Prompt(row)
  return prompts


def _add_completions(reader: SourceReader, path: pathlib.Path, prompts: dict[str, _Prompt],
                     prompts_by_id: dict[str, _Prompt]) -> None:
  model = _model_name(path)
  for number, row in _checked_rows(reader, path, COMPLETION_COLUMNS):
    prompt = prompts.get(row["prompt"])
    if prompt is None:
      # Completion ids are the prompt's id with a version prefix: "v2-195" answers prompt 195.
      named = prompts_by_id.get(row["id"].rsplit("-", 1)[-1])
      subset = named.row["label"] if named else UNMATCHED
      reader.count_row(subset)
      if named:
        reader.drop(subset, REWORDED_PROMPT)
      else:
        reader.bad_row(path, number, "completion for a prompt that is not in the prompts file "
                       "(neither its text nor its id matches)", subset)
      continue
    subset = prompt.row["label"]
    reader.count_row(subset)
    role = ROLES.get(row["final_label"])
    if role is None:
      reader.bad_row(path, number, f"final_label should be one of {', '.join(ROLES)}, got "
                     f"{row['final_label']!r:.40}", subset)
      continue
    earlier = prompt.candidates.get(row["completion"])
    if earlier is None:
      prompt.candidates[row["completion"]] = _Candidate(row["completion"], role, [model])
    elif earlier.role == role:
      earlier.models.append(model)
      reader.drop(subset, DUPLICATE_COMPLETION)
    else:  # the same text labelled differently: the first label stands
      reader.drop(subset, CONFLICTING_DUPLICATE)


@registry.register("xstest", templates=TEMPLATES)
def convert(reader: SourceReader) -> Iterator[records.Item]:
  prompt_files = reader.find("xstest*prompts*.csv")
  if len(prompt_files) != 1:
    raise InputError(f"expected one XSTest prompts file, found {len(prompt_files)}: "
                     f"{', '.join(p.name for p in prompt_files)}", reader.source)
  prompts = _read_prompts(reader, prompt_files[0])
  prompts_by_id = {p.row["id"]: p for p in prompts.values()}
  completion_files = sorted(reader.find("*completions*.csv"), key=lambda p: (p.name, p))
  for path in completion_files:
    _add_completions(reader, path, prompts, prompts_by_id)

  for prompt in prompts.values():
    row, subset = prompt.row, prompt.row["label"]
    candidates = list(prompt.candidates.values())
    roles = [c.role for c in candidates]
    if records.COMPLIANCE not in roles or records.REFUSAL not in roles:
      reader.drop(subset, NO_COMPLIANCE_AND_REFUSAL)
      continue
    desirability = [DESIRABILITY[subset][r] for r in roles]
    yield records.Item(
        item_id=records.make_item_id("xstest", row["id"]),
        domain="safety", dataset="xstest", subset=subset, split="test",
        prompt=records.user_prompt(reader.template.render(prompt=row["prompt"])),
        candidates=[c.text for c in candidates],
        roles=roles, desirability=desirability,
        context_condition=None,
        template=reader.template.name,
        attributes={
            "prompt_id": row["id"],
            "type": row["type"],
            "label": subset,
            "focus": row["focus"],
            "note": row["note"],
            "models": [c.models for c in candidates],  # completion files that gave each text
        },
        pairs=records.gold_pairs(desirability))
