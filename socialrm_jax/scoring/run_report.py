"""`run.json`: what a scoring run did and what it cost.

`tokens_computed` counts the real (non-padding) tokens that went through the model;
`padding_fraction` the share of padding among all row slots the model computed; `tokens_naive`
what a scorer computes that runs every preference pair's chosen and rejected as two separate full
sequences (pairs from the pairs table beside the items when there is one, else from each item's
desirability and roles, as the converter builds them). `pairs_per_second` counts those pairs.

Every process writes `run-<process>.json`; with one process that is also `run.json`; with several,
process 0 waits for the others' files and writes `run.json` with the sums.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import pathlib
import time

from absl import logging

from socialrm_jax import tables
from socialrm_jax.errors import InputError

# Directional and control pairs (SPEC section 3), by candidate role: (chosen, rejected).
ROLE_PAIRS = (("anti_stereotype", "stereotype"), ("stereotype", "unrelated"),
              ("anti_stereotype", "unrelated"))
WAIT_FOR_PROCESSES_SECONDS = 600.0


def item_pairs(item: dict) -> list[tuple[int, int]]:
  """(chosen, rejected) candidate indices of the pairs the converter derives from `item`."""
  desirability = list(item.get("desirability") or [])
  good = [i for i, d in enumerate(desirability) if d == 1]
  bad = [i for i, d in enumerate(desirability) if d == -1]
  pairs = list(itertools.product(good, bad))
  roles = list(item.get("roles") or [])
  for chosen_role, rejected_role in ROLE_PAIRS:
    if chosen_role in roles and rejected_role in roles:
      pair = (roles.index(chosen_role), roles.index(rejected_role))
      if pair not in pairs:
        pairs.append(pair)
  return pairs


def pairs_from_table(items_path) -> dict[str, list[tuple[int, int]]] | None:
  """item_id -> its pairs, from the pairs table beside the items, when there is one."""
  path = pathlib.Path(items_path)
  folder = path if path.is_dir() else path.parent
  try:
    rows = tables.read_rows(folder, "pairs")
  except InputError:
    return None
  out: dict[str, list[tuple[int, int]]] = {}
  for row in rows:
    out.setdefault(str(row["item_id"]), []).append(
        (int(row["chosen_index"]), int(row["rejected_index"])))
  return out


@dataclasses.dataclass
class RunStats:
  """Counters one process accumulates while scoring."""
  items: int = 0
  candidates: int = 0
  pairs: int = 0
  tokens_computed: int = 0
  token_slots: int = 0        # Real and padding tokens of every row the model ran.
  tokens_naive: int = 0
  truncated: int = 0
  batches: int = 0
  skipped_items: int = 0      # Already scored by an earlier run into the folder.

  def add(self, other: "RunStats") -> None:
    for field in dataclasses.fields(self):
      setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


def report(stats: RunStats, *, wall_seconds: float, compilations: int, devices: int, mesh: str,
           model: str, proxy: str, process_count: int, extra: dict | None = None) -> dict:
  padding = stats.token_slots - stats.tokens_computed
  seconds = max(wall_seconds, 1e-9)
  return {
      "wall_seconds": wall_seconds,
      "pairs_per_second": stats.pairs / seconds,
      "candidates_per_second": stats.candidates / seconds,
      "tokens_per_second": stats.tokens_computed / seconds,
      "tokens_computed": stats.tokens_computed,
      "tokens_naive": stats.tokens_naive,
      "tokens_computed_over_naive": (stats.tokens_computed / stats.tokens_naive
                                     if stats.tokens_naive else None),
      "padding_fraction": padding / stats.token_slots if stats.token_slots else 0.0,
      "token_slots": stats.token_slots,
      "compilations": compilations,
      "truncated": stats.truncated,
      "items": stats.items,
      "items_resumed": stats.skipped_items,
      "candidates": stats.candidates,
      "pairs": stats.pairs,
      "batches": stats.batches,
      "devices": devices,
      "mesh": mesh,
      "process_count": process_count,
      "model": model,
      "proxy": proxy,
      **(extra or {}),
  }


SUMMED = ("pairs", "candidates", "items", "items_resumed", "tokens_computed", "tokens_naive",
          "token_slots", "truncated", "batches", "compilations", "devices")


def write(folder, process: int, process_count: int, run: dict) -> None:
  folder = pathlib.Path(folder)
  tables.atomic_write_json(folder / f"run-{process:05d}.json", run)
  if process_count == 1:
    tables.atomic_write_json(folder / "run.json", run)
  elif process == 0:
    _merge(folder, process_count, run)


def _merge(folder: pathlib.Path, process_count: int, own: dict) -> None:
  """Process 0's run.json over every process: counts summed, the slowest wall time."""
  paths = [folder / f"run-{p:05d}.json" for p in range(process_count)]
  deadline = time.monotonic() + WAIT_FOR_PROCESSES_SECONDS
  while not all(p.exists() for p in paths):
    if time.monotonic() > deadline:
      logging.warning("run.json not written: not every process wrote its run-<process>.json")
      return
    time.sleep(0.5)
  runs = [json.loads(p.read_text()) for p in paths]
  merged = dict(own)
  for key in SUMMED:
    merged[key] = sum(r[key] for r in runs)
  merged["wall_seconds"] = max(r["wall_seconds"] for r in runs)
  seconds = max(merged["wall_seconds"], 1e-9)
  merged["pairs_per_second"] = merged["pairs"] / seconds
  merged["candidates_per_second"] = merged["candidates"] / seconds
  merged["tokens_per_second"] = merged["tokens_computed"] / seconds
  slots = merged["token_slots"]
  merged["padding_fraction"] = 1 - merged["tokens_computed"] / slots if slots else 0.0
  merged["tokens_computed_over_naive"] = (merged["tokens_computed"] / merged["tokens_naive"]
                                          if merged["tokens_naive"] else None)
  merged["mesh_per_process"] = own["mesh"]
  tables.atomic_write_json(folder / "run.json", merged)
