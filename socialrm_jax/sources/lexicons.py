"""The probe's input files: its lexicons (one-word-per-line lists, LIWC `.dic` dictionaries such as
MFD 2.0, and a user's lexicon CSV), a user's prompts CSV, and rewards scored elsewhere (a long
CSV, or the study's release layout: one CSV per model, words x prompts). The formats:
docs/values.md.

The bundled ones (`socialrm_jax/bundled/lexicons`, sources and licenses in its SOURCES.md):
`warmth` and `competence` (the stereotype-content dictionary's word lists) and MFD 2.0's ten
categories. What is done with them: `orchestrators/probe.py`, `orchestrators/vocab_scan.py`.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import pathlib
import re
from typing import Iterator

from socialrm_jax.base.errors import InputError

BUNDLED = pathlib.Path(__file__).resolve().parents[1] / "bundled" / "lexicons"
STEREOTYPE_CONTENT = {"warmth": "stereotype_content/warmth.txt",
                      "competence": "stereotype_content/competence.txt"}
MFD = "mfd2/mfd2.0.dic"


def read_word_list(path: pathlib.Path) -> list[str]:
  """A lexicon of one word per line."""
  return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def read_mfd(path: pathlib.Path) -> dict[str, list[str]]:
  """MFD 2.0 (LIWC .dic: a `%`-delimited header of `id<TAB>category`, then `word<TAB>id`):
  {category: single words listed under it and under no other category}."""
  lines = path.read_text(encoding="utf-8").splitlines()
  marks = [i for i, line in enumerate(lines) if line.strip() == "%"]
  if len(marks) < 2:
    raise InputError("not a LIWC .dic file (no %-delimited category header)", path)
  names = dict(line.split("\t", 1) for line in lines[marks[0] + 1:marks[1]] if line.strip())
  entries: dict[str, set[str]] = {}
  for number, line in enumerate(lines[marks[1] + 1:], start=marks[1] + 2):
    if not line.strip():
      continue
    word, _, category = line.rpartition("\t")
    if category.strip() not in names:
      raise InputError(f"category {category.strip()!r} is not in the header", path, number)
    word = word.strip()
    if " " not in word:
      entries.setdefault(word, set()).add(names[category.strip()].strip())
  out: dict[str, list[str]] = {name.strip(): [] for name in names.values()}
  for word, categories in sorted(entries.items()):
    if len(categories) == 1:
      out[next(iter(categories))].append(word)
  return out


def read_all(folder: pathlib.Path = BUNDLED) -> dict[str, list[str]]:
  """{category: its sorted, distinct words} of the stereotype-content lists and MFD 2.0 in
  `folder`."""
  categories = {name: read_word_list(folder / file) for name, file in STEREOTYPE_CONTENT.items()}
  categories.update(read_mfd(folder / MFD))
  return {name: sorted(set(words)) for name, words in categories.items()}


# A user's probe files: prompts and lexicons as CSV, and rewards scored elsewhere. Each is read
# whole and checked row by row: a bad row is refused naming the file and its row (the header is
# row 1), since a silently dropped prompt or word would change every rank beside it.
PROMPT_COLUMNS = ("id", "text", "framing")
LEXICON_COLUMNS = ("word", "category")
LEXICON_CONTRAST = "contrast"
LONG_TABLE_COLUMNS = ("model", "family", "prompt", "word", "reward")
# Prompt ids become item ids and column headers of the study's layout: kept to one token.
_ID = re.compile(r"[A-Za-z0-9_.\-]+")


@dataclasses.dataclass(frozen=True)
class Prompt:
  id: str
  text: str
  framing: str


@dataclasses.dataclass(frozen=True)
class Lexicon:
  """A lexicon file's categories ({name: sorted distinct words}, in file order) and the contrasts
  its `contrast` column pairs them into ((first, second): first - second)."""
  name: str
  categories: dict[str, list[str]]
  contrasts: tuple[tuple[str, str], ...] = ()


def _csv_rows(path: pathlib.Path, required: tuple[str, ...],
              optional: tuple[str, ...] = ()) -> Iterator[tuple[int, dict[str, str]]]:
  """(row number, {column: stripped value}) of a CSV whose header holds `required` and perhaps
  `optional` columns and no others; the header is row 1."""
  if not path.is_file():
    raise InputError("no such file", path)
  with path.open(encoding="utf-8", newline="") as f:
    reader = csv.reader(f)
    header = [h.strip() for h in next(reader, [])]
    missing = [c for c in required if c not in header]
    unknown = [c for c in header if c not in required + optional]
    if missing or unknown or len(set(header)) != len(header):
      raise InputError(f"the header must be {','.join(required)}"
                       + (f" (and optionally {','.join(optional)})" if optional else "")
                       + f"; got {','.join(header) or 'nothing'}", path, 1)
    for number, row in enumerate(reader, start=2):
      if not any(cell.strip() for cell in row):
        continue
      if len(row) != len(header):
        raise InputError(f"{len(row)} fields where the header has {len(header)}", path, number)
      yield number, {c: cell.strip() for c, cell in zip(header, row)}


def read_prompts(path: pathlib.Path) -> list[Prompt]:
  """A prompts file: CSV with the header `id,text,framing`, one prompt a row. `id`: letters,
  digits, `_.-`, distinct; `text`: the user turn; `framing`: a label such as `positive` or
  `negative` (the study's analysis compares families per category and framing)."""
  prompts, seen = [], set()
  for number, row in _csv_rows(path, PROMPT_COLUMNS):
    if not _ID.fullmatch(row["id"]):
      raise InputError(f"id {row['id']!r} must be letters, digits, '_', '.' or '-'", path,
                       number)
    if row["id"] in seen:
      raise InputError(f"id {row['id']!r} is given twice", path, number)
    for column in ("text", "framing"):
      if not row[column]:
        raise InputError(f"the {column} is empty", path, number)
    seen.add(row["id"])
    prompts.append(Prompt(row["id"], row["text"], row["framing"]))
  if not prompts:
    raise InputError("no prompts (a header and no rows)", path)
  return prompts


def read_lexicon(path: pathlib.Path) -> Lexicon:
  """A lexicon file: CSV with the header `word,category` and optionally `contrast`, one (word,
  category) a row. A word is one word (no spaces) and may sit in several categories; a row's
  `contrast` names the category its own is contrasted with (`communion,...,agency` gives the
  contrast communion - agency): every row of a category that gives one gives the same, and it
  names a category of the file."""
  categories: dict[str, set[str]] = {}
  contrast: dict[str, tuple[str, int]] = {}
  for number, row in _csv_rows(path, LEXICON_COLUMNS, (LEXICON_CONTRAST,)):
    word, category, other = row["word"], row["category"], row.get(LEXICON_CONTRAST, "")
    if not word or not category:
      raise InputError(f"the {'word' if not word else 'category'} is empty", path, number)
    if any(c.isspace() for c in word):
      raise InputError(f"{word!r} is not one word (the probe scores one-word answers)", path,
                       number)
    if word in categories.get(category, ()):
      raise InputError(f"{word!r} is listed twice under {category!r}", path, number)
    categories.setdefault(category, set()).add(word)
    if other:
      if other == category:
        raise InputError(f"category {category!r} is contrasted with itself", path, number)
      if contrast.setdefault(category, (other, number))[0] != other:
        raise InputError(f"category {category!r} is contrasted with {other!r} here and with "
                         f"{contrast[category][0]!r} in row {contrast[category][1]}", path, number)
  if not categories:
    raise InputError("no words (a header and no rows)", path)
  for category, (other, number) in contrast.items():
    if other not in categories:
      raise InputError(f"contrast {other!r} is no category of the file", path, number)
  return Lexicon(path.stem, {c: sorted(ws) for c, ws in categories.items()},
                 tuple((c, other) for c, (other, _) in contrast.items()))


def _reward(value: str, path: pathlib.Path, number: int, what: str) -> float:
  try:
    reward = float(value)
  except ValueError:
    raise InputError(f"{what}: {value!r} is not a number", path, number) from None
  if not math.isfinite(reward):
    raise InputError(f"{what}: {value!r} is not finite", path, number)
  return reward


def read_long_rewards(path: pathlib.Path) -> dict[str, tuple[str, dict[tuple[str, str], float]]]:
  """A long rewards table: CSV with the header `model,family,prompt,word,reward`, one (model,
  prompt, word) a row; `family` may be empty, and is one per model. -> {model: (family,
  {(prompt id, word): reward})}, models in file order."""
  out: dict[str, tuple[str, dict[tuple[str, str], float]]] = {}
  for number, row in _csv_rows(path, LONG_TABLE_COLUMNS):
    for column in ("model", "prompt", "word"):
      if not row[column]:
        raise InputError(f"the {column} is empty", path, number)
    family, rewards = out.setdefault(row["model"], (row["family"], {}))
    if row["family"] != family:
      raise InputError(f"model {row['model']!r} has family {row['family']!r} here and "
                       f"{family!r} before", path, number)
    key = (row["prompt"], row["word"])
    if key in rewards:
      raise InputError(f"({row['model']}, {key[0]}, {key[1]}) is given twice", path, number)
    rewards[key] = _reward(row["reward"], path, number, "reward")
  if not out:
    raise InputError("no rewards (a header and no rows)", path)
  return out


def read_study_rewards(path: pathlib.Path) -> dict[tuple[str, str], float]:
  """One model's rewards in the study's release layout: a CSV whose first column holds the words
  (its header any name, `word` say) and whose other columns are one prompt each, headed by the
  prompt's id. -> {(prompt id, word): reward}."""
  if not path.is_file():
    raise InputError("no such file", path)
  out: dict[tuple[str, str], float] = {}
  with path.open(encoding="utf-8", newline="") as f:
    reader = csv.reader(f)
    header = [h.strip() for h in next(reader, [])]
    prompts = header[1:]
    if not prompts or not all(prompts) or len(set(prompts)) != len(prompts):
      raise InputError("the header must be a word column, then one distinct prompt id a "
                       f"column; got {','.join(header) or 'nothing'}", path, 1)
    for number, row in enumerate(reader, start=2):
      if not any(cell.strip() for cell in row):
        continue
      if len(row) != len(header):
        raise InputError(f"{len(row)} fields where the header has {len(header)}", path, number)
      word = row[0].strip()
      if not word or (prompts[0], word) in out:
        raise InputError(f"word {word!r} is empty or given twice", path, number)
      for prompt, cell in zip(prompts, row[1:]):
        out[(prompt, word)] = _reward(cell.strip(), path, number, f"column {prompt}")
  if not out:
    raise InputError("no words (a header and no rows)", path)
  return out


def is_long_table(path: pathlib.Path) -> bool:
  """Whether a rewards CSV is in the long layout (its header is `model,family,prompt,word,
  reward`) rather than the study's."""
  with path.open(encoding="utf-8", newline="") as f:
    header = next(csv.reader(f), [])
  return sorted(h.strip() for h in header) == sorted(LONG_TABLE_COLUMNS)
