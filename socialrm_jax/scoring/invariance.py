"""`--check_invariance=N`: re-scores N of a run's items in other batch compositions.

A reward must not depend on which rows share its batch, which items share its row, or how long its
row is: packing.py lays several items' prefixes and branches into one row and masks them apart.
tests/scoring/test_engine_invariance.py holds that on hand-made items; this check does it on a run's
own model and items, after the run. A fixed sample of N of the items this data group scored (drawn
with `SAMPLE_SEED`, so the same items every time) is encoded and scored again through the run's own
compiled step (`Scorer`), once in each of `COMPOSITIONS`:

- `reversed`: the sample alone, in reverse order, packed together: every item shares its rows
  with other neighbours than in the run (the run packed whole chunks);
- `one item per row`: each item packed alone (its own chunk), so its rows hold nothing else and
  are the shortest length that holds it;
- `rows of max_length`: every row `--max_length` long, the run's longest row length.

Each re-scored `reward` (and `rewards` vector) is compared with the one written in the output
folder's shards; run.json's `invariance` records the sample's size, the compositions, the largest
absolute difference and where it was, the bound the tests hold for the run's dtype (`TOLERANCE`;
none is claimed for bfloat16), the batch shapes each composition used, and the compilations and
seconds the check added. The check's batches have the run's shapes (a last batch may shrink on a
CPU, as in the run); a shape the run did not use is compiled for the check and counted there,
never in the run's `compilations`.

In a multi-process run every data group checks a sample of its own chunks, and its writer compares
(the other processes of a group that spans hosts run the same batches, as every batch of the
group); run.json takes the largest difference over the groups (`run_report.merge`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from typing import Sequence

import numpy as np
from absl import logging

from socialrm_jax.base import tables
from socialrm_jax.runtime import global_arrays
from socialrm_jax.scoring import item_source, packing, shards
from socialrm_jax.scoring.chunks import Chunk, Scorer, encode_chunk

SAMPLE_SEED = 0
# The largest difference the test suite holds rewards to, per dtype (tests/test_scoring_invariance).
TOLERANCE = {"float32": 1e-5}


@dataclasses.dataclass(frozen=True)
class Composition:
  """One way to batch the sample other than the run did."""
  name: str
  reverse: bool = False          # The sample in reverse order.
  item_per_row: bool = False     # Each item packed alone (a chunk of its own).
  longest_rows: bool = False     # Every row of the longest length.


COMPOSITIONS = (
    Composition("reversed", reverse=True),
    Composition("one item per row", item_per_row=True),
    Composition("rows of max_length", reverse=True, longest_rows=True),
)


def sample_indices(chunks: Sequence[int], chunk_size: int, num_items: int,
                   count: int) -> list[int]:
  """`count` item indices (in order) drawn with `SAMPLE_SEED` from the items of `chunks`."""
  pool = [i for c in chunks for i in range(c * chunk_size, min((c + 1) * chunk_size, num_items))]
  rng = np.random.default_rng(SAMPLE_SEED)
  return sorted(int(pool[i]) for i in rng.choice(len(pool), min(count, len(pool)), replace=False))


def rescore(scorer: Scorer, items: Sequence[dict], composition: Composition
            ) -> tuple[dict[tuple[str, int], dict], list[list[int]]]:
  """The score rows of `items` batched as `composition` says, through `scorer`'s compiled step:
  ({(item_id, candidate): row}, the batch shapes [rows, row length, readout slots] used)."""
  order = list(items)[::-1] if composition.reverse else list(items)
  parts = [[item] for item in order] if composition.item_per_row else [order]
  run_batcher = scorer.batcher
  buckets = run_batcher.buckets[-1:] if composition.longest_rows else run_batcher.buckets
  batcher = packing.Batcher(buckets, run_batcher.readout, run_batcher.batch_tokens,
                            run_batcher.row_multiple, shrink_last=run_batcher.shrink_last,
                            groups_per_row=run_batcher.groups_per_row,
                            attention_length=run_batcher.attention_length)
  # The run's shapes count as handed out: a last batch shrinks only to a shape compiled already,
  # or while the shapes stay within MAX_BUCKETS, as in the run.
  batcher.shapes = set(run_batcher.shapes)
  chunks: dict[int, Chunk] = {}
  batches: list[packing.Batch] = []
  first_index = 0
  for index, part in enumerate(parts):
    chunk = encode_chunk(scorer, index, part, first_index, pairs=None)
    first_index += len(part)
    writers = batcher.pack(chunk.encoded, is_causal=scorer.step.is_causal, chunk=index)
    chunk.readouts_left = sum(len(w.readouts) for w in writers)
    chunks[index] = chunk
    batches += batcher.add(writers)
  batches += batcher.flush()
  for batch in batches:
    out = global_arrays.fetch(scorer.step(scorer.step.put(batch)))
    for index in batch.chunk_tokens():
      chunks[index].add(batch, out)
  rows = {(row["item_id"], int(row["candidate"])): row
          for chunk in chunks.values() for row in chunk.rows(scorer.proxy)}
  shapes = {(*batch.input_ids.shape, batch.readout_index.shape[1]) for batch in batches}
  return rows, sorted([int(n) for n in shape] for shape in shapes)


def written_rows(folder: str | os.PathLike, chunks: set[int]) -> dict[tuple[str, int], dict]:
  """The score rows of `chunks` as written in the output folder's shards."""
  rows = {}
  for path in sorted(pathlib.Path(folder).iterdir()):
    match = shards.SHARD_PATTERN.match(path.name)
    if match and int(match.group(2)) in chunks:
      rows.update({(row["item_id"], int(row["candidate"])): row
                   for row in tables.read_rows(path, "scores")})
  return rows


def row_difference(written: dict, rescored: dict) -> float:
  """The largest absolute difference of two rows' `reward` and `rewards` entries."""
  diff = abs(float(written["reward"]) - float(rescored["reward"]))
  if rescored.get("rewards") is not None:
    diff = max(diff, float(np.max(np.abs(np.subtract(written["rewards"], rescored["rewards"])))))
  return diff


def check(scorer: Scorer, items: item_source.ItemSource, folder: str | os.PathLike,
          *, count: int, chunk_size: int, chunks: Sequence[int], dtype: str,
          compare: bool = True) -> dict:
  """Re-scores `count` of the items of `chunks` (this group's) in every one of
  `COMPOSITIONS` and compares them with the rewards written in `folder` (only when `compare`).
  Returns run.json's `invariance`."""
  start = time.monotonic()
  compilations_before = scorer.step.compilations
  picked = sample_indices(chunks, chunk_size, len(items), count)
  sample = items.take(picked)
  written = written_rows(folder, {i // chunk_size for i in picked}) if compare else {}
  worst, worst_at = (0.0 if compare else None), None
  batch_shapes = {}
  for composition in COMPOSITIONS:
    rows, batch_shapes[composition.name] = rescore(scorer, sample, composition)
    for key, row in rows.items() if compare else ():
      if key not in written:
        raise RuntimeError(f"item {key[0]!r}, candidate {key[1]} has no written score in "
                           f"{folder} to compare with")
      diff = row_difference(written[key], row)
      if worst_at is None or diff > worst:
        worst, worst_at = diff, {"item_id": key[0], "candidate": key[1],
                                 "composition": composition.name}
  result = {"items": len(sample), "compositions": [c.name for c in COMPOSITIONS],
            "max_abs_diff": worst, "worst": worst_at, "dtype": dtype, "batch_shapes": batch_shapes,
            "tolerance": TOLERANCE.get(dtype),
            "compilations": scorer.step.compilations - compilations_before,
            "seconds": time.monotonic() - start}
  if compare:
    over = result["tolerance"] is not None and worst > result["tolerance"]
    (logging.warning if over else logging.info)(
        "invariance check: %d items in %d other batch compositions, largest difference %.3g%s",
        len(sample), len(COMPOSITIONS), worst,
        f" (over the {result['tolerance']:g} bound of {dtype}: at {worst_at})" if over else "")
  return result
