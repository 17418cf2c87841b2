"""The streaming scoring run around the compiled step (step.py).

`score_items` takes a loaded `RewardModel` and the items and scores every (item, candidate) into an
output folder, chunk by chunk (a chunk of `chunk_size` items is one output shard; chunks already on
disk are skipped, which is how a killed run resumes). Two threads keep the device busy:
- a producer encodes each chunk's items in one batched tokenizer call (item_tokens.py), packs them
  into rows (packing.py), fills fixed-shape batches from the rows of consecutive chunks, and puts
  each batch on the devices while earlier ones compute; it runs up to `PREFETCH_BATCHES` ahead;
- the main thread dispatches each batch to the compiled step, and while the device computes it,
  copies the previous batch's readouts home, turns them into rewards, and writes a chunk's shard
  as soon as its last row is done (every reward checked finite).
Rows of one chunk may share a batch with the next chunk's; scores do not depend on which rows
share a batch (tested to 1e-5).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import queue
import threading
import time
from typing import Callable, Iterator, Sequence

import jax
from absl import logging
from flax import nnx

from socialrm_jax.base import errors, settings
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import default_model, reward_model
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.runtime import compilation_cache, global_arrays
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.runtime import provenance
from socialrm_jax.scoring import (invariance, item_source, item_tokens, packing, progress, proxies,
                                  run_manifest, run_report, shards)
from socialrm_jax.scoring import step as step_lib
from socialrm_jax.scoring.chunks import Chunk, encode_chunk, Scorer

PROXIES = proxies.PROXIES
# Batches the producer thread may prepare ahead of the device.
PREFETCH_BATCHES = 4
# The persistent compilation cache's default place (`ScoringOptions.compilation_cache`).
DEFAULT_CACHE = "default"


# The default --tokens_per_batch: token slots per batch on accelerators.
DEFAULT_TOKENS_PER_BATCH = 16384
# The largest batch on a CPU, in token slots. On a CPU the device batch is host memory, so without
# a cap the run's peak memory grows with --tokens_per_batch (benchmarks/scoring/scoring_memory.py);
# and a batch whose activations stay within the CPU's caches scores faster
# (benchmarks/scoring/cpu_profile.py).
CPU_BATCH_TOKENS = 4096
# What a scoring command's --model takes.
MODEL_HELP = ("HF checkpoint folder, native checkpoint folder, GGUF file (or a folder holding one), "
              "'smollm2' (the embedded default model), or a Hub id org/name[@REVISION] "
              "(downloaded, checked against the Hub's sha256; docs/fetching.md).")


@dataclasses.dataclass(frozen=True)
class ScoringOptions:
  """Every scoring setting, with its default and help line: the one declaration behind the flags
  of `socialrm-score`, `socialrm-probe`, `socialrm-vocab-scan` and `socialrm-plan`
  (`base.settings.define_flags`), the audit's model configs (`base.settings.config_dict`) and the
  benchmarks."""
  max_length: int = settings.field(2048, "Longest sequence, in tokens.")
  truncation: str = settings.field(
      "left", "Over-long items: drop prompt tokens from the left, or stop.",
      choices=item_tokens.TRUNCATION_MODES)
  proxy: str | None = settings.field(
      None, "Reward: 'none' = the score head; 'loglik' = mean response log-probability; "
      "'implicit' = DPO implicit reward against --ref_model; 'judge' = pairwise judgements by the "
      "model, both orders (default: loglik for LM heads, else none).", choices=PROXIES)
  ref_model: str | None = settings.field(
      None, "--proxy=implicit: the reference model (as --model); its tokenizer must be the "
      "policy's.")
  length_normalize: bool = settings.field(
      False, "--proxy=implicit: divide the log-ratio sum by the response's token count.")
  tokens_per_batch: int = settings.field(DEFAULT_TOKENS_PER_BATCH,
                                         "Batch size in token slots (rows x row length).")
  chunk_size: int = settings.field(1024, "Items per output shard.")
  smallest_bucket: int = settings.field(packing.SMALLEST_BUCKET,
                                        "Shortest row length, in tokens: rows are this long, twice "
                                        "as long, ... up to --max_length.")
  objective: int | None = settings.field(
      None, "Multi-output score heads: the output used as `reward` (default 0); the whole vector "
      "is kept in `rewards`.")
  objective_weights: tuple[float, ...] = settings.field(
      (), "Multi-output score heads: `reward` is the outputs' sum with these weights, one per "
      "output.")
  dtype: str = settings.field(
      "float32", "Dtype of the parameters and of the computation (socialrm-train computes in it "
      "and keeps its trained weights and optimizer state in float32).",
      choices=("float32", "bfloat16"))
  mesh: str | None = settings.field(
      None, "Mesh over this process's devices, e.g. data:8,model:1 (default: every device on "
      "data); a model axis larger than one host's devices spans hosts.")
  attention: str = settings.field(
      "auto", "Attention kernel: auto = cuDNN on GPU (bf16), splash on TPU, XLA otherwise.",
      choices=("auto", "xla", "cudnn", "splash"))
  compilation_cache: str = settings.field(
      DEFAULT_CACHE, "Persistent XLA compilation cache folder; 'default' = "
      "~/.cache/socialrm_jax/xla (or under $XDG_CACHE_HOME); empty = off.")
  check_invariance: int = settings.field(
      0, "After scoring, re-score this many of the items (a fixed sample) in other batch "
      "compositions and row lengths, and record the largest reward difference in run.json "
      "(`invariance`); 0 = off.")

  def validate(self) -> None:
    """Refuses settings no run can use, naming the option."""
    for name in ("max_length", "tokens_per_batch", "chunk_size", "smallest_bucket"):
      if getattr(self, name) <= 0:
        raise InputError(f"--{name} must be positive, got {getattr(self, name)}")
    if self.check_invariance < 0:
      raise InputError(f"--check_invariance must be >= 0 (items to re-score; 0: off), got "
                       f"{self.check_invariance}")
    self.objective_spec().validate()
    cache = self.cache_dir()
    if cache and os.path.exists(cache) and not os.path.isdir(cache):
      raise InputError("--compilation_cache names a file; it must be a folder", cache)
    if self.truncation not in item_tokens.TRUNCATION_MODES:
      raise InputError(f"--truncation must be one of {', '.join(item_tokens.TRUNCATION_MODES)}, "
                       f"got {self.truncation!r}")
    if self.proxy not in (None, *PROXIES):
      raise InputError(f"unknown --proxy={self.proxy!r}; use one of {', '.join(PROXIES)}")
    if self.proxy == "implicit" and not self.ref_model:
      raise InputError("--proxy=implicit needs --ref_model (the reference model, e.g. the SFT "
                       "model the policy was trained from with DPO)")
    if self.ref_model and self.proxy != "implicit":
      raise InputError("--ref_model is used by --proxy=implicit only; pass --proxy=implicit")
    if self.length_normalize and self.proxy != "implicit":
      raise InputError("--length_normalize applies to --proxy=implicit only (loglik is a mean "
                       "already)")

  def objective_spec(self) -> proxies.Objective:
    """The objective as numbers (weights may come as the command line's strings)."""
    try:
      weights = tuple(float(w) for w in self.objective_weights)
    except (TypeError, ValueError):
      raise InputError(f"--objective_weights must be numbers, got "
                       f"{','.join(map(str, self.objective_weights))}") from None
    return proxies.Objective(self.objective, weights)

  def batch_tokens(self, platform: str = "") -> int:
    """Token slots per batch on `platform`'s devices: `tokens_per_batch`, but never more than
    `chunk_size` rows of `max_length` (a bigger batch no chunk fills), and on a CPU never more
    than `CPU_BATCH_TOKENS` (or one row of `max_length`): there the device batch is host memory,
    and a small one stays in cache."""
    tokens = min(self.tokens_per_batch, self.chunk_size * self.max_length)
    if platform == "cpu":
      tokens = min(tokens, max(CPU_BATCH_TOKENS, self.max_length))
    return tokens

  def cache_dir(self) -> str:
    if self.compilation_cache == DEFAULT_CACHE:
      return compilation_cache.default_dir()
    return self.compilation_cache


def check_inputs(options: ScoringOptions, model_flag: str, model_path: str,
                 prefix: str = "") -> None:
  """What a scoring run can refuse before any work, naming the flag (`prefix` + its name: the
  audit's `config.models.<key>.`): the options, the compilation cache folder, and the files of
  the model (given as `model_flag`) and of its reference (`reward_model.check_models`)."""
  try:
    options.validate()
  except InputError as e:
    if prefix:
      raise InputError(f"{prefix.rstrip('.')}: {e}") from None
    raise
  if options.compilation_cache:
    errors.check_output_folder(options.cache_dir(), f"{prefix}compilation_cache")
  reward_model.check_models({model_flag: model_path, f"{prefix}ref_model": options.ref_model})


def select_items(items: Sequence[dict], datasets: Sequence[str] | None = None,
                 limit: int | None = None) -> list[dict]:
  """Items of the named datasets (all when None), the first `limit` of them; an unknown dataset
  or a repeated item_id is an InputError."""
  return list(item_source.ItemSource.from_rows(items, datasets or (), limit))


def make_scorer(model, mesh, options: ScoringOptions, ref_model=None,
                ref_model_path: str | None = None) -> Scorer:
  """The scorer `options` ask for; `ref_model` is the implicit reward's reference (loaded), whose
  tokenizer must match the model's."""
  tokenizer = item_tokens.load_tokenizer(model.tokenizer_path)
  templater = item_tokens.Templater(tokenizer, is_causal=model.is_causal,
                                    max_length=options.max_length, truncation=options.truncation,
                                    appended_ids=model.config.appended_token_ids)
  name = proxies.resolve(model.config.head, options.proxy)
  reference = None
  if name == "implicit":
    if ref_model is None:
      raise InputError("--proxy=implicit needs --ref_model")
    ref_path = str(ref_model_path or ref_model.tokenizer_path)
    proxies.resolve(ref_model.config.head, "implicit")  # the reference must be an LM too
    ref_templater = item_tokens.Templater(item_tokens.load_tokenizer(ref_model.tokenizer_path),
                                          is_causal=ref_model.is_causal, max_length=1)
    proxies.check_same_tokenizer(templater, ref_templater, ref_path)
    reference = shards.model_identity(ref_path)
  proxy = proxies.make(name, model=model, templater=templater,
                       objective=options.objective_spec(), reference=reference,
                       length_normalize=options.length_normalize)
  platform = mesh.devices.flat[0].platform
  if (options.batch_tokens(platform) < options.batch_tokens()
      and options.tokens_per_batch != DEFAULT_TOKENS_PER_BATCH):  # a size the user asked for
    logging.warning("--tokens_per_batch=%d: batches of %d token slots on %s (engine.batch_tokens)",
                    options.tokens_per_batch, options.batch_tokens(platform), platform)
  return Scorer(
      proxy, templater,
      step_lib.ScoringStep(model, mesh, proxy.readout, ref_model if name == "implicit" else None),
      make_batcher(options, proxy.readout, mesh))


def make_batcher(options: ScoringOptions, readout: str, mesh) -> packing.Batcher:
  """The run's batch shapes: row lengths from `max_length`, rows from the token budget on the
  mesh's platform, a multiple of its `data` axis (also what `socialrm_jax.main.plan` compiles); on a
  CPU rows sized by attention's cost there (`packing.CPU_GROUPS_PER_ROW`)."""
  platform = mesh.devices.flat[0].platform
  row_sizing = (dict(groups_per_row=packing.CPU_GROUPS_PER_ROW,
                     attention_length=packing.CPU_ATTENTION_LENGTH) if platform == "cpu" else {})
  return packing.Batcher(packing.length_buckets(options.max_length, options.smallest_bucket),
                         readout, options.batch_tokens(platform), mesh.shape["data"],
                         shrink_last=platform == "cpu", **row_sizing)


class _Producer(threading.Thread):
  """Encodes, packs and batches chunks ahead of the device; puts ("chunk", Chunk) before a chunk's
  batches, then ("batch", Batch, device arrays), ("end",) or ("error", exception)."""

  def __init__(self, chunks: Iterator[tuple[int, Sequence[dict], int]], scorer: Scorer,
               pairs: run_report.ItemPairs | None):
    super().__init__(daemon=True, name="socialrm-producer")
    self.chunks, self.scorer, self.pairs = chunks, scorer, pairs
    self.batcher, self.step = scorer.batcher, scorer.step
    self.queue: queue.Queue = queue.Queue(maxsize=PREFETCH_BATCHES)
    self.stopped = threading.Event()

  def _put(self, message) -> None:
    while not self.stopped.is_set():
      try:
        self.queue.put(message, timeout=0.1)
        return
      except queue.Full:
        continue

  def _send(self, batches) -> None:
    for batch in batches:
      self._put(("batch", batch, self.step.put(batch)))

  def run(self) -> None:
    try:
      for index, items, first_index in self.chunks:
        chunk = encode_chunk(self.scorer, index, items, first_index, self.pairs)
        writers = self.scorer.pack(chunk.encoded, index)
        chunk.readouts_left = sum(len(w.readouts) for w in writers)
        chunk.tokens = sum(w.used for w in writers)
        self._put(("chunk", chunk))
        self._send(self.batcher.add(writers))
        self._send(self.batcher.flush(before_chunk=index))
        if self.stopped.is_set():
          return
      self._send(self.batcher.flush())
      self._put(("end",))
    except BaseException as e:  # pylint: disable=broad-except  # re-raised by the main thread
      self._put(("error", e))


def _run_batches(step: step_lib.ScoringStep, producer: _Producer,
                on_chunk: Callable[[Chunk], None],
                on_batch: Callable[[float, float, int], None] | None = None) -> run_report.RunStats:
  """Drives the device: dispatches each batch as it comes, and while it computes, takes the last
  one's readouts home; `on_chunk(chunk)` gets each chunk whose rows are all back. Returns the
  device-side counts (batches, tokens computed, token slots)."""
  stats = run_report.RunStats()
  chunks: dict[int, Chunk] = {}
  in_flight: collections.deque = collections.deque()

  def finish(batch: packing.Batch, out: jax.Array) -> None:
    host = global_arrays.fetch(out)
    for index, tokens in batch.chunk_tokens().items():
      chunk = chunks[index]
      chunk.add(batch, host)
      if on_batch is not None:
        share = tokens / max(chunk.tokens, 1)
        on_batch(share * chunk.stats.items, share * chunk.stats.pairs, tokens)
      if chunk.readouts_left == 0:
        on_chunk(chunks.pop(index))

  producer.start()
  try:
    while True:
      message = producer.queue.get()
      if message[0] == "chunk":
        chunks[message[1].index] = message[1]
      elif message[0] == "batch":
        _, batch, arrays = message
        out = step(arrays)  # Returns at once; the device computes while the host goes on.
        out.copy_to_host_async()
        in_flight.append((batch, out))
        stats.batches += 1
        stats.tokens_computed += batch.real_tokens
        stats.token_slots += batch.input_ids.size
        if len(in_flight) > 1:
          finish(*in_flight.popleft())
      elif message[0] == "end":
        while in_flight:
          finish(*in_flight.popleft())
        if chunks:  # Every packed readout comes back; a chunk left over is a packing bug.
          raise RuntimeError(f"chunks {sorted(chunks)} did not get all their readouts back")
        return stats
      else:
        raise message[1]
  finally:
    producer.stopped.set()


def stream_scores(scorer: Scorer, chunks: Iterator[tuple[int, Sequence[dict], int]], *,
                  pairs: run_report.ItemPairs | None, on_chunk: Callable[[Chunk], None],
                  on_batch: Callable[[float, float, int], None] | None = None
                  ) -> run_report.RunStats:
  """Scores `chunks` ((index, items, index of the first item)) with `scorer`; `on_chunk` gets
  each finished chunk. Returns the device-side counts."""
  producer = _Producer(chunks, scorer, pairs)
  return _run_batches(scorer.step, producer, on_chunk, on_batch)


def score_items(model, items: Sequence[dict], output_dir, *, mesh=None,
                options: ScoringOptions = ScoringOptions(), model_path: str | None = None,
                items_path=None, process: int | None = None,
                process_count: int | None = None, ref_model=None,
                make: Callable[..., Scorer] | None = None, timeline: dict | None = None) -> dict:
  """Scores every (item, candidate) of this process's slice into `output_dir`; returns run.json.

  `model_path` names the model in the manifest (default: its tokenizer path); `items_path`, when
  given, is where a pairs table may sit beside the items (for `tokens_naive`). When `mesh` spans
  several processes (a model axis across hosts), they form one data-parallel group: each scores
  the group's slice, and only the group's first process writes. `ref_model`: the loaded reference
  model of `--proxy=implicit` (`options.ref_model` names it in the manifest). `make` builds the
  scorer from the same arguments as `make_scorer` (the default); the vocabulary scan passes its own.
  `timeline`: {"start": wall-clock seconds, "load": [start, end]} of the model's load, given by
  `score_model_at`: run.json's `timeline` then says, in seconds from `start`, when the weights
  loaded, when the programs compiled (`step.compile_window`) and when the first batch's rewards
  came back.
  """
  options.validate()
  start = time.monotonic()
  items = item_source.as_source(items)
  mesh = mesh if mesh is not None else mesh_lib.make_mesh()
  group = mesh_lib.data_group(mesh)
  process = group.index if process is None else process
  process_count = group.count if process_count is None else process_count
  dtype = str(jax.tree.leaves(nnx.state(model.module, nnx.Param))[0].dtype)  # as loaded
  model_path = str(model_path or model.tokenizer_path)
  scorer = (make or make_scorer)(model, mesh, options, ref_model, options.ref_model)
  proxy = scorer.proxy
  if step_lib.GATE_FIELD in scorer.step.fields and items.first is not None:
    # A gated head (ArmoRM) whose prompt pattern the template never writes is refused on the
    # first item, before anything is written; a later item without it stops the run, named.
    proxy.locate_gates(proxy.encode(scorer.templater, 0, [items.first])[0])

  store = shards.ShardStore(
      output_dir, model=shards.model_identity(model_path),
      items=items.identity,
      settings={**proxy.settings(), "max_length": options.max_length,
                "truncation": options.truncation, "dtype": dtype},
      chunk_size=options.chunk_size, writer=process if group.is_writer else None)
  digests = provenance.start_file_digests(store.identity["model"]["path"])
  manifest = run_manifest.build(
      store.identity, items_path=items_path, templater=scorer.templater,
      example_item=items.first, dtype=dtype, mesh=mesh,
      attention=getattr(model, "attention", "xla"), options=options)
  mine = shards.process_chunks(len(items), options.chunk_size, process, process_count)
  done = store.done_chunks()
  todo = [c for c in mine if c not in done]
  pairs = run_report.pairs_from_table(items_path) if items_path is not None else None
  schema = proxy.schema()
  hits_before = compilation_cache.hits()
  batcher = scorer.batcher

  def chunk_length(chunk: int) -> int:
    return min(options.chunk_size, len(items) - chunk * options.chunk_size)

  my_items = sum(chunk_length(c) for c in mine)
  tracker = progress.Progress(my_items, prefix=f"[group {process}] " if process_count > 1 else "")
  stats = run_report.RunStats()
  for chunk in mine:
    if chunk in done:
      skipped = chunk_length(chunk)
      stats.items_resumed += skipped
      tracker.skip(skipped)
  logging.info("scoring %d items in %d chunks (%d already done) on mesh %s, proxy %s, "
               "batches (rows, length, readouts) %s", my_items, len(mine), len(mine) - len(todo),
               mesh_lib.describe(mesh), proxy.name,
               [batcher.shape(b) for b in batcher.buckets])

  def write_chunk(chunk: Chunk) -> None:
    rows = chunk.rows(proxy)
    if group.is_writer:
      store.write(process, chunk.index, rows, schema)
    stats.add(chunk.stats)

  first_rewards: list[float] = []

  def on_batch(items_done: float, pairs_done: float, tokens: int) -> None:
    if not first_rewards:
      first_rewards.append(time.time())
    tracker.update(items_done, pairs_done, tokens)

  # Chunks are read from the items as the producer reaches them: the host holds a few, never the
  # whole file.
  stats.add(stream_scores(scorer, ((c, chunk, c * options.chunk_size)
                                   for c, chunk in items.chunks(options.chunk_size, todo)),
                          pairs=pairs, on_chunk=write_chunk, on_batch=on_batch))
  tracker.log()
  run_manifest.add_file_digests(manifest, digests)
  summary = proxy.summary(output_dir) if group.is_writer else {}
  run = run_report.report(
      stats, wall_seconds=time.monotonic() - start, compilations=scorer.step.compilations,
      devices=mesh.devices.size, mesh=mesh_lib.describe(mesh), model=model_path,
      proxy=proxy.name, process_count=process_count,
      extra={"compile_seconds": scorer.step.compile_seconds,
             "compilation_cache_hits": compilation_cache.hits() - hits_before,
             "attention": getattr(model, "attention", "xla"),
             "batch_shapes": sorted(list(shape) for shape in batcher.shapes),
             "buckets": list(batcher.buckets), "tokens_per_batch": options.tokens_per_batch,
             "batch_tokens": batcher.batch_tokens,
             "max_length": options.max_length, "chunk_size": options.chunk_size,
             "dtype": dtype, **{k: v for k, v in proxy.settings().items() if k != "proxy"},
             **_timeline(timeline, scorer.step.compile_window, first_rewards), **summary,
             "manifest": manifest})
  # After the run's counts are taken: the check's compilations and seconds are its own.
  checked = None
  if options.check_invariance:
    checked = invariance.check(scorer, items, output_dir, count=options.check_invariance,
                               chunk_size=options.chunk_size, chunks=mine, dtype=dtype,
                               compare=group.is_writer)
  return run_report.write(output_dir, process, process_count, run, stats,
                          is_writer=group.is_writer, nothing_done=not todo,
                          amend={"invariance": checked} if checked else None)


def first_chunk_shapes(scorer: Scorer, items: item_source.ItemSource, options: ScoringOptions,
                       mesh) -> list[tuple[int, int, int]]:
  """The batch shapes the first chunk's items make, packed apart (as the producer packs them, its
  last batches padded out only when it is the only chunk): what to compile before the first
  batch comes."""
  number_of_chunks = -(-len(items) // options.chunk_size)
  first = next(iter(items.chunks(options.chunk_size, [0])), None)
  if first is None:
    return []
  batcher = make_batcher(options, scorer.proxy.readout, mesh)
  dry = dataclasses.replace(scorer, batcher=batcher)
  writers = dry.pack(encode_chunk(dry, 0, first[1], 0, None).encoded, 0)
  for _ in batcher.add(writers):
    pass
  for _ in batcher.flush(before_chunk=None if number_of_chunks == 1 else 0):
    pass
  return sorted(batcher.shapes)


def _timeline(timeline: dict | None, compile_window: list[float] | None,
              first_rewards: list[float]) -> dict:
  """run.json's `timeline`: seconds from `timeline["start"]` to the ends of the load and of the
  compilations (started while the weights loaded, where `score_model_at` could), and to the
  first batch's rewards on the host; nothing without a `timeline`."""
  if timeline is None:
    return {}
  since = lambda t: round(t - timeline["start"], 3)
  out = {"load": [since(t) for t in timeline["load"]]}
  if compile_window is not None:
    out["compile"] = [since(t) for t in compile_window]
  if first_rewards:
    out["first_rewards"] = since(first_rewards[0])
  return {"timeline": out}


def load_models(model_path: str, options: ScoringOptions, mesh, while_loading=None):
  """The model at `model_path` (or the embedded default's alias) and, for `--proxy=implicit`,
  its reference, loaded onto `mesh`. -> (model, its path, reference or None, options with the
  reference's resolved path). `while_loading`: as `load_reward_model`'s, for the model."""
  path = default_model.resolve_model_path(model_path)
  model = load_reward_model(path, dtype=options.dtype, mesh=mesh, attention=options.attention,
                            while_loading=while_loading)
  ref_model = None
  if options.ref_model:
    ref_path = default_model.resolve_model_path(options.ref_model)
    options = dataclasses.replace(options, ref_model=ref_path)
    ref_model = load_reward_model(ref_path, dtype=options.dtype, mesh=mesh,
                                  attention=options.attention)
  return model, path, ref_model, options


def score_model_at(model_path: str, items_path, output_dir, *, options: ScoringOptions,
                   datasets: Sequence[str] = (), limit: int | None = None) -> dict:
  """What `socialrm-score` and the audit do: load the model at `model_path` (and a reference)
  onto a mesh, read the items, and score them into `output_dir`."""
  options.validate()
  start = time.time()
  compilation_cache.enable(options.cache_dir())
  mesh = mesh_lib.make_mesh(options.mesh)
  items = item_source.ItemSource.from_table(items_path, datasets, limit)
  early: list[Scorer] = []

  def compile_while_loading(twin) -> None:
    # The scorer of the model's abstract twin: the first chunk is packed and its batch shapes'
    # programs compile in a thread while the weights load (a reference model's run compiles
    # after both are loaded; any other shape compiles when its first batch comes).
    scorer = make_scorer(twin, mesh, options)
    scorer.step.precompile(lambda: first_chunk_shapes(scorer, items, options, mesh))
    early.append(scorer)

  loading = time.time()
  model, path, ref_model, options = load_models(
      model_path, options, mesh, None if options.ref_model else compile_while_loading)
  loaded = time.time()
  make = None
  if early:
    early[0].step.bind(model)
    make = lambda *args: early[0]
  return score_items(model, items, output_dir, mesh=mesh, options=options, model_path=path,
                     items_path=items_path, ref_model=ref_model, make=make,
                     timeline={"start": start, "load": [loading, loaded]})
