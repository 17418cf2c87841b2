"""Where a CPU scoring run spends its time: one process, phase by phase, and each batch shape.

  JAX_PLATFORMS=cpu python -m benchmarks.scoring.cpu_profile --model=DIR --items=CONVERTED

(the model and items `benchmarks/gpu/gpu_throughput.py --preset=cpu35m_1500` builds and converts, in
WORK_DIR/models/ and WORK_DIR/items-cpu35m_1500/). It goes through the engine's own pieces in
order and times each: the imports, loading the model, encoding the items (templating and the
batched tokenizer), packing them into rows and batches, compiling each batch shape, then every
batch's compiled step alone (blocked until done; the second pass over the batches, so no compile
falls in it). Per shape it prints the batches, the milliseconds a batch, the microseconds a token
slot and a real token, and the attention's key slots a token (the row length: the dense [T, T]
mask computes every key of the row for every query). Set XLA_FLAGS or the options' flags to see
what a change does to each phase. `--compare_last_layer` times the steps with the whole last
layer against the last layer at the read tokens only instead (`compare_last_layer`).
"""

from __future__ import annotations

import collections
import time

START = time.perf_counter()

from absl import flags  # noqa: E402

from socialrm_jax.main import command  # noqa: E402  # after START

_MODEL = flags.DEFINE_string("model", None, "Reward model folder.", required=True)
_ITEMS = flags.DEFINE_string("items", None, "Converted items folder.", required=True)
_MAX_LENGTH = flags.DEFINE_integer("max_length", 2048, "--max_length of the run.")
_TOKENS_PER_BATCH = flags.DEFINE_integer("tokens_per_batch", None, "--tokens_per_batch (default: "
                                         "ScoringOptions').")
_LIMIT = flags.DEFINE_integer("limit", None, "Only the first N items.")
_PASSES = flags.DEFINE_integer("passes", 2, "Timed passes over every batch (the first compiles).")
_COMPARE_LAST_LAYER = flags.DEFINE_bool(
    "compare_last_layer", False, "Instead of the phases: the steps with the whole last layer "
    "against the last layer at the read tokens only, --passes each, in turn.")


def main(argv):
  del argv
  import jax  # noqa: F401  (timed as the imports)
  from socialrm_jax.scoring import engine, item_source
  from socialrm_jax.runtime import mesh as mesh_lib
  marks = {"imports": time.perf_counter() - START}

  options = engine.ScoringOptions(max_length=_MAX_LENGTH.value,
                                  **({"tokens_per_batch": _TOKENS_PER_BATCH.value}
                                     if _TOKENS_PER_BATCH.value else {}))
  start = time.perf_counter()
  mesh = mesh_lib.make_mesh(options.mesh)
  model, _, _, options = engine.load_models(_MODEL.value, options, mesh)
  scorer = engine.make_scorer(model, mesh, options)
  marks["load model"] = time.perf_counter() - start

  start = time.perf_counter()
  items = list(item_source.ItemSource.from_table(_ITEMS.value, (), _LIMIT.value))
  marks["read items"] = time.perf_counter() - start
  start = time.perf_counter()
  chunk = engine.encode_chunk(scorer, 0, items, 0, None)
  marks["encode"] = time.perf_counter() - start
  start = time.perf_counter()
  writers = scorer.pack(chunk.encoded, 0)
  batches = list(scorer.batcher.add(writers)) + list(scorer.batcher.flush())
  marks["pack"] = time.perf_counter() - start
  if _COMPARE_LAST_LAYER.value:
    compare_last_layer(model, batches, len(items))
    return
  start = time.perf_counter()
  arrays = [scorer.step.put(b) for b in batches]
  jax.block_until_ready(arrays)
  marks["put"] = time.perf_counter() - start

  per_shape = collections.defaultdict(lambda: {"batches": 0, "seconds": 0.0, "slots": 0,
                                               "real": 0})
  for p in range(_PASSES.value):
    start_pass = time.perf_counter()
    for batch, array in zip(batches, arrays):
      start = time.perf_counter()
      jax.block_until_ready(scorer.step(array))
      if p == _PASSES.value - 1:
        stats = per_shape[batch.input_ids.shape + (batch.readout_index.shape[1],)]
        stats["batches"] += 1
        stats["seconds"] += time.perf_counter() - start
        stats["slots"] += batch.input_ids.size
        stats["real"] += batch.real_tokens
    marks[f"steps, pass {p + 1}"] = time.perf_counter() - start_pass
  marks["of which compile"] = scorer.step.compile_seconds

  print(f"{len(items)} items, {chunk.stats.pairs or '?'} pairs, {len(batches)} batches, "
        f"{sum(b.real_tokens for b in batches):,} real tokens in "
        f"{sum(b.input_ids.size for b in batches):,} slots")
  for name, seconds in marks.items():
    print(f"  {name:<20} {seconds:8.2f} s")
  print(f"  {'shape [B, T, S]':<18} {'batches':>7} {'ms/batch':>9} {'us/slot':>8} "
        f"{'us/real':>8} {'keys/token':>10}")
  total = {"seconds": 0.0, "slots": 0, "real": 0, "keys": 0}
  for shape, s in sorted(per_shape.items(), key=lambda kv: kv[0][1]):
    print(f"  {str(list(shape)):<18} {s['batches']:>7} {1e3 * s['seconds'] / s['batches']:>9.1f} "
          f"{1e6 * s['seconds'] / s['slots']:>8.1f} {1e6 * s['seconds'] / max(s['real'], 1):>8.1f} "
          f"{shape[1]:>10}")
    total["seconds"] += s["seconds"]
    total["slots"] += s["slots"]
    total["real"] += s["real"]
    total["keys"] += s["real"] * shape[1]
  print(f"  {'all':<18} {sum(s['batches'] for s in per_shape.values()):>7} {'':>9} "
        f"{1e6 * total['seconds'] / total['slots']:>8.1f} "
        f"{1e6 * total['seconds'] / total['real']:>8.1f} "
        f"{total['keys'] / total['real']:>10.0f}")


def compare_last_layer(model, batches, num_items: int) -> None:
  """Two jitted programs score every batch with the model's head at the readout tokens: "whole"
  runs every layer at every token and picks the hidden states after the final norm (what the
  other attention kernels do); "read tokens" passes `output_index`, so a decoder under xla
  attention runs its last layer's queries, attention and MLP at the readout tokens alone (what
  the scorer runs). The passes alternate (whole, read, read, whole, ...), so a machine whose speed
  drifts during the run moves both alike. Prints each pass, the totals, their ratio, and the
  largest difference between the two programs' rewards."""
  import jax
  import jax.numpy as jnp
  from flax import nnx

  from socialrm_jax.models import attention, layers

  graphdef, state = nnx.split(model.module)

  def program(read_tokens_only: bool):
    @jax.jit
    def rewards(state, input_ids, positions, segment_ids, branch_ids, readout_index):
      module = nnx.merge(graphdef, state)
      layout = attention.Layout(segment_ids, branch_ids, model.is_causal)
      read = jnp.maximum(readout_index, 0)
      if read_tokens_only:
        hidden = module(input_ids, positions, layout, None, output_index=read)
      else:
        hidden = layers.take_positions(module(input_ids, positions, layout, None), read)
      return module.head(hidden)
    return rewards

  programs = {"whole last layer": program(False), "read tokens only": program(True)}
  arrays = [tuple(jnp.asarray(a) for a in (b.input_ids, b.positions, b.segment_ids,
                                           b.branch_ids, b.readout_index)) for b in batches]
  largest = 0.0
  for batch in arrays:  # also compiles both programs for every shape
    whole, read = (f(state, *batch) for f in programs.values())
    largest = max(largest, float(jnp.max(jnp.abs(whole - read))))
  totals = dict.fromkeys(programs, 0.0)
  names = list(programs)
  for n in range(_PASSES.value):
    for name in names if n % 2 == 0 else names[::-1]:
      start = time.perf_counter()
      for batch in arrays:
        jax.block_until_ready(programs[name](state, *batch))
      seconds = time.perf_counter() - start
      totals[name] += seconds
      print(f"pass {n + 1}  {name:17s} {seconds:7.2f} s", flush=True)
  print(f"{num_items:,} items, {len(batches)} batches, {_PASSES.value} passes each")
  for name, seconds in totals.items():
    print(f"  {name:17s} {seconds:8.1f} s")
  print(f"  read / whole      {totals[names[1]] / totals[names[0]]:8.3f}")
  print(f"  rewards: max |whole - read| {largest:.2e}")


if __name__ == "__main__":
  command.run_command("benchmarks.scoring.cpu_profile", main)
