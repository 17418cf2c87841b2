"""Any preference data: rows of (prompt, chosen, rejected) from a file or a saved HF dataset, in
the layouts people use, audited as gold pairs (the chosen response should get the higher reward).

  --datasets=preference:PATH[:name=NAME,domain=DOMAIN]   [--columns=ROLE=COLUMN,...]

PATH is a .jsonl, .json, .csv or .parquet file (or one gzipped: HH-RLHF's train.jsonl.gz), or a
folder saved with `save_to_disk` (each split of a saved DatasetDict is read, and named the items'
`split`; a file's split is `all`). `name` names the items' dataset (default: PATH's stem);
`domain` is the domain of rows without a `domain` column (default `general`). Every table goes
through HF `datasets` (`hf_reading`).

Columns, by role; each role is read from the column of its name, or the one `--columns` maps it
to (`--columns=prompt=question,chosen=good`; `prompt=` says there is no prompt column):
- `chosen`, `rejected` (required): the preferred and the dispreferred response.
- `prompt` (optional): the conversation before the responses.
- `subset` (default: the split), `domain`, `label`: carried into the metrics, which report
  accuracy per subset (`subsets.<subset>`) and per label (`labels.<label>`) with intervals.
- `id`: kept in the items' attributes.
- `margin` (TRL's optional column): a number kept in the items' attributes, the margin
  `socialrm-train`'s loss subtracts (`-logsigmoid(r_chosen - r_rejected - margin)`).
- `num_correct`: in a row of response lists (below), how many of its responses are correct.

The layout is told from the columns' types, per table (the conversion report names it):
- `strings` (RewardBench): prompt, chosen and rejected are text.
- `prompt_messages`: the prompt is a message list, the responses text (this project's pairs).
- `conversational` (TRL, explicit prompt): prompt and responses are message lists.
- `implicit_conversational` (TRL, implicit prompt): no prompt; each response is the whole
  conversation as messages, the prompt inside.
- `hh_transcripts` (Anthropic HH-RLHF): no prompt; each response is a whole transcript in text,
  split into turns on "\\n\\nHuman: " and "\\n\\nAssistant: " as HH-RLHF's own adapter does.
A message list holding more than assistant messages is a whole conversation (a prompt column
beside it is not prepended again, as in RewardBench's preference test sets). A conversation's
last message is the response, and the messages before it the prompt, which must end with a user
turn. Rows whose chosen and rejected prompts differ are dropped and counted (`prompt_mismatch`, a
quirk of HH-RLHF's own data). A missing or empty response, a message that is not {role, content}
text, a conversation that does not end with an assistant response after a user turn, a domain
outside `records.DOMAINS` and an unparsable transcript are malformed rows: an error naming the
file and the row, or skipped and counted with `--on_error=skip`.

- `best_of_n` (RewardBench 2): chosen and rejected are lists of response texts (in a CSV file,
  JSON-encoded in their fields), beside a prompt.

An item per row: candidates [chosen, rejected], roles `chosen`, `rejected`, desirability +1, -1,
one gold pair; id `<name>/<row>` (`<name>/<split>/<row>` for a saved DatasetDict). Items of a
dataset with no analysis of its own are analysed as these (`analysis/datasets/preference.py`).

A row of response lists (RewardBench 2: one correct answer against three, or several correct ones
in its Ties subset) is an item of K candidates, chosen then rejected in the row's order; the first
`num_correct` (default: the whole chosen list) are correct (role `chosen`, +1) and the rest not
(`rejected`, -1), as RewardBench 2's code reads the column; gold pairs are every (correct,
incorrect) combination, and the id `<name>/<row>/<id>` keeps the row's id. `num_correct` above the
chosen list (or below 1), an empty chosen or rejected list or response, a list beside a text or
holding other than text, a Ties id `tied:N` without a `ref:N` row in its table, a Ties id given
twice and a subset mixing Ties rows with other best-of-N rows are errors naming the file and the
row (the last three whatever `--on_error` says: the table's other rows are read by then). Their
metrics: `analysis.best_of_n`, joined in `analysis/datasets/preference.py`.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping, Sequence

from socialrm_jax.base import records
from socialrm_jax.sources import hf_reading
from socialrm_jax.datasets import registry
from socialrm_jax.datasets.adapter import PATH
from socialrm_jax.datasets.hh_rlhf import SPEAKERS, parse_transcript
from socialrm_jax.sources.reading import SourceReader
from socialrm_jax.base.errors import InputError
from socialrm_jax.base.templates import REPLY_FRAMING, PromptTemplate

# The template renders the prompt's final user turn, the one the responses answer; earlier turns
# are kept as they are.
TEMPLATES = (
    # The user's text unchanged; the template is here so every item names one.
    PromptTemplate("preference.default", 1, {"": "{text}"}),
    # The second framing of the user's text (templates.REPLY_FRAMING), which asks for a reply but
    # neither for compliance nor for caution.
    PromptTemplate("preference.framed", 1, {"": REPLY_FRAMING + "{text}"}),
)

COLUMN_ROLES = ("prompt", "chosen", "rejected", "subset", "domain", "label", "id", "num_correct",
                "margin")
RESPONSES = (records.CHOSEN, records.REJECTED)
DEFAULT_DOMAIN = "general"
WHOLE_FILE = "all"  # the split of a file's rows
PROMPT_MISMATCH = "prompt_mismatch"
TEXT, MESSAGES, TEXTS, MIXED = "text", "messages", "texts", "mixed"
LAYOUTS = {(TEXTS, TEXT): "best_of_n", (TEXTS, MESSAGES): "best_of_n",
           (TEXT, None): "hh_transcripts", (TEXT, TEXT): "strings",
           (TEXT, MESSAGES): "prompt_messages", (MESSAGES, None): "implicit_conversational",
           (MESSAGES, TEXT): "conversational", (MESSAGES, MESSAGES): "conversational"}


class BadRow(Exception):
  """A row this source cannot make an item of; its message says why."""


def column_map(text: str, available: Sequence[str], path) -> dict[str, str | None]:
  """role -> column (None: the table has none), from the columns' own names and `--columns`."""
  overrides: dict[str, str | None] = {}
  for piece in filter(None, (p.strip() for p in text.split(","))):
    role, sep, column = piece.partition("=")
    if not sep or role not in COLUMN_ROLES:
      raise InputError(f"--columns: {piece!r} is not ROLE=COLUMN with a role in "
                       f"{', '.join(COLUMN_ROLES)}")
    overrides[role] = column or None
  mapping = {role: overrides[role] if role in overrides else (role if role in available else None)
             for role in COLUMN_ROLES}
  absent = [f"{column} (for {role})" for role, column in overrides.items()
            if column is not None and column not in available]
  missing = [role for role in RESPONSES if mapping[role] is None]
  if absent or missing:
    what = (f"no column {', '.join(absent)}" if absent else
            f"missing column(s) {', '.join(missing)}")
    raise InputError(f"{what}; found {', '.join(available)} (map yours with "
                     f"--columns={missing[0] if missing else 'ROLE'}=NAME)", path)
  return mapping


def _kind(feature: Any) -> str:
  """TEXT, TEXTS (a list of texts: candidates), MESSAGES (a list, of messages as each row will
  show) or MIXED (HF's Json type)."""
  if getattr(feature, "dtype", None) in ("string", "large_string"):
    return TEXT
  if isinstance(feature, list) or type(feature).__name__ in ("List", "LargeList", "Sequence"):
    inner = feature[0] if isinstance(feature, list) else getattr(feature, "feature", None)
    return TEXTS if getattr(inner, "dtype", None) in ("string", "large_string") else MESSAGES
  return MIXED


def _csv_lists(table: hf_reading.Table, column: str) -> bool:
  """Whether a CSV table's `column` holds JSON-encoded lists (its first row tells)."""
  if table.suffix != ".csv" or not len(table.dataset):
    return False
  return _decoded_list(table.dataset[0][column]) is not None


def _decoded_list(value: Any) -> list | None:
  """A CSV field's JSON-encoded list of texts (RewardBench 2's `chosen` saved as CSV), else None
  (a response that merely starts with "[" stays text)."""
  if not (isinstance(value, str) and value.lstrip().startswith("[")):
    return None
  try:
    decoded = json.loads(value)
  except json.JSONDecodeError:
    return None
  return decoded if _texts(decoded) else None


def layout(table: hf_reading.Table, columns: Mapping[str, str | None]) -> str:
  features = table.dataset.features
  responses = _kind(features[columns["chosen"]])
  if responses == TEXT and _csv_lists(table, columns["chosen"]):
    responses = TEXTS
  prompt = None if columns["prompt"] is None else _kind(features[columns["prompt"]])
  return LAYOUTS.get((responses, prompt), MIXED)


def _messages(value: Any, what: str) -> list[dict[str, str]]:
  if not isinstance(value, list) or not value:
    raise BadRow(f"{what} should be text or a non-empty list of messages, got "
                 f"{type(value).__name__}")
  messages = []
  for message in value:
    if not (isinstance(message, dict) and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)):
      raise BadRow(f"{what} holds {message!r:.60}, not a message {{role, content}} of text")
    messages.append({"role": message["role"], "content": message["content"]})
  return messages


def _prompt(value: Any, present: bool) -> list[dict[str, str]] | None:
  if not present:
    return None
  if value is None or value == "":
    raise BadRow("missing prompt")
  return records.user_prompt(value) if isinstance(value, str) else _messages(value, "prompt")


def _conversation(value: Any, prompt: list[dict[str, str]] | None,
                  response: str) -> list[dict[str, str]]:
  """The whole conversation a row gives for one response."""
  if value is None:
    raise BadRow(f"missing {response} response")
  if isinstance(value, str):
    if prompt is not None:
      return prompt + [{"role": records.ASSISTANT, "content": value}]
    turns = parse_transcript(value)
    if turns is None:
      raise BadRow(f"{response} is text without a prompt, and not a transcript of "
                   "\"\\n\\nHuman: \" and \"\\n\\nAssistant: \" turns")
    return [{"role": SPEAKERS[speaker], "content": text} for speaker, text in turns]
  messages = _messages(value, response)
  if any(m["role"] != records.ASSISTANT for m in messages):
    return messages  # the whole conversation, its prompt inside
  if prompt is None:
    raise BadRow(f"{response} holds only assistant messages and there is no prompt column")
  return prompt + messages


def _split(conversation: list[dict[str, str]], response: str) -> tuple[list[dict], str]:
  """(prompt, response text) of a conversation that ends with the response."""
  *prompt, last = conversation
  if last["role"] != records.ASSISTANT:
    raise BadRow(f"the {response} conversation ends with a {last['role']!r} turn, not the "
                 "assistant's response")
  if not last["content"].strip():
    raise BadRow(f"empty {response} response")
  if not prompt or prompt[-1]["role"] != "user":
    raise BadRow(f"the turn before the {response} response is not a user turn")
  return prompt, last["content"]


def _domain(reader: SourceReader, value: Any) -> str:
  domain = reader.options.get("domain", DEFAULT_DOMAIN) if value in (None, "") else value
  if domain not in records.DOMAINS:
    raise BadRow(f"domain {domain!r:.40} is not one of {', '.join(records.DOMAINS)}")
  return domain


def _attributes(number: int, label: Any, row_id: Any, has_id: bool, **more: Any) -> dict:
  return {"row": number, **({"label": str(label)} if label not in (None, "") else {}),
          **({"id": row_id} if has_id else {}), **more}


def _item(reader: SourceReader, table: hf_reading.Table, columns: Mapping[str, str | None],
          number: int, row: Mapping[str, Any], subset: str) -> records.Item | None:
  """The row's item; None when its prompts differ (counted). Raises BadRow."""
  def value(role):
    return row[columns[role]] if columns[role] is not None else None

  prompt = _prompt(value("prompt"), columns["prompt"] is not None)
  responses = [value(role) for role in RESPONSES]
  if table.suffix == ".csv":  # lists arrive JSON-encoded in a CSV field
    responses = [_decoded_list(v) or v for v in responses]
  if any(_texts(v) for v in responses):
    return _best_of_n_item(reader, table, number, prompt, responses, value, subset)
  (chosen_prompt, chosen), (rejected_prompt, rejected) = (
      _split(_conversation(v, prompt, role), role) for v, role in zip(responses, RESPONSES))
  if chosen_prompt != rejected_prompt:
    reader.drop(subset, PROMPT_MISMATCH)
    return None
  domain = _domain(reader, value("domain"))
  *earlier, last = chosen_prompt  # `_split` checked that it ends with a user turn
  return records.Item(
      item_id=records.make_item_id(reader.name, *[p for p in (table.split,) if p], number),
      domain=domain, dataset=reader.name, subset=subset, split=table.split or WHOLE_FILE,
      prompt=[*earlier, {**last, "content": reader.template.render(text=last["content"])}],
      candidates=[chosen, rejected], roles=list(RESPONSES), desirability=[1, -1],
      context_condition=None, template=reader.template.name,
      attributes=_attributes(number, value("label"), value("id"), columns["id"] is not None,
                             **_margin(value("margin"))),
      pairs=records.gold_pairs([1, -1]))


def _margin(value: Any) -> dict:
  """{"margin": float} for a row with TRL's `margin`, else {}."""
  if value is None:
    return {}
  if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
    raise BadRow(f"margin {value!r:.40} is not a number")
  return {"margin": float(value)}


# -- best-of-N rows (RewardBench 2) ---------------------------------------------------------


def _texts(value: Any) -> bool:
  """Whether `value` is a list of response texts (RewardBench 2), not of messages."""
  return isinstance(value, list) and any(isinstance(v, str) for v in value)


def _described(value: Any) -> str:
  if isinstance(value, str):
    return "text"
  if isinstance(value, list):
    other = next((v for v in value if not isinstance(v, str)), None)
    return ("a list of texts" if other is None else
            f"a list holding {type(other).__name__} {other!r:.30}")
  return type(value).__name__


def _num_correct(value: Any, n_chosen: int) -> int:
  """The row's `num_correct` (default: every chosen response): the first num_correct of the
  row's responses, chosen then rejected, are the correct ones, as RewardBench 2 reads it."""
  if value in (None, ""):
    return n_chosen
  try:
    number = int(value) if not isinstance(value, (bool, float)) else None
  except ValueError:
    number = None
  if number is None:
    raise BadRow(f"num_correct should be a whole number, got {value!r:.30}")
  if number < 1:
    raise BadRow(f"num_correct is {number}: a best-of-N row needs a correct response")
  if number > n_chosen:
    raise BadRow(f"num_correct {number} is larger than the chosen list ({n_chosen} "
                 f"response{'s' if n_chosen != 1 else ''})")
  return number


def _best_of_n_item(reader: SourceReader, table: hf_reading.Table, number: int,
                    prompt: list[dict[str, str]] | None, responses: list[Any], value,
                    subset: str) -> records.Item:
  """An item of K candidates from a row whose chosen and rejected are lists of texts: the
  responses in the row's order, chosen first; the first `num_correct` correct (+1, `chosen`),
  the rest incorrect (-1, `rejected`); gold pairs every (correct, incorrect) combination."""
  for role, other, v in ((records.CHOSEN, records.REJECTED, responses[0]),
                         (records.REJECTED, records.CHOSEN, responses[1])):
    if not (isinstance(v, list) and all(isinstance(t, str) for t in v)):
      raise BadRow(f"lists of different types: {role} is {_described(v)} while {other} is a "
                   "list of texts; give both as lists of response texts")
    if not v:
      raise BadRow(f"empty {role} list: a best-of-N row needs at least one "
                   f"{'correct' if role == records.CHOSEN else 'incorrect'} response")
    if any(not t.strip() for t in v):
      raise BadRow(f"empty response in the {role} list")
  if prompt is None:
    raise BadRow("a row of response lists needs a prompt column")
  if prompt[-1]["role"] != "user":
    raise BadRow("the prompt of a row of response lists does not end with a user turn")
  candidates = [*responses[0], *responses[1]]
  correct = _num_correct(value("num_correct"), len(responses[0]))
  desirability = [1] * correct + [-1] * (len(candidates) - correct)
  row_id = value("id")
  *earlier, last = prompt
  return records.Item(
      item_id=records.make_item_id(reader.name, *[p for p in (table.split,) if p], number,
                                   *([row_id] if row_id not in (None, "") else [])),
      domain=_domain(reader, value("domain")), dataset=reader.name, subset=subset,
      split=table.split or WHOLE_FILE,
      prompt=[*earlier, {**last, "content": reader.template.render(text=last["content"])}],
      candidates=candidates, roles=[records.CHOSEN if d > 0 else records.REJECTED
                                    for d in desirability],
      desirability=desirability, context_condition=None, template=reader.template.name,
      attributes=_attributes(number, value("label"), row_id, row_id is not None,
                             num_correct=correct),
      pairs=records.gold_pairs(desirability))


class TiesIds:
  """The Ties ids (`records.TIES_ID`) of one table's best-of-N rows: every `tied:N` needs its
  reference prompt `ref:N`, whose accuracy and margins its score reads."""

  def __init__(self, path):
    self.path = path
    self.references: dict[str, int] = {}  # N -> the row of `ref:N`
    self.tied: dict[str, int] = {}  # N -> the row of `tied:N`
    # [without, with a Ties id]: subset -> its first best-of-N row of that kind
    self.first_row: tuple[dict[str, int], dict[str, int]] = ({}, {})

  def add(self, item: records.Item) -> None:
    if "num_correct" not in item.attributes:
      return
    found = records.ties_id(item.attributes.get("id"))
    self.first_row[found is not None].setdefault(item.subset, item.attributes["row"])
    if found is None:
      return
    kind, prompt = found
    seen = self.references if kind == records.REFERENCE else self.tied
    row = item.attributes["row"]
    if prompt in seen:
      raise InputError(f"Ties id '{kind}:{prompt}' given twice (rows {seen[prompt]} and {row})",
                       self.path, row)
    seen[prompt] = row

  def check(self) -> None:
    """Refuses a `tied:N` without `ref:N`, and a subset of Ties rows and other best-of-N rows
    (a subset's score is the Ties score or the best-of-N accuracy, not both)."""
    path = self.path
    plain, ties = self.first_row
    for subset in set(plain) & set(ties):
      raise InputError(f"subset {subset!r} holds Ties rows (ids ref:N / tied:N, row "
                       f"{ties[subset]}) and other best-of-N rows; give them subsets of their "
                       "own", path, plain[subset])
    orphans = sorted((row, n) for n, row in self.tied.items() if n not in self.references)
    if orphans:
      row, n = orphans[0]
      raise InputError(f"Ties id 'tied:{n}' has no reference prompt 'ref:{n}' in the file"
                       + (f" ({len(orphans)} such ids)" if len(orphans) > 1 else ""), path, row)


@registry.register("preference", templates=TEMPLATES, source=PATH, options=("domain",),
                   check_ids=False)
def convert(reader: SourceReader) -> Iterator[records.Item]:
  if reader.options.get("domain", DEFAULT_DOMAIN) not in records.DOMAINS:
    raise InputError(f"{reader.name}: domain={reader.options['domain']!r} is not one of "
                     f"{', '.join(records.DOMAINS)}")
  with hf_reading.open_tables(reader) as tables:
    for table in tables:
      columns = column_map(reader.options.get("columns", ""), table.columns, table.path)
      reader.details.setdefault("tables", []).append({
          "path": str(table.path), "rows": len(table.dataset), "layout": layout(table, columns),
          "columns": {role: column for role, column in columns.items() if column}})
      wanted = list(dict.fromkeys(c for c in columns.values() if c))
      ties = TiesIds(table.path)
      for number, row in table.rows(reader, wanted):
        subset = row[columns["subset"]] if columns["subset"] is not None else None
        subset = str(subset) if subset not in (None, "") else (table.split or WHOLE_FILE)
        reader.count_row(subset)
        try:
          item = _item(reader, table, columns, number, row, subset)
        except BadRow as e:
          reader.bad_row(table.path, number, str(e), subset)
          continue
        if item is not None:
          ties.add(item)
          yield item
      ties.check()
