"""The trainer's step timed program by program, for named implementations and remat policies side
by side, in one process, on the same rows.

  JAX_PLATFORMS=cpu python -m benchmarks.training.train_step_profile --model=DIR \
      --pairs=PAIRS.jsonl --compare=remat_policy:full,remat_policy:save_dots
  JAX_PLATFORMS=cpu python -m benchmarks.training.train_step_profile --model=DIR \
      --pairs=PAIRS.jsonl --compare=default,attention:xla+remat_policy:auto --lora_rank=32

DIR and PAIRS are what `python -m benchmarks.training.train_throughput --preset=cpu35m --runs=`
writes in its WORK_DIR: `models/llama-35m-*` and `pairs-cpu35m-in-order.jsonl` (the pairs in the
trainer's order). The first `--steps` steps' pairs are packed as the trainer packs them
(`training.pair_batches.pair_packing`).

Each entry of `--compare` names what the model is loaded with and nothing else: `SETTING:NAME`,
SETTING one of `attention` (a name of `models.attention.IMPLEMENTATIONS`) and `remat_policy` (of
`models.trunk.REMAT_POLICY_NAMES`), `+` joining settings; `default` is the model's own defaults.
Each loads the model so (`training.trainable.load_base`) and builds the trainer's jitted programs
(`training.train_step.TrainStep`):

- forward: `add_block_sums`, a block's loss and metrics without gradients;
- value and gradient: `accumulate`, a block's loss and the gradients of every trained parameter,
  added to the step's sums.

Every program is compiled first; then `--passes` passes over the blocks run the programs of every
entry in turn (the reverse order on odd passes, so that a machine whose speed drifts moves all
alike), each timed in wall seconds and in this process's CPU seconds (user + system). The table
gives both per entry and program, CPU milliseconds per 1,000 token slots, the value-and-gradient /
forward ratio (FLOPs put it at 3 for full fine-tuning and near 2 with LoRA) and each entry's
value-and-gradient CPU seconds over the first entry's, under the CPU's name and allocator: figures
measured on one CPU do not carry to another.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import resource
import time

from absl import flags

from benchmarks.common import allocator, cpu_name
from socialrm_jax.base.errors import InputError
from socialrm_jax.main import command

_MODEL = flags.DEFINE_string("model", None, "Model folder (a causal LM or a reward model).",
                             required=True)
_PAIRS = flags.DEFINE_string("pairs", None, "Pairs jsonl (prompt, chosen, rejected), in the "
                             "trainer's order.", required=True)
_COMPARE = flags.DEFINE_list("compare", ["default"], "What to time, each SETTING:NAME "
                             "(attention, remat_policy; '+' joins two) or default.")
_STEPS = flags.DEFINE_integer("steps", 2, "Steps of --batch_size pairs to pack and time.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 8, "Pairs a step.")
_PASSES = flags.DEFINE_integer("passes", 4, "Timed passes over the blocks, each program.")
_MAX_LENGTH = flags.DEFINE_integer("max_length", 1024, "The trainer's --max_length.")
_ROW_LENGTH = flags.DEFINE_integer("row_length", 512, "The trainer's --row_length.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype.")
_LORA_RANK = flags.DEFINE_integer("lora_rank", 0, "LoRA rank (0: full fine-tuning).")
_LORA_ALPHA = flags.DEFINE_float("lora_alpha", 16.0, "LoRA alpha.")

DEFAULT = "default"
PROGRAMS = ("forward", "value and gradient")


def setting_names() -> dict[str, tuple[str, ...]]:
  """{setting: the names it takes}, as the model code declares them."""
  from socialrm_jax.models import attention, trunk
  return {"attention": tuple(attention.IMPLEMENTATIONS),
          "remat_policy": tuple(trunk.REMAT_POLICY_NAMES)}


def parse_entry(entry: str, names: dict[str, tuple[str, ...]]) -> dict[str, str]:
  """`attention:xla+remat_policy:full` -> {"attention": "xla", "remat_policy": "full"}."""
  if entry == DEFAULT:
    return {}
  chosen = {}
  for part in entry.split("+"):
    setting, _, name = part.partition(":")
    if setting not in names:
      raise InputError(f"--compare: {part!r}: not SETTING:NAME with SETTING one of "
                       f"{', '.join(names)} (or {DEFAULT})")
    if name not in names[setting]:
      raise InputError(f"--compare: {part!r}: {setting} has no {name!r} (it has "
                       f"{', '.join(names[setting])})")
    if setting in chosen:
      raise InputError(f"--compare: {entry!r} names {setting} twice")
    chosen[setting] = name
  return chosen


def cpu_seconds() -> float:
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def step_pairs(path: str) -> list[dict]:
  try:
    rows = [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line]
  except (OSError, ValueError) as e:
    raise InputError(f"--pairs: not a pairs jsonl ({e})", path) from e
  count = _STEPS.value * _BATCH_SIZE.value
  if len(rows) < count:
    raise InputError(f"--pairs holds {len(rows)} pairs; --steps={_STEPS.value} of "
                     f"--batch_size={_BATCH_SIZE.value} need {count}", path)
  return rows[:count]


def blocks_of(tokenizer, rows: list[dict]) -> list[list]:
  """Each step's blocks, packed as the trainer packs them on one device of this platform."""
  import jax
  from socialrm_jax.scoring import item_tokens
  from socialrm_jax.training import pair_batches
  templater = item_tokens.Templater(tokenizer, is_causal=True, max_length=_MAX_LENGTH.value)
  encoded = pair_batches.encode_pairs(templater, [
      pair_batches.Pair(str(i), row["prompt"], row["chosen"], row["rejected"])
      for i, row in enumerate(rows)])
  layout = pair_batches.pair_packing(_ROW_LENGTH.value, _MAX_LENGTH.value,
                                     jax.devices()[0].platform, 1)
  size = _BATCH_SIZE.value
  return [pair_batches.pack_pairs(encoded[s:s + size], [0.0] * size, **layout)
          for s in range(0, len(encoded), size)]


@dataclasses.dataclass
class Entry:
  """One --compare entry: the model loaded with its settings and its trainer's programs."""
  name: str
  step: object
  trained: dict
  frozen: dict
  blocks: list[list]  # each step's blocks, on the mesh
  mesh: object
  compile_seconds: float = 0.0

  def run(self, program: str) -> None:
    """Runs `program` over every step's blocks, to completion."""
    import jax
    from socialrm_jax.training import loss as loss_lib
    with jax.set_mesh(self.mesh):
      for blocks in self.blocks:
        sums = loss_lib.no_sums()
        if program == "forward":
          for arrays in blocks:
            sums = self.step.add_block_sums(sums, self.trained, self.frozen, arrays)
          jax.block_until_ready(sums)
        else:
          grads = self.step.zeros(self.trained)
          for arrays in blocks:
            grads, sums = self.step.accumulate(grads, sums, self.trained, self.frozen, arrays)
          jax.block_until_ready(grads)


def build(name: str, settings: dict[str, str], mesh, rows: list[dict]) -> tuple[Entry, int]:
  """The entry `name`: its model loaded with `settings`, its programs compiled. -> (it, slots)"""
  import optax
  from socialrm_jax.models import reward_model
  from socialrm_jax.scoring import item_tokens
  from socialrm_jax.training import trainable
  from socialrm_jax.training import train_step as train_step_lib
  model = trainable.load_base(_MODEL.value, dtype=_DTYPE.value, mesh=mesh, seed=0, **settings)
  steps = blocks_of(item_tokens.load_tokenizer(model.tokenizer_path), rows)
  lora = _LORA_RANK.value > 0
  trained, frozen = trainable.split_trainable(model.params, lora)
  if lora:
    targets = trainable.lora_targets(model, trainable.DEFAULT_LORA_TARGETS)
    trained.update(trainable.init_lora(model, targets, _LORA_RANK.value, 0))
  # The optimizer is no part of what is timed; the programs need one to be built.
  step = train_step_lib.TrainStep(model, optax.adamw(5e-5), mesh,
                                  dtype=reward_model.model_dtype(_DTYPE.value),
                                  lora_scale=_LORA_ALPHA.value / _LORA_RANK.value if lora else 1.0)
  entry = Entry(name, step, trained, frozen,
                [[step.put(block.arrays()) for block in blocks] for blocks in steps], mesh)
  start = time.perf_counter()
  for program in PROGRAMS:  # traced and compiled here, once per block shape
    entry.run(program)
  entry.compile_seconds = time.perf_counter() - start
  shapes = collections.Counter(str(list(b.input_ids.shape)) for s in steps for b in s)
  print(f"{name}: {sum(len(s) for s in steps)} blocks {dict(shapes)}, compiled and run once in "
        f"{entry.compile_seconds:.0f} s", flush=True)
  return entry, sum(b.input_ids.size for s in steps for b in s)


def time_entries(entries: list[Entry], slots: int, passes: int) -> dict:
  """{(entry, program): [wall s, CPU s]} over `passes` passes, the order reversed every other."""
  keys = [(e.name, p) for e in entries for p in PROGRAMS]
  by_name = {e.name: e for e in entries}
  totals = {key: [0.0, 0.0] for key in keys}
  for n in range(passes):
    for name, program in keys if n % 2 == 0 else keys[::-1]:
      wall, cpu = time.perf_counter(), cpu_seconds()
      by_name[name].run(program)
      totals[(name, program)][0] += time.perf_counter() - wall
      totals[(name, program)][1] += cpu_seconds() - cpu
    print(f"pass {n + 1} of {passes} ({slots:,} token slots a pass)", flush=True)
  return totals


def table(totals: dict, entries: list[str], slots: int, passes: int) -> list[str]:
  lines = [f"{'entry':<40} {'program':<20} {'wall s':>8} {'CPU s':>8} {'CPU ms/1k slots':>15} "
           f"{'grad/fwd':>8} {'grad vs first':>13}"]
  first = totals[(entries[0], PROGRAMS[1])][1]
  for name in entries:
    forward = totals[(name, PROGRAMS[0])][1]
    for program in PROGRAMS:
      wall, cpu = totals[(name, program)]
      ratio = f"{cpu / forward:.2f}" if program == PROGRAMS[1] else ""
      versus = f"{cpu / first:.3f}" if program == PROGRAMS[1] else ""
      lines.append(f"{name:<40} {program:<20} {wall:>8.2f} {cpu:>8.2f} "
                   f"{1e6 * cpu / slots / passes:>15.1f} {ratio:>8} {versus:>13}")
  return lines


def main(argv):
  del argv
  import jax
  from socialrm_jax.models import default_model
  from socialrm_jax.runtime import mesh as mesh_lib
  if not os.path.exists(default_model.resolve_model_path(_MODEL.value)):
    raise InputError("--model: no such model file or folder", _MODEL.value)
  for flag in (_STEPS, _BATCH_SIZE, _PASSES):
    if flag.value <= 0:
      raise InputError(f"--{flag.name} must be positive, got {flag.value}")
  names = setting_names()
  entries = list(dict.fromkeys(_COMPARE.value))
  if not entries:
    raise InputError("--compare names nothing to time")
  settings = {entry: parse_entry(entry, names) for entry in entries}
  rows = step_pairs(_PAIRS.value)
  mesh = mesh_lib.make_mesh(None)
  print(f"CPU: {cpu_name()}, {os.cpu_count()} cores, allocator {allocator()}; jax "
        f"{jax.__version__} on {jax.devices()[0].platform}; {_DTYPE.value}, "
        + (f"LoRA r {_LORA_RANK.value}" if _LORA_RANK.value else "full fine-tuning")
        + f"; {_STEPS.value} steps of {_BATCH_SIZE.value} pairs", flush=True)
  built = [build(entry, settings[entry], mesh, rows) for entry in entries]
  slots = built[0][1]
  totals = time_entries([entry for entry, _ in built], slots, _PASSES.value)
  print(f"\nCPU: {cpu_name()}, allocator {allocator()}; {_PASSES.value} passes")
  print("\n".join(table(totals, entries, slots, _PASSES.value)))


if __name__ == "__main__":
  command.run_command("benchmarks.training.train_step_profile", main)
