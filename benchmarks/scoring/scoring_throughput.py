"""Scoring throughput: the packed, prefix-shared engine against a naive pairwise scorer.

  JAX_PLATFORMS=cpu python -m benchmarks.scoring.scoring_throughput --model=smollm2 --limit=48

Items default to the bundled BBQ slice (converted on the fly). Both scorers are compiled by an
untimed warm-up pass over the same items, then timed:
- engine: `scoring.engine` (prefix sharing, several items per row, length buckets);
- naive: every preference pair's chosen and rejected as two full sequences, right-padded to the
  same length buckets, through `RewardModel.__call__` / `token_logprobs` (what `tokens_naive` in
  run.json counts).
Prints one JSON object: pairs/s, tokens/s, token counts, and the speed-up.
"""

from __future__ import annotations

import json
import pathlib
import time

import jax
import numpy as np
from absl import flags

import socialrm_jax
from socialrm_jax.base import records, tables
from socialrm_jax.main import command
from socialrm_jax.models import default_model
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.orchestrators import convert
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.scoring import engine, item_tokens, packing

_MODEL = flags.DEFINE_string("model", "smollm2", "Model path (see socialrm_jax.main.score --model).")
_ITEMS = flags.DEFINE_string("items", None, "Items (default: the bundled BBQ slice).")
_LIMIT = flags.DEFINE_integer("limit", 48, "Items to score.")
_MAX_LENGTH = flags.DEFINE_integer("max_length", 512, "Longest sequence.")
_TOKENS_PER_BATCH = flags.DEFINE_integer("tokens_per_batch", 4096, "Token slots per batch.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Model dtype.")
_MESH = flags.DEFINE_string("mesh", None, "Mesh, e.g. data:8,model:1.")


def _items(path: str | None, limit: int) -> list[dict]:
  if path is None:
    converted = convert.convert_all(pathlib.Path(socialrm_jax.__file__).parent / "bundled",
                                        ["bbq"])
    return converted.items[:limit]
  return engine.select_items(tables.read_rows(path, "items"), None, limit)


def time_engine(model, mesh, items, options: engine.ScoringOptions) -> dict:
  def one_pass():
    chunks = []
    stats = engine.stream_scores(scorer, iter([(0, items, 0)]), pairs=None,
                                 on_chunk=chunks.append)
    for chunk in chunks:
      stats.add(chunk.stats)
    return stats

  scorer = engine.make_scorer(model, mesh, options)
  one_pass()  # Compiles.
  start = time.perf_counter()
  stats = one_pass()
  seconds = time.perf_counter() - start
  return {"seconds": seconds, "pairs_per_second": stats.pairs / seconds,
          "tokens_computed": stats.tokens_computed, "token_slots": stats.token_slots,
          "tokens_naive": stats.tokens_naive, "compilations": scorer.step.compilations,
          "real_tokens_per_second": stats.tokens_computed / seconds}


def time_naive(model, items, options: engine.ScoringOptions) -> dict:
  templater = item_tokens.Templater(item_tokens.load_tokenizer(model.tokenizer_path),
                                    is_causal=model.is_causal, max_length=options.max_length)
  sequences, pairs = [], 0
  for i, item in enumerate(items):
    encoded = templater.encode(i, item)
    for chosen, rejected in records.item_pairs(item):
      sequences += [encoded.sequences[chosen], encoded.sequences[rejected]]
      pairs += 1
  sequences.sort(key=len)
  buckets = packing.length_buckets(options.max_length, options.smallest_bucket)
  batches = []
  # Batches of equal-bucket sequences, `tokens_per_batch // bucket` rows each, right-padded.
  by_bucket: dict[int, list[np.ndarray]] = {}
  for seq in sequences:
    by_bucket.setdefault(next(b for b in buckets if b >= len(seq)), []).append(seq)
  for bucket, seqs in sorted(by_bucket.items()):
    rows = packing.rows_per_batch(bucket, options.tokens_per_batch, 1)
    for start in range(0, len(seqs), rows):
      ids = np.zeros((rows, bucket), np.int32)
      mask = np.zeros((rows, bucket), np.int32)
      for r, seq in enumerate(seqs[start:start + rows]):
        ids[r, :len(seq)], mask[r, :len(seq)] = seq, 1
      mask[len(seqs[start:start + rows]):, 0] = 1  # Padding rows hold one token: no empty row.
      batches.append((ids, mask))
  call = model if model.config.head == "score" else model.token_logprobs

  def one_pass():
    outs = [call(ids, mask) for ids, mask in batches]
    jax.block_until_ready(outs)

  one_pass()  # Compiles.
  start = time.perf_counter()
  one_pass()
  seconds = time.perf_counter() - start
  naive_tokens = sum(len(s) for s in sequences)
  return {"seconds": seconds, "pairs_per_second": pairs / seconds, "tokens_naive": naive_tokens,
          "token_slots": sum(ids.size for ids, _ in batches)}


def main(argv):
  del argv
  mesh = mesh_lib.make_mesh(_MESH.value)
  model = load_reward_model(default_model.resolve_model_path(_MODEL.value), dtype=_DTYPE.value,
                            mesh=mesh)
  items = _items(_ITEMS.value, _LIMIT.value)
  options = engine.ScoringOptions(max_length=_MAX_LENGTH.value,
                                  tokens_per_batch=_TOKENS_PER_BATCH.value)
  packed = time_engine(model, mesh, items, options)
  naive = time_naive(model, items, options)
  print(json.dumps({
      "model": _MODEL.value, "items": len(items), "devices": mesh.devices.size,
      "platform": jax.devices()[0].platform, "mesh": mesh_lib.describe(mesh),
      "engine": packed, "naive": naive,
      "speedup": naive["seconds"] / packed["seconds"],
      "tokens_computed_over_naive": packed["tokens_computed"] / packed["tokens_naive"],
  }, indent=2))


if __name__ == "__main__":
  command.run_command("benchmarks.scoring.scoring_throughput", main)
