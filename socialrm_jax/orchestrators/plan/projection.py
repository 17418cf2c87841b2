"""A real item set through the engine's own encoding, packing and batching, without a device:
how many batches of each shape a run of those items would compute.

The items are encoded by the run's proxy with a tokenizer (`--tokenizer`; a model folder's own,
or any other's when planning a shape without files, in which case the token counts are that
tokenizer's, and the plan says which), packed by `packing.pack_chunk` chunk by chunk and batched
by the run's `Batcher` (`engine.make_batcher`), as the engine's producer thread does.
"""

from __future__ import annotations

import collections
import types

from socialrm_jax.base import records
from socialrm_jax.orchestrators.plan.compiler import AbstractScorer
from socialrm_jax.scoring import engine, item_source, item_tokens, proxies, run_report, shards


def project(scorer: AbstractScorer, items_path: str, tokenizer_path: str,
            options: engine.ScoringOptions) -> dict:
  """A run of the items at `items_path` (a converted folder or items file) on `scorer`'s job:
  {"items", "pairs", "truncated", "tokens", "token_slots", "groups": per data-parallel group,
  its chunks and {"RxTxS": batches}}. Groups score contiguous chunks (`shards.process_chunks`)
  with their own batcher, as the engine's groups do."""
  items = item_source.ItemSource.from_table(items_path)
  templater = item_tokens.Templater(item_tokens.load_tokenizer(tokenizer_path),
                                    is_causal=scorer.step.is_causal,
                                    max_length=options.max_length, truncation=options.truncation,
                                    appended_ids=scorer.config.appended_token_ids)
  # The proxy encodes; of the model it reads only the config (a score head's label count).
  model = types.SimpleNamespace(config=scorer.config)
  proxy = proxies.make(scorer.proxy, model=model, templater=templater,
                       objective=options.objective_spec(),
                       reference={} if scorer.proxy == "implicit" else None,
                       length_normalize=options.length_normalize)
  pairs = run_report.pairs_from_table(items_path)
  num_chunks = shards.num_chunks(len(items), options.chunk_size)
  owner = {chunk: group for group in range(scorer.groups)
           for chunk in shards.process_chunks(len(items), options.chunk_size, group,
                                              scorer.groups)}
  batchers = [engine.make_batcher(options, scorer.readout, scorer.mesh)
              for _ in range(scorer.groups)]
  batches = [collections.Counter() for _ in range(scorer.groups)]
  totals: collections.Counter = collections.Counter()

  def take(group: int, out) -> None:
    for batch in out:
      batches[group]["x".join(map(str, (*batch.input_ids.shape,
                                        batch.readout_index.shape[1])))] += 1
      totals["tokens"] += batch.real_tokens
      totals["token_slots"] += batch.input_ids.size

  for index, chunk in items.chunks(options.chunk_size, range(num_chunks)):
    group = owner[index]
    encoded, _ = proxy.encode(templater, index * options.chunk_size, chunk)
    totals["items"] += len(chunk)
    totals["pairs"] += sum(len(pairs.get(str(item["item_id"]), [])) if pairs is not None
                           else len(records.item_pairs(item)) for item in chunk)
    totals["truncated"] += sum(int(enc.truncated_tokens > 0) for enc in encoded)
    writers = batchers[group].pack(encoded, is_causal=scorer.step.is_causal, chunk=index)
    take(group, batchers[group].add(writers))
    take(group, batchers[group].flush(before_chunk=index))
  for group, batcher in enumerate(batchers):
    take(group, batcher.flush())
  return {**{k: int(totals[k]) for k in ("items", "pairs", "truncated", "tokens", "token_slots")},
          "groups": [{"chunks": [c for c, g in sorted(owner.items()) if g == group],
                      "batches": dict(sorted(batches[group].items()))}
                     for group in range(scorer.groups)]}
