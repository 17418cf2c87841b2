"""Cuts the bundled suite (`socialrm_jax/bundled/`) out of the full original dataset files.

  python tools/bundle_suite.py --source_dir=PATH/TO/data --output_dir=socialrm_jax/bundled

Maintainers run this once when the bundled suite changes; the package never reads the full
files. Every kept row is the source's own bytes (lines, or CSV records with their quoted
newlines), in source order, so the adapters read the slice exactly as they read the original.
Rows are taken in whole source groups (BBQ's 4 variants of a question, an ETHICS deontology
scenario run, a justice group of 4, a virtue group of 5, a Moral Stories story) at evenly spaced
places through each file, so every subset, category, type and context condition is present.
"""

from __future__ import annotations

import csv
import gzip
import pathlib
import shutil
from typing import Callable, Iterator

from absl import app, flags

from socialrm_jax.datasets import registry
from socialrm_jax.datasets import ethics

_SOURCE_DIR = flags.DEFINE_string("source_dir", None, "The full dataset folders.", required=True)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "socialrm_jax/bundled", "Where the slice goes.")

# Groups kept per file: the suite must be scored by the demo on 2 CPU cores in minutes.
BBQ_GROUPS_PER_CATEGORY = 5  # x 4 rows
CROWS_ROWS = 120
STEREOSET_ROWS = 120
HH_ROWS_PER_SUBSET = 30
XSTEST_EVERY_NTH_PROMPT = 15
ETHICS_GROUPS_PER_FILE = 8
MORAL_STORIES_STORIES_PER_FILE = 20


def csv_records(text: str) -> Iterator[tuple[list[str], str]]:
  """(fields, raw text) per CSV record; the raw text keeps quoted newlines byte for byte."""
  consumed: list[str] = []

  def lines():
    for line in text.splitlines(keepends=True):
      consumed.append(line)
      yield line

  for fields in csv.reader(lines()):
    raw = "".join(consumed)
    consumed.clear()
    yield fields, raw


def groups(records: list, key: Callable[[int, object], object]) -> list[list]:
  """Splits records into runs of consecutive records with the same key."""
  out: list[list] = []
  last = object()
  for i, r in enumerate(records):
    k = key(i, r)
    if not out or k != last:
      out.append([])
    out[-1].append(r)
    last = k
  return out


def spread(runs: list[list], n: int) -> list:
  """n groups at evenly spaced places (all if fewer), flattened, in source order."""
  if len(runs) <= n:
    picked = runs
  else:
    picked = [runs[(i * len(runs)) // n] for i in range(n)]
  return [r for run in picked for r in run]


def write(path: pathlib.Path, text: str) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  if path.suffix == ".gz":
    path.write_bytes(gzip.compress(text.encode(), mtime=0))
  else:
    path.write_text(text, encoding="utf-8", newline="")


def read(path: pathlib.Path) -> str:
  data = path.read_bytes()
  return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")


def cut_csv(src: pathlib.Path, dst: pathlib.Path, n_groups: int, key, header: bool = True):
  records = list(csv_records(read(src)))
  head, body = (records[:1], records[1:]) if header else ([], records)
  kept = spread(groups(body, key), n_groups)
  write(dst, "".join(raw for _, raw in head + kept))


def cut_lines(src: pathlib.Path, dst: pathlib.Path, n_groups: int, key):
  lines = read(src).splitlines(keepends=True)
  write(dst, "".join(spread(groups(lines, key), n_groups)))


def main(argv):
  del argv
  src = pathlib.Path(_SOURCE_DIR.value)
  out = pathlib.Path(_OUTPUT_DIR.value)
  for name in registry.folder_names():
    shutil.rmtree(out / name, ignore_errors=True)

  for f in sorted((src / "bbq").rglob("*.jsonl")):
    cut_lines(f, out / f.relative_to(src), BBQ_GROUPS_PER_CATEGORY, lambda i, r: i // 4)
  f = src / "crows_pairs/crows_pairs_anonymized.csv"
  cut_csv(f, out / f.relative_to(src), CROWS_ROWS, lambda i, r: i)
  f = src / "stereoset/test.jsonl"
  cut_lines(f, out / f.relative_to(src), STEREOSET_ROWS, lambda i, r: i)
  for f in sorted((src / "hh_rlhf").rglob("test.jsonl.gz")):
    cut_lines(f, out / f.relative_to(src), HH_ROWS_PER_SUBSET, lambda i, r: i)

  # XSTest: every n-th prompt id (ids run through all types, 25 per type), and the completions
  # whose id (`v2-<prompt id>`) names a kept prompt, so reworded-prompt completions stay too.
  f = src / "xstest/xstest_prompts.csv"
  records = list(csv_records(read(f)))
  kept_ids = {r[0] for r, _ in records[1:] if int(r[0]) % XSTEST_EVERY_NTH_PROMPT == 1}
  write(out / f.relative_to(src),
        records[0][1] + "".join(raw for r, raw in records[1:] if r[0] in kept_ids))
  for f in sorted((src / "xstest").rglob("xstest_v2_completions_*.csv")):
    records = list(csv_records(read(f)))
    write(out / f.relative_to(src), records[0][1] + "".join(
        raw for r, raw in records[1:] if r[0].removeprefix("v2-") in kept_ids))

  ethics_keys = {
      "commonsense": lambda i, r: i,
      "deontology": lambda i, r: r[0][1],  # runs of the same scenario
      "justice": lambda i, r: i // ethics.JUSTICE_GROUP,
      "virtue": lambda i, r: i // ethics.VIRTUE_GROUP,
      "utilitarianism": lambda i, r: i,
  }
  for task, key in ethics_keys.items():
    for f in sorted((src / "ethics" / task).glob("*.csv")):
      cut_csv(f, out / f.relative_to(src), ETHICS_GROUPS_PER_FILE, key,
              header=task != "utilitarianism")
  shutil.copy(src / "ethics/README.txt", out / "ethics/README.txt")

  for f in sorted((src / "moral_stories").rglob("*.jsonl")):
    cut_lines(f, out / f.relative_to(src), MORAL_STORIES_STORIES_PER_FILE, lambda i, r: i // 2)


if __name__ == "__main__":
  app.run(main)
