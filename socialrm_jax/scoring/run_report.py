"""`run.json`: what a scoring run did and what it cost.

`tokens_computed` counts the real (non-padding) tokens that went through the model;
`padding_fraction` the share of padding among all row slots the model computed; `tokens_naive`
what a scorer computes that runs every preference pair's chosen and rejected as two separate full
sequences (pairs from the pairs table beside the items when there is one, else the pairs each
item's labels and roles imply, `records.item_pairs`). `pairs_per_second` counts those pairs.
`manifest` says what the scores came from (run_manifest.py), `invariance` what
`--check_invariance` found (invariance.py).

Every process writes `run-<process>.json`; with one process that is also `run.json`; with several,
all processes meet at a barrier once their files are written (so a rerun never merges an earlier
run's files), and process 0 writes `run.json` from the summed counts.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import pathlib

import numpy as np

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.runtime import distributed
from socialrm_jax.scoring import item_source

# The pairs table's columns the counts read.
_PAIR_COLUMNS = ("item_id", "chosen_index", "rejected_index")


class ItemPairs:
  """item_id -> its (chosen, rejected) pairs, for every item of a pairs table, as arrays: each
  pair's item as the 64-bit hash of its id (`item_source.id_hash`, sorted) and its two indices,
  20 bytes a pair, so a million items' pairs cost tens of MB, not the gigabyte a dict of lists
  would. Two ids sharing a hash (~2^-64 a pair of ids) would share their pairs: only the run's
  pair counts read them."""

  def __init__(self, hashes: np.ndarray, chosen: np.ndarray, rejected: np.ndarray):
    order = np.argsort(hashes, kind="stable")  # an item's pairs stay in table order
    self.hashes = hashes[order]    # [P] uint64, ascending
    self.chosen = chosen[order]    # [P] int32
    self.rejected = rejected[order]  # [P] int32

  def get(self, item_id: str, default: list | None = None) -> list[tuple[int, int]]:
    """The item's pairs in table order (`default` when it has none)."""
    key = np.uint64(item_source.id_hash(str(item_id)))
    start = np.searchsorted(self.hashes, key, side="left")
    stop = np.searchsorted(self.hashes, key, side="right")
    if start == stop:
      return [] if default is None else default
    return list(zip(self.chosen[start:stop].tolist(), self.rejected[start:stop].tolist()))


def pairs_from_table(items_path) -> ItemPairs | None:
  """Every item's pairs (`ItemPairs`), from the pairs table beside the items, when there is one;
  read in batches, so the pairs' texts never stay."""
  path = pathlib.Path(items_path)
  folder = path if path.is_dir() else path.parent
  try:
    tables.table_files(folder, "pairs")
  except InputError:
    return None
  hashes, chosen, rejected = [], [], []
  rows = tables.iter_rows(folder, "pairs", _PAIR_COLUMNS)
  while batch := list(itertools.islice(rows, tables.BATCH_ROWS)):
    hashes.append(np.fromiter((item_source.id_hash(str(r["item_id"])) for r in batch),
                              np.uint64, len(batch)))
    chosen.append(np.fromiter((int(r["chosen_index"]) for r in batch), np.int32, len(batch)))
    rejected.append(np.fromiter((int(r["rejected_index"]) for r in batch), np.int32,
                                len(batch)))
  return ItemPairs(*(np.concatenate(parts) if parts else np.zeros(0, dtype)
                     for parts, dtype in ((hashes, np.uint64), (chosen, np.int32),
                                          (rejected, np.int32))))


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
  items_resumed: int = 0      # Already scored by an earlier run into the folder.

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
      "items_resumed": stats.items_resumed,
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


def write(folder, process: int, process_count: int, run: dict, stats: RunStats, *,
          is_writer: bool = True, nothing_done: bool = False, amend: dict | None = None) -> dict:
  """Writes the run file of data-parallel group `process` (of `process_count`); with several
  groups, waits at a barrier for the others' (every JAX process joins it, writer or not) and
  lets group 0 write `run.json` over all of them. Returns the group's run as recorded.

  `nothing_done`: every chunk of the group was already scored. Its earlier run file then stays as
  it is, so rerunning a complete folder changes nothing, `run.json` included, except for `amend`:
  fields set in the run file either way (an invariance check of a complete folder).
  """
  folder = pathlib.Path(folder)
  own = folder / f"run-{process:05d}.json"
  keep = nothing_done and own.exists()
  if keep:
    run = json.loads(own.read_text())
    stats = RunStats(**run.pop("counts"))
  changed = not keep or bool(amend)
  run = {**run, **(amend or {})}
  if is_writer and changed:
    tables.atomic_write_json(own, {**run, "counts": dataclasses.asdict(stats)})
  if process_count == 1:
    if is_writer and (changed or not (folder / "run.json").exists()):
      tables.atomic_write_json(folder / "run.json", run)
    return run
  distributed.barrier("run files written")
  if process == 0 and is_writer:
    tables.atomic_write_json(folder / "run.json", merge(folder, process_count, run))
  return run


def merge(folder: pathlib.Path, process_count: int, own: dict) -> dict:
  """run.json over every process's run file: counts summed, the slowest wall time, rates anew."""
  runs = [json.loads((folder / f"run-{p:05d}.json").read_text()) for p in range(process_count)]
  total = RunStats()
  for run in runs:
    total.add(RunStats(**run["counts"]))
  fixed = {k: v for k, v in own.items() if k not in report(RunStats(), wall_seconds=0,
                                                               compilations=0, devices=0, mesh="",
                                                               model="", proxy="",
                                                               process_count=0)}
  checks = [r["invariance"] for r in runs if r.get("invariance")]
  if checks:
    fixed["invariance"] = merge_invariance(checks)
  return report(total, wall_seconds=max(r["wall_seconds"] for r in runs),
                compilations=sum(r["compilations"] for r in runs),
                devices=sum(r["devices"] for r in runs), mesh=own["mesh"], model=own["model"],
                proxy=own["proxy"], process_count=process_count, extra=fixed)


def merge_invariance(checks: list[dict]) -> dict:
  """The data groups' invariance checks (invariance.py) as one: items and compilations summed,
  the largest difference and where it was, the slowest group's seconds."""
  compared = [c for c in checks if c.get("max_abs_diff") is not None]
  worst = max(compared, key=lambda c: c["max_abs_diff"]) if compared else checks[0]
  return {**worst, "items": sum(c["items"] for c in checks),
          "compilations": sum(c["compilations"] for c in checks),
          "seconds": max(c["seconds"] for c in checks), "groups": len(checks)}
