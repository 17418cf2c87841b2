"""Counts the items each dataset's full data converts to, for the report's "what the full datasets
would show" (socialrm_jax/sources/full_items.json).

  python tools/count_full_items.py --data_dir=data/full [--write]

Converts every built-in dataset found under --data_dir (a folder `socialrm-fetch --datasets=all`
filled: the files of the fetch manifest) with its default template, as an audit would, and
prints the items per dataset. With --write, the counts go into full_items.json, each with how it
was counted; a dataset whose folder is missing keeps its recorded count. BBQ's counts are per
category file (`--bbq_rows` adds the rows of category files the folder lacks, one item per row as
every BBQ row converts to one item).
"""

from __future__ import annotations

import json
import pathlib
import sys

from absl import app, flags

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# pylint: disable=wrong-import-position
from socialrm_jax.base import tables
from socialrm_jax.datasets import registry
from socialrm_jax.orchestrators import convert
from socialrm_jax.sources import full_items

_DATA_DIR = flags.DEFINE_string("data_dir", None, "The fetched datasets' folder.", required=True)
_WRITE = flags.DEFINE_bool("write", False, f"Write the counts into {full_items.PATH.name}.")
_BBQ_ROWS = flags.DEFINE_list("bbq_rows", [], "CATEGORY=ROWS of BBQ category files the folder "
                              "lacks, added as one item per row.")


def main(argv):
  del argv
  recorded = json.loads(full_items.PATH.read_text())
  counted = {}
  for name in registry.BUILT_IN:
    folder = pathlib.Path(_DATA_DIR.value) / name
    if name == registry.GENERIC or not folder.is_dir():
      continue
    report = convert.convert_all(_DATA_DIR.value, name).report["datasets"][name]
    items, how = report["items"], "converted from the fetched files by tools/count_full_items.py"
    if name == "bbq" and _BBQ_ROWS.value:
      extra = {k: int(v) for k, v in (entry.split("=") for entry in _BBQ_ROWS.value)}
      items += sum(extra.values())
      how += (f" ({len(report.get('subsets', {}))} category files), plus one item per row of the "
              "category files that folder lacked, by their row counts in the BBQ release: "
              + ", ".join(f"{k} {v:,}" for k, v in extra.items()))
    counted[name] = {"items": items, "how": how}
    print(f"{name}: {items:,} items")
  if _WRITE.value:
    recorded["datasets"].update(counted)
    tables.atomic_write_json(full_items.PATH, recorded)


if __name__ == "__main__":
  app.run(main)
