"""The probe's lexicons as files: one-word-per-line lists and LIWC `.dic` dictionaries (MFD 2.0).

The bundled ones (`socialrm_jax/bundled/lexicons`, sources and licenses in its SOURCES.md):
`warmth` and `competence` (the stereotype-content dictionary's word lists) and MFD 2.0's ten
categories. What is done with them: `orchestrators/probe.py`, `orchestrators/vocab_scan.py`.
"""

from __future__ import annotations

import pathlib

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
