"""What one chunk of items is on its way through the compiled step: the `Scorer` (proxy,
templater, step, batch shapes) that encodes and scores it, and the `Chunk` that gathers its
readouts into score rows. The streaming run (engine.py) and the invariance check (invariance.py),
which re-scores a sample through the run's scorer in other batch compositions, both build on it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from socialrm_jax.base import records
from socialrm_jax.scoring import item_tokens, packing, proxies, run_report
from socialrm_jax.scoring import step as step_lib


class NonFiniteRewardError(RuntimeError):
  """A reward came out NaN or infinite: the run stops rather than write it."""


@dataclasses.dataclass
class Chunk:
  """One chunk of items on its way through the device: what its proxy encoded, and the readouts
  summed per encoded candidate as they come back."""
  index: int
  items: Sequence[dict]
  encoded: list[item_tokens.EncodedItem]
  plan: Any                   # How the proxy maps `encoded` back to `items`.
  stats: run_report.RunStats
  readouts_left: int = 0      # Readouts packed but not yet back from the device.
  tokens: int = 0             # Real tokens of all its rows.
  values: np.ndarray | None = None   # [candidates, W] readouts summed (W: labels or models) ...
  counts: np.ndarray | None = None   # [candidates] ... over this many readouts

  def __post_init__(self):
    self.counts = np.zeros(int(packing.candidate_offsets(self.encoded)[-1]), np.int64)

  def add(self, batch: packing.Batch, out: np.ndarray) -> None:
    """Takes the readouts of this chunk's rows of `batch` (out [B, S] or [B, S, W])."""
    rows = batch.row_chunk == self.index
    owner = batch.readout_owner[rows]
    valid = owner >= 0
    owner = owner[valid]
    out = out[rows][valid].reshape(len(owner), -1).astype(np.float64)  # [n, W]
    self.readouts_left -= len(owner)
    if self.values is None:  # W is known once a batch is back.
      self.values = np.zeros((len(self.counts), out.shape[-1]), np.float64)
    np.add.at(self.values, owner, out)
    np.add.at(self.counts, owner, 1)

  def rows(self, proxy: proxies.Proxy) -> list[dict]:
    """One row per (item, candidate); a reward that is not finite stops the run."""
    values = self.values if self.values is not None else np.zeros((len(self.counts), 1))
    out = proxy.rows(self.items, self.encoded, self.plan, values, self.counts)
    for row in out:
      if not (np.isfinite(row["reward"]) and np.all(np.isfinite(row.get("rewards", 0.0)))):
        dataset = next((it.get("dataset") for it in self.items
                        if str(it["item_id"]) == row["item_id"]), None)
        raise NonFiniteRewardError(
            f"item {row['item_id']!r} (dataset {dataset!r}), candidate {row['candidate']}: reward "
            f"is {row['reward']} (not finite); the run stops here rather than write it. Check the "
            "model's weights and --dtype (float32 rules out bf16 overflow).")
    return out


def _item_pairs(item: dict, pairs: run_report.ItemPairs | None) -> list[tuple[int, int]]:
  """The (chosen, rejected) pairs of an item: from the pairs table if given, else its labels."""
  return pairs.get(str(item["item_id"]), []) if pairs is not None else records.item_pairs(item)


@dataclasses.dataclass(frozen=True)
class Scorer:
  """What scores chunks for one model: its proxy, the templater that encodes for it, the compiled
  step and the batch shapes."""
  proxy: proxies.Proxy
  templater: item_tokens.Templater
  step: step_lib.ScoringStep
  batcher: packing.Batcher

  def pack(self, encoded: Sequence[item_tokens.EncodedItem], chunk: int) -> list[packing.RowWriter]:
    """A chunk's encoded items as rows, as its proxy lays them out (`Proxy.pack`)."""
    return self.proxy.pack(self.batcher, encoded, is_causal=self.step.is_causal, chunk=chunk)


def encode_chunk(scorer: Scorer, index: int, items: Sequence[dict], first_index: int,
                 pairs: run_report.ItemPairs | None) -> Chunk:
  """A chunk's items encoded by its proxy (one batched tokenizer call) and counted."""
  encoded, plan = scorer.proxy.encode(scorer.templater, first_index, items)
  encoded = scorer.proxy.locate_gates(encoded)
  stats = run_report.RunStats(items=len(items))
  item_pairs = [_item_pairs(item, pairs) for item in items]
  stats.pairs = sum(len(p) for p in item_pairs)
  stats.tokens_naive = scorer.proxy.tokens_naive(encoded, plan, item_pairs)
  stats.candidates = sum(len(item["candidates"]) for item in items)
  stats.truncated = sum(int(enc.truncated_tokens > 0) for enc in encoded)
  return Chunk(index, items, encoded, plan, stats)
