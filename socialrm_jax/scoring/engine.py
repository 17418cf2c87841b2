"""The scoring engine: one jit-compiled function over a mesh, and the streaming loop around it.

`score_items` takes a loaded `RewardModel` and the items, and for each chunk of items: encodes them
(templating.py), packs them into fixed-shape batches (packing.py), runs the one compiled scoring
function on each batch, turns its readouts into one reward per (item, candidate), checks they are
finite, and writes the chunk's shard (shards.py). Chunks already on disk are skipped (resume).

The scoring function builds the packed attention mask from [B, T] segment and branch ids, runs the
model, gathers the hidden states at the readout positions [B, S], and only then applies the head:
the score head (rewards, [B, S, L]) or the LM head with a log-softmax (the log-probability of each
readout's target token, [B, S]).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
from absl import logging
from flax import nnx

from socialrm_jax import default_model, tables
from socialrm_jax.errors import InputError
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import mesh as mesh_lib
from socialrm_jax.scoring import packing, progress, run_report, shards, templating

PROXIES = ("none", "loglik")
# Readouts whose LM-head logits are made at once (memory: LOGLIK_BLOCK x vocab floats).
LOGLIK_BLOCK = 1024
BATCH_FIELDS = ("input_ids", "positions", "segment_ids", "branch_ids", "token_type_ids",
                "readout_index", "readout_target")


class NonFiniteRewardError(RuntimeError):
  """A reward came out NaN or infinite: the run stops rather than write it."""


@dataclasses.dataclass(frozen=True)
class ScoringOptions:
  max_length: int = 2048
  truncation: str = "left"          # "left" | "error"
  proxy: str | None = None          # None: "loglik" for LM heads, the score head otherwise.
  tokens_per_batch: int = 16384     # Row slots per batch (rows x row length).
  chunk_size: int = 1024            # Items per output shard.
  smallest_bucket: int = packing.SMALLEST_BUCKET
  reward_label: int = 0             # Which output of a multi-label score head is `reward`.


def resolve_proxy(head: str, proxy: str | None) -> str:
  """The readout a model gets: "score" (its score head) or "loglik" (its LM head)."""
  if proxy is None:
    proxy = "loglik" if head == "lm" else "none"
  if proxy not in PROXIES:
    raise InputError(f"unknown --proxy={proxy!r}; use one of {', '.join(PROXIES)}")
  if proxy == "loglik" and head != "lm":
    raise InputError(f"--proxy=loglik needs a language-model head; this model has a {head!r} head")
  if proxy == "none" and head != "score":
    raise InputError(f"this model has a {head!r} head, no reward head: pass --proxy=loglik to "
                     "use its mean response log-likelihood as the reward")
  return "loglik" if proxy == "loglik" else "score"


def select_items(items: Sequence[dict], datasets: Sequence[str] | None = None,
                 limit: int | None = None) -> list[dict]:
  """Items of the named datasets (all when None), the first `limit` of them."""
  if datasets:
    known = {str(it.get("dataset")) for it in items}
    unknown = sorted(set(datasets) - known)
    if unknown:
      raise InputError(f"--datasets names {', '.join(unknown)}, not in the items "
                       f"(they hold: {', '.join(sorted(known))})")
    items = [it for it in items if it.get("dataset") in set(datasets)]
  items = list(items)
  if limit is not None and limit >= 0:
    items = items[:limit]
  ids = [str(it["item_id"]) for it in items]
  if len(set(ids)) != len(ids):
    raise InputError("duplicate item_id values in the items: every item must have its own id")
  return items


def target_log_probs(module, hidden, targets, block: int = LOGLIK_BLOCK):
  """log p(target | hidden) through the LM head: [B, S, D], [B, S] -> [B, S].

  The [readouts, vocab] logits are made `block` readouts at a time (lax.map), so a 128k-token
  vocabulary never needs [B, S, V] at once.
  """
  b, s, d = hidden.shape
  n = b * s
  block = min(block, n)
  pad = -n % block
  flat_hidden = jnp.pad(hidden.reshape(n, d), ((0, pad), (0, 0)))  # [N', D]
  flat_targets = jnp.pad(targets.reshape(n), (0, pad))  # [N']

  def one_block(args):
    h, t = args  # [block, D], [block]
    logits = module.head(h).astype(jnp.float32)  # [block, V]
    picked = jnp.take_along_axis(logits, t[:, None], axis=-1)[:, 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)  # [block]

  out = jax.lax.map(one_block, (flat_hidden.reshape(-1, block, d), flat_targets.reshape(-1, block)))
  return out.reshape(-1)[:n].reshape(b, s)


class ScoringFunction:
  """The one jit-compiled scoring step for a model, a readout and a mesh."""

  def __init__(self, model, mesh, readout: str):
    self.mesh = mesh
    self.readout = readout
    self.is_causal = model.is_causal
    self.compilations = 0
    graphdef, self.state = nnx.split(model.module)
    self.sharding = mesh_lib.batch_sharding(mesh)

    def step(state, batch):
      self.compilations += 1  # Python runs only while tracing: once per new batch shape.
      module = nnx.merge(graphdef, state)
      mask = packing.attention_mask(batch["segment_ids"], batch["branch_ids"], self.is_causal)
      token_types = None if self.is_causal else batch["token_type_ids"]
      hidden = module(batch["input_ids"], batch["positions"], mask, token_types)  # [B, T, D]
      picked = jnp.take_along_axis(hidden, batch["readout_index"][..., None], axis=1)  # [B, S, D]
      if readout == "score":
        return module.head(picked).astype(jnp.float32)  # [B, S, L]
      return target_log_probs(module, picked, batch["readout_target"])  # [B, S]

    self._step = jax.jit(step, out_shardings=self.sharding)

  def __call__(self, batch: packing.Batch) -> jax.Array:
    arrays = {name: jax.device_put(getattr(batch, name), self.sharding) for name in BATCH_FIELDS}
    return self._step(self.state, arrays)


@dataclasses.dataclass
class ChunkResult:
  rows: list[dict]
  stats: run_report.RunStats


def _chunk_rows(items: Sequence[dict], encoded: Sequence[templating.EncodedItem], readout: str,
                outputs: list[tuple[packing.Batch, np.ndarray]], reward_label: int) -> list[dict]:
  """One row per (item, candidate) from the batches' readouts."""
  offsets = packing.candidate_offsets(encoded)
  total = int(offsets[-1])
  if readout == "score":
    num_labels = outputs[0][1].shape[-1]
    values = np.full((total, num_labels), np.nan, np.float64)
    for batch, out in outputs:
      valid = batch.readout_owner >= 0
      values[batch.readout_owner[valid]] = out[valid]
  else:
    sums, counts = np.zeros(total, np.float64), np.zeros(total, np.int64)
    for batch, out in outputs:
      valid = batch.readout_owner >= 0
      np.add.at(sums, batch.readout_owner[valid], out[valid].astype(np.float64))
      np.add.at(counts, batch.readout_owner[valid], 1)
  rows = []
  for slot, (item, enc) in enumerate(zip(items, encoded)):
    for c in range(enc.num_candidates):
      owner = int(offsets[slot]) + c
      row = {"item_id": enc.item_id, "candidate": c}
      if readout == "score":
        vector = values[owner]
        row["reward"] = float(vector[reward_label])
        if len(vector) > 1:
          row["rewards"] = [float(v) for v in vector]
      else:
        n = int(counts[owner])
        row["reward"] = sums[owner] / n if n else float("nan")
        row["reward_sum"] = float(sums[owner])
        row["n_tokens"] = n
      row["sequence_tokens"] = len(enc.sequences[c])
      finite = np.isfinite(row["reward"]) and np.all(np.isfinite(row.get("rewards", 0.0)))
      if not finite:
        raise NonFiniteRewardError(
            f"item {enc.item_id!r} (dataset {item.get('dataset')!r}), candidate {c}: reward is "
            f"{row['reward']} (not finite); the run stops here rather than write it. Check the "
            "model's weights and --dtype (float32 rules out bf16 overflow).")
      rows.append(row)
  return rows


def _schema(readout: str, num_labels: int) -> pa.Schema:
  fields = [("item_id", pa.string()), ("candidate", pa.int32()), ("reward", pa.float64())]
  if readout == "score" and num_labels > 1:
    fields.append(("rewards", pa.list_(pa.float64())))
  if readout == "loglik":
    fields += [("reward_sum", pa.float64()), ("n_tokens", pa.int32())]
  fields.append(("sequence_tokens", pa.int32()))
  return pa.schema(fields)


def _item_pairs(item: dict, pairs: dict | None) -> list[tuple[int, int]]:
  """The (chosen, rejected) pairs of an item: from the pairs table if given, else its labels."""
  return pairs.get(str(item["item_id"]), []) if pairs is not None else run_report.item_pairs(item)


def score_chunk(fn: ScoringFunction, templater: templating.Templater, items: Sequence[dict],
                first_index: int, *, buckets: Sequence[int], tokens_per_batch: int,
                reward_label: int, pairs: dict | None,
                on_batch: Callable[[float, float, int], None] | None = None) -> ChunkResult:
  """Scores one chunk of items; nothing of it outlives the call but its rows and counts.

  `on_batch(items, pairs, tokens)` is called as each batch's result arrives, with the chunk's
  items and pairs scaled by the share of its tokens the batch held, so progress moves within a
  chunk.
  """
  encoded = [templater.encode(first_index + i, item) for i, item in enumerate(items)]
  stats = run_report.RunStats(items=len(items))
  for item, enc in zip(items, encoded):
    item_pairs = _item_pairs(item, pairs)
    stats.pairs += len(item_pairs)
    stats.tokens_naive += sum(len(enc.sequences[a]) + len(enc.sequences[b]) for a, b in item_pairs)
    stats.candidates += enc.num_candidates
    stats.truncated += int(enc.truncated_tokens > 0)
  row_multiple = fn.mesh.shape["data"]
  batches = list(packing.make_batches(encoded, is_causal=fn.is_causal, readout=fn.readout,
                                      buckets=buckets, tokens_per_batch=tokens_per_batch,
                                      row_multiple=row_multiple))
  chunk_tokens = max(1, sum(batch.real_tokens for batch in batches))
  outputs, in_flight = [], collections.deque()
  for i, batch in enumerate(batches):
    in_flight.append((batch, fn(batch)))  # The device runs this while the host waits on the last.
    stats.batches += 1
    stats.tokens_computed += batch.real_tokens
    stats.token_slots += batch.input_ids.size
    while in_flight and (len(in_flight) > 1 or i == len(batches) - 1):
      done, out = in_flight.popleft()
      outputs.append((done, np.asarray(out)))
      if on_batch is not None:
        share = done.real_tokens / chunk_tokens
        on_batch(share * stats.items, share * stats.pairs, done.real_tokens)
  rows = _chunk_rows(items, encoded, fn.readout, outputs, reward_label)
  return ChunkResult(rows, stats)


def score_items(model, items: Sequence[dict], output_dir, *, mesh=None,
                options: ScoringOptions = ScoringOptions(), model_path: str | None = None,
                items_path=None, process: int | None = None,
                process_count: int | None = None) -> dict:
  """Scores every (item, candidate) of this process's slice into `output_dir`; returns run.json.

  `model_path` names the model in the manifest (default: its tokenizer path); `items_path`, when
  given, is where a pairs table may sit beside the items (for `tokens_naive`).
  """
  start = time.monotonic()
  mesh = mesh if mesh is not None else mesh_lib.make_mesh()
  process = jax.process_index() if process is None else process
  process_count = jax.process_count() if process_count is None else process_count
  readout = resolve_proxy(model.config.head, options.proxy)
  dtype = str(jax.tree.leaves(nnx.state(model.module, nnx.Param))[0].dtype)  # as loaded
  proxy = "loglik" if readout == "loglik" else "none"
  model_path = str(model_path or model.tokenizer_path)

  store = shards.ShardStore(
      output_dir, model=shards.model_identity(model_path),
      items=shards.items_identity([str(it["item_id"]) for it in items]),
      settings={"proxy": proxy, "max_length": options.max_length,
                "truncation": options.truncation, "dtype": dtype,
                "reward_label": options.reward_label},
      chunk_size=options.chunk_size)
  mine = shards.process_chunks(len(items), options.chunk_size, process, process_count)
  done = store.done_chunks()
  todo = [c for c in mine if c not in done]

  tokenizer = templating.load_tokenizer(model.tokenizer_path)
  templater = templating.Templater(tokenizer, is_causal=model.is_causal,
                                   max_length=options.max_length, truncation=options.truncation)
  buckets = packing.length_buckets(options.max_length, options.smallest_bucket)
  fn = ScoringFunction(model, mesh, readout)
  pairs = run_report.pairs_from_table(items_path) if items_path is not None else None
  schema = _schema(readout, getattr(model.config, "num_labels", 1))

  def chunk_items(chunk):
    return items[chunk * options.chunk_size:(chunk + 1) * options.chunk_size]

  my_items = sum(len(chunk_items(c)) for c in mine)
  tracker = progress.Progress(my_items, prefix=f"[process {process}] " if process_count > 1 else "")
  stats = run_report.RunStats()
  for chunk in mine:
    if chunk in done:
      skipped = len(chunk_items(chunk))
      stats.items_resumed += skipped
      tracker.skip(skipped)
  logging.info("scoring %d items in %d chunks (%d already done) on mesh %s, readout %s, "
               "buckets %s", my_items, len(mine), len(mine) - len(todo), mesh_lib.describe(mesh),
               readout, buckets)
  for chunk in todo:
    result = score_chunk(
        fn, templater, chunk_items(chunk), chunk * options.chunk_size, buckets=buckets,
        tokens_per_batch=options.tokens_per_batch, reward_label=options.reward_label,
        pairs=pairs, on_batch=tracker.update)
    store.write(process, chunk, result.rows, schema)
    stats.add(result.stats)
  tracker.log()
  run = run_report.report(
      stats, wall_seconds=time.monotonic() - start, compilations=fn.compilations,
      devices=mesh.devices.size, mesh=mesh_lib.describe(mesh), model=model_path, proxy=proxy,
      process_count=process_count,
      extra={"buckets": list(buckets), "tokens_per_batch": options.tokens_per_batch,
             "max_length": options.max_length, "chunk_size": options.chunk_size,
             "dtype": dtype})
  run_report.write(output_dir, process, process_count, run, stats)
  return run


def score_model_at(model_path: str, items_path, output_dir, *, options: ScoringOptions,
                   dtype: str = "float32", mesh_spec: str | None = None,
                   datasets: Sequence[str] = (), limit: int | None = None) -> dict:
  """What `socialrm-score` and the audit do: load the model at `model_path` (or the embedded
  default's alias) onto a mesh, read the items, and score them into `output_dir`."""
  path = default_model.resolve_model_path(model_path)
  mesh = mesh_lib.make_mesh(mesh_spec)
  items = select_items(tables.read_rows(items_path, "items"), datasets, limit)
  model = load_reward_model(path, dtype=dtype, mesh=mesh)
  return score_items(model, items, output_dir, mesh=mesh, options=options, model_path=path,
                     items_path=items_path)
