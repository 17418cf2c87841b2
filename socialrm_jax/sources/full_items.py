"""How many items each built-in dataset's full data converts to (`full_items.json`, counted by
tools/count_full_items.py on the files `socialrm-fetch` downloads): what an audit of the full
data would rest on, beside the bundled slices' few items."""

from __future__ import annotations

import functools
import json
import pathlib

PATH = pathlib.Path(__file__).with_name("full_items.json")


@functools.lru_cache(maxsize=1)
def full_items() -> dict[str, int]:
  """{dataset: items in its full data}."""
  recorded = json.loads(PATH.read_text(encoding="utf-8"))
  return {name: int(entry["items"]) for name, entry in recorded["datasets"].items()}
