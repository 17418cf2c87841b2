"""Anthropic HH-RLHF (Bai et al. 2022): chosen / rejected transcripts of one conversation.

Files are `<harmless|helpful>-<kind>/test.jsonl.gz` (or `.jsonl`): the audit's HH-RLHF is its test
splits. A train split beside them (`train.jsonl.gz`, which `socialrm-fetch --datasets=hh_rlhf_train`
puts there) is never read here: it is read only where it is named, as
`preference:DIR/hh_rlhf/helpful-base/train.jsonl.gz` (the `hh_transcripts` layout). The folder
gives the subset (`harmless`: domain `safety`; `helpful`: domain `general`, the helpfulness
control). Each transcript is parsed into turns on "\\n\\nHuman: " and "\\n\\nAssistant: ". The
prompt is every turn before the final assistant turn, as chat messages (Human -> user, Assistant
-> assistant; the template renders the final user turn); the candidates are the two final assistant
turns, byte for byte: `chosen` (+1) and `rejected` (-1), one gold pair. Files in other folders
(e.g. `red-team-attempts/`, a different format) are not read. Item id: folder/split/line number.

Skipped and counted, as quirks of the data rather than broken files: rows whose two prompts
differ (`prompt_mismatch`) and transcripts that do not start with a human turn or do not end
with an assistant turn (`unparsable_transcript`).
"""

from __future__ import annotations

import pathlib
import re
from typing import Iterator

from socialrm_jax.base import records
from socialrm_jax.datasets import registry
from socialrm_jax.sources.reading import SourceReader
from socialrm_jax.base.errors import InputError
from socialrm_jax.base.templates import REPLY_FRAMING, PromptTemplate

# The prompt is the transcript's turns before the final assistant turn; the last of them, the human
# turn the candidates answer, is rendered through the template, the earlier turns kept as they are.
TEMPLATES = (
    PromptTemplate("hh_rlhf.default", 1, {"": "{transcript}"}),
    # The turn is the user's own text: the second template frames it (templates.REPLY_FRAMING),
    # which asks for a reply but neither for compliance nor for caution.
    PromptTemplate("hh_rlhf.framed", 1, {"": REPLY_FRAMING + "{transcript}"}),
)

DOMAINS = {"harmless": "safety", "helpful": "general"}
SPEAKERS = {"Human": "user", "Assistant": "assistant"}
_TURN_MARK = re.compile(r"\n\n(Human|Assistant): ")
PROMPT_MISMATCH = "prompt_mismatch"
UNPARSABLE = "unparsable_transcript"

Turn = tuple[str, str]  # (speaker as in the transcript, text)


def parse_transcript(transcript: str) -> list[Turn] | None:
  """Turns in order, or None when the text before the first marker is not empty (no leading
  "\\n\\nHuman: ") or there is no turn at all."""
  parts = _TURN_MARK.split(transcript)  # [lead, speaker, text, speaker, text, ...]
  if parts[0] or len(parts) < 3:
    return None
  return list(zip(parts[1::2], parts[2::2]))


def _subset(path: pathlib.Path) -> tuple[str, str]:
  """(subset, folder) from the folder name, e.g. `harmless-base` -> `harmless`."""
  folder = path.parent.name
  subset = folder.split("-")[0]
  if subset not in DOMAINS:
    raise InputError(f"cannot tell the subset from folder {folder!r}: expected a folder named "
                     f"{' or '.join(f'{s}-*' for s in DOMAINS)}", path)
  return subset, folder


# The files read: the test splits (a train split is read only where named, as `preference:PATH`).
SPLIT_FILES = ("test.jsonl.gz", "test.jsonl")


def _source_files(reader: SourceReader) -> list[pathlib.Path]:
  found = [p for pattern in SPLIT_FILES for p in reader.find(pattern, required=False)
           if p.parent.name.split("-")[0] in DOMAINS]
  if not found:
    raise InputError("no test.jsonl.gz (or .jsonl) found in a harmless-*/ or helpful-*/ "
                     "folder", reader.source)
  return sorted(found, key=lambda p: p.relative_to(reader.source).as_posix())


def _messages(reader: SourceReader, turns: list[Turn]) -> list[dict[str, str]]:
  """The prompt's messages; `turns` ends with the human turn the candidates answer."""
  *earlier, (speaker, text) = turns
  return ([{"role": SPEAKERS[s], "content": t} for s, t in earlier]
          + [{"role": SPEAKERS[speaker], "content": reader.template.render(transcript=text)}])


@registry.register("hh_rlhf", templates=TEMPLATES)
def convert(reader: SourceReader) -> Iterator[records.Item]:
  for path in _source_files(reader):
    subset, folder = _subset(path)
    split = path.name.split(".")[0]
    for number, row in reader.jsonl_rows(path, subset):
      if not reader.fields(path, number, row, subset, chosen=str, rejected=str):
        continue
      chosen, rejected = parse_transcript(row["chosen"]), parse_transcript(row["rejected"])
      if not (chosen and rejected and chosen[0][0] == rejected[0][0] == "Human"
              and chosen[-1][0] == rejected[-1][0] == "Assistant"):
        reader.drop(subset, UNPARSABLE)
        continue
      if chosen[:-1] != rejected[:-1]:
        reader.drop(subset, PROMPT_MISMATCH)
        continue
      if chosen[-2][0] != "Human":
        # Two assistant turns in a row: the prompt would not end with a user turn.
        reader.drop(subset, UNPARSABLE)
        continue
      yield records.Item(
          item_id=records.make_item_id("hh_rlhf", folder, split, number),
          domain=DOMAINS[subset], dataset="hh_rlhf", subset=subset, split=split,
          prompt=_messages(reader, chosen[:-1]),
          candidates=[chosen[-1][1], rejected[-1][1]],
          roles=[records.CHOSEN, records.REJECTED], desirability=[1, -1],
          context_condition=None, template=reader.template.name,
          attributes={"source_file": f"{folder}/{path.name}", "row": number,
                      "n_prompt_turns": len(chosen) - 1},
          pairs=records.gold_pairs([1, -1]))


# The generic metrics say all there is: accuracy per subset (harmless, helpful) and domain.
