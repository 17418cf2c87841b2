"""`socialrm-train`'s step compiled for a target with abstract parameters, as `compiler` does the
scorer's: the same `training.train_step.TrainStep`, built by the run's own `trainer.build_step`
(its "accumulate" program once for each block shape a run packs, its "update" program once; the
optimizer and LoRA's scale as a run of `training.config.TrainConfig` has them), the
trained and frozen parameters as `trainable.split_trainable` and `init_lora` make them (float32
trained copies, LoRA's A and B), every one a `jax.ShapeDtypeStruct` with the sharding the loader
gives it, and the block shapes of `training.pair_batches.pair_packing` on the target's platform.

A block shape's memory is its accumulate program's (parameters, gradients, the block, the
activations its backward pass keeps) plus the optimizer state, which stays on the device while
it runs; the update program's is its own plus the frozen parameters. The larger is the step's.
Each program gets its arguments sharded as the run's would come (the optimizer state and the zero
gradients as their own programs make them, the summed gradients as the accumulate program
returns them); gradients that come back sharded otherwise than they went in would compile a
second accumulate program in every step, and are a failure.

A step that does not fit is compiled again with the remedies socialrm-train has, cheapest first
(`fitting_remedy`: --remat_policy=full, then --tokens_per_block halved), and the plan names the
first that fits.

socialrm-train's mesh spans every device of the job (`orchestrators.train.training_mesh`), not one
scoring group's: `job_setup` lays the scoring group's `model` axis and `data` over all of the
target's devices (v5e:4x4 on 4 hosts with --mesh=data:4,model:1: data:16), and the plan says each
host's share of a block's rows and of a micro-batch's pairs (`host_share`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from socialrm_jax.base import settings as settings_lib
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import reward_model, weights
from socialrm_jax.orchestrators import train
from socialrm_jax.orchestrators.plan import compiler, programs
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.training import pair_batches, trainable, trainer
from socialrm_jax.training import train_step as train_step_lib

MODES = ("full", "lora")
# The settings of socialrm-train a plan takes as its own flags; the rest (max_length, dtype, mesh,
# attention) are the plan's scoring flags of the same names.
PLANNED_TRAINING = ("row_length", "tokens_per_block", "batch_size", "lora_rank", "lora_alpha",
                    "lora_targets", "remat_policy")
# A plan's LoRA rank unless --lora_rank says (socialrm-train's own default, 0, trains in full).
PLAN_LORA_RANK = 16


def abstract_train_model(setup: compiler.AbstractScorer, hf_config: dict, source: str,
                         remat_policy: str = "auto") -> trainable.TrainModel:
  """The base `trainable.load_base` would give for `hf_config`, abstract, on the plan's mesh: a
  one-output score head (a causal LM gets a new one, as the loader gives it, unsplit), its layers
  keeping `remat_policy`'s residuals for the backward pass."""
  config, family = setup.config, setup.family
  if config.reward_head is not None or (
      config.head == "score" and config.num_labels != 1) or config.head not in ("score", "lm"):
    raise InputError("--train: socialrm-train trains decoders with a one-output score head (or a "
                     f"causal LM, which gets one); {config.architecture} has another head")
  if not family.IS_CAUSAL:
    raise InputError(f"--train: {config.architecture} is not a decoder; only decoders train")
  new_head = config.head == "lm"
  if new_head:
    config = dataclasses.replace(
        config, head="score", num_labels=1,
        architecture=trainable.sequence_classifier(config.architecture, family))
  module = reward_model.abstract_module(family, config, setup.dtype, setup.attention,
                                        remat_policy)
  weights.abstract_params(module, family.weight_sources(config), setup.mesh)
  params = {p: v.get_value() for p, v in weights.param_paths(module).items()}
  if new_head:  # placed as load_base places the head it draws
    shape = params[trainable.SCORE_KERNEL].shape
    params[trainable.SCORE_KERNEL] = jax.ShapeDtypeStruct(
        shape, params[trainable.SCORE_KERNEL].dtype,
        sharding=weights.param_sharding(tuple(shape), None, setup.mesh))
  graphdef, _, rest = nnx.split(module, nnx.Param, ...)
  return trainable.TrainModel(family, config, graphdef, params, rest, module, source, hf_config,
                              setup.attention)


def _as(leaf, dtype, sharding=None) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct(leaf.shape, dtype, sharding=sharding or leaf.sharding)


def _with_paths(a, b):
  """(path, leaf of a, leaf of b) of two trees of one structure."""
  return [(path, x, y) for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a),
                                              jax.tree.leaves(b))]


def trained_and_frozen(model: trainable.TrainModel, config: train.TrainConfig, mesh):
  """(trained, frozen) as `trainer.run_setup` makes them, abstract: the trained parameters in
  float32 (`trainable.split_trainable`), LoRA's A and B where it trains (`init_lora`'s shapes,
  on every device as the run's host-made arrays are)."""
  lora = config.lora
  trained = {p: _as(v, jnp.float32) for p, v in model.params.items()
             if trainable.is_trained(p, lora.enabled)}
  frozen = {p: v for p, v in model.params.items() if not trainable.is_trained(p, lora.enabled)}
  if lora.enabled:
    targets = trainable.lora_targets(model, lora.lora_targets)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    # Not under eval_shape: init_lora also attaches the adapters to the model's projections (a
    # module mutated inside a trace is refused); the adapters are small and made once.
    adapters = trainable.init_lora(model, targets, lora.lora_rank, 0)
    trained.update({p: _as(v, v.dtype, replicated) for p, v in adapters.items()})
  return trained, frozen


def block_shapes(config: train.TrainConfig, platform: str,
                 data_size: int) -> list[tuple[int, int]]:
  """(rows, row length) of the largest block of each row length a run packs
  (`pair_batches.pair_packing`, with --tokens_per_block): pairs go to rows of `row_length`, or of
  a longer bucket."""
  pairs = config.pairs
  packing_args = pair_batches.pair_packing(pairs.row_length, pairs.max_length, platform,
                                           data_size, pairs.tokens_per_block)
  rows = packing_args["rows_per_block"]
  return [(rows, length) for length in packing_args["buckets"]
          if length >= packing_args["row_length"]]


def abstract_block(rows: int, length: int, mesh) -> dict[str, jax.ShapeDtypeStruct]:
  """A block's arrays (`pair_batches.PairBlock`) as the step receives them: rows over `data`."""
  sharding = mesh_lib.batch_sharding(mesh)
  return {name: jax.ShapeDtypeStruct(array.shape, array.dtype, sharding=sharding)
          for name, array in pair_batches.empty_block(rows, length).arrays().items()}


def settings_for(options, training: train.TrainConfig, mode: str) -> train.TrainConfig:
  """socialrm-train's settings of a plan: its max_length, dtype, mesh and attention, and the
  training flags (`mode` "full" trains every parameter, "lora" adapters of --lora_rank)."""
  rank = training.lora.lora_rank
  if mode == "lora" and rank < 1:
    raise InputError(f"--train=lora needs --lora_rank of 1 or more, got {rank}")
  config = settings_lib.replace(training, max_length=options.max_length, dtype=options.dtype,
                                mesh=options.mesh, attention=options.attention,
                                lora_rank=rank if mode == "lora" else 0)
  train.check(settings_lib.replace(config, model="plan", data=("plan",), output_dir="plan"))
  return config


def command_flags(config: train.TrainConfig) -> str:
  """The socialrm-train flags that make the planned step (`target_settings`' own)."""
  pairs, lora = config.pairs, config.lora
  flags = [f"--dtype={config.dtype}", f"--max_length={pairs.max_length}",
           f"--row_length={pairs.row_length}", f"--tokens_per_block={pairs.tokens_per_block}",
           f"--attention={config.attention}", f"--remat_policy={config.remat_policy}"]
  if config.mesh:
    flags.append(f"--mesh={config.mesh}")
  if lora.enabled:
    flags += [f"--lora_rank={lora.lora_rank}", f"--lora_alpha={lora.lora_alpha:g}",
              f"--lora_targets={','.join(lora.lora_targets)}"]
  return " ".join(flags)


def target_settings(config: train.TrainConfig, setup: compiler.AbstractScorer
                    ) -> train.TrainConfig:
  """`config` as socialrm-train runs it on the plan's target, each setting named as it takes
  effect there: the plan's mesh, the attention its model computes (`auto` resolved), and the
  --tokens_per_block of its blocks' rows of --row_length (the default's where 0)."""
  mesh = setup.mesh
  (rows, _), *_ = block_shapes(config, mesh.devices.flat[0].platform, mesh.shape["data"])
  row_length = pair_batches.packed_row_length(config.pairs.row_length, config.pairs.max_length)
  return settings_lib.replace(config, mesh=mesh_lib.describe(mesh), attention=setup.attention,
                              tokens_per_block=rows * row_length)


def job_setup(setup: compiler.AbstractScorer) -> compiler.AbstractScorer:
  """`setup` with socialrm-train's mesh: every device of the target, the scoring group's `model`
  axis kept and `data` grown over the groups (each of which is then some of training's rows)."""
  sizes = setup.mesh.shape
  spec = f"data:{sizes['data'] * setup.groups},model:{sizes['model']}"
  return dataclasses.replace(setup, mesh=mesh_lib.make_mesh(spec, devices=setup.topology.devices))


def host_share(mesh) -> dict[str, int]:
  """How a global batch divides among the hosts of `mesh`: `hosts`, and `data_per_host`, the
  positions along `data` whose rows one host's devices hold (the same for every host of a mesh
  laid over whole hosts; each feeds only those rows, `global_arrays.put_process_rows`)."""
  held: dict[int, set[int]] = {}
  for position, row in enumerate(mesh.devices):
    for device in row:
      held.setdefault(device.process_index, set()).add(position)
  shares = {len(positions) for positions in held.values()}
  if len(shares) != 1:
    raise InputError(f"the training mesh {mesh_lib.describe(mesh)} gives hosts unequal shares of "
                     "a batch; choose a data axis that divides over the hosts")
  return {"hosts": len(held), "data_per_host": shares.pop()}


class _Programs:
  """socialrm-train's step of `config` on the plan's target and its programs' abstract arguments
  (as `trainer.run_setup` places them): `block` compiles the accumulate program of a block shape,
  `update` the optimizer's."""

  def __init__(self, setup: compiler.AbstractScorer, model: trainable.TrainModel,
               config: train.TrainConfig):
    self.setup, mesh = setup, setup.mesh
    # The schedule's length shapes no program.
    self.step, _ = trainer.build_step(config, model, mesh, total_steps=1000)
    self.trained, self.frozen = (self.step.place(params)
                                 for params in trained_and_frozen(model, config, mesh))
    self.opt_state = self.step.abstract_opt_state(self.trained)
    self.zeros = self.step.abstract_grads(self.trained)
    self.resident = {"trained": compiler.bytes_per_device(self.trained),
                     "frozen": compiler.bytes_per_device(self.frozen),
                     "optimizer_state": compiler.bytes_per_device(self.opt_state)}
    self.share = host_share(mesh)

  def block(self, rows: int, length: int) -> tuple[dict[str, Any], Any]:
    """A block shape's accumulate program compiled: (its entry, the summed gradients it returns,
    abstract; None when not compiled). Its memory adds the optimizer state, resident meanwhile."""
    setup, mesh, resident = self.setup, self.setup.mesh, self.resident
    start = time.perf_counter()
    traced = compiler.trace_step(self.step.trace_accumulate, self.zeros, self.trained, self.frozen,
                                 abstract_block(rows, length, mesh), attention=setup.attention)
    compiled, entry = compiler.compile_traced(
        traced, mesh, setup.attention, parameter_bytes=resident["trained"] + resident["frozen"])
    summed = None
    if compiled is not None:
      summed = train_step_lib.abstract_outputs(compiled)[0]
      moved = [compiler.path_name(path) for path, z, g in _with_paths(self.zeros, summed)
               if not z.sharding.is_equivalent_to(g.sharding, len(z.shape))]
      if moved:  # the next block of a step gets them so: a second program of this shape
        entry["failures"].append(
            f"the summed gradients come back sharded otherwise than they went in "
            f"({', '.join(moved[:3])}{' ...' if len(moved) > 3 else ''}): every block after "
            "a step's first compiles a second program")
    program_bytes = (entry.get("needed_bytes") if entry["memory"] is None
                     else entry["memory"]["total"])
    used = None if program_bytes is None else program_bytes + resident["optimizer_state"]
    capacity = setup.topology.usable_bytes
    entry.update(shape=[rows, length], tokens=rows * length, device_bytes=used,
                 rows_per_host=rows * self.share["data_per_host"] // mesh.shape["data"],
                 capacity_bytes=capacity, fits=used is not None and used <= capacity,
                 compile_seconds=round(time.perf_counter() - start, 2))
    return entry, summed

  def update(self, summed) -> tuple[dict[str, Any], float]:
    """The optimizer's update compiled, given the summed gradients as a block returns them:
    (its entry, with `device_bytes` adding the frozen parameters, resident meanwhile; seconds)."""
    start = time.perf_counter()
    # The update computes no attention: none is asked of it.
    _, update = compiler.compile_traced(
        self.step.trace_update(self.trained, self.opt_state, summed), self.setup.mesh, "xla")
    if update["memory"] is not None:
      update["device_bytes"] = update["memory"]["total"] + self.resident["frozen"]
    return update, time.perf_counter() - start


def _update_fits(update: dict | None, capacity: int) -> bool:
  return update is not None and update.get("device_bytes") is not None and (
      update["device_bytes"] <= capacity)


def compile_training(setup: compiler.AbstractScorer, model: trainable.TrainModel,
                     config: train.TrainConfig, progress: compiler.Progress | None = None
                     ) -> dict[str, Any]:
  """socialrm-train's step with `config` compiled for the plan's target: per block shape its
  memory, kernel, collectives and failures (see the module doc), and the update program's; a
  `progress` line a program."""
  mesh, capacity = setup.mesh, setup.topology.usable_bytes
  config = target_settings(config, setup)
  programs_of = _Programs(setup, model, config)
  resident, share = programs_of.resident, programs_of.share
  data_size = mesh.shape["data"]
  blocks, update, summed = [], None, None
  shapes = block_shapes(config, mesh.devices.flat[0].platform, data_size)
  progress = progress or compiler.Progress()
  progress.start(f"training ({'lora' if config.lora.enabled else 'full'})", len(shapes) + 1)  # and the update
  with programs.CompileCounter() as counter:
    for rows, length in shapes:
      entry, block_summed = programs_of.block(rows, length)
      summed = block_summed if block_summed is not None else summed
      blocks.append(entry)
      progress.compiled(f"block {rows}x{length}", entry["compile_seconds"], entry["device_bytes"],
                        entry["fits"])
    if summed is not None:
      update, seconds = programs_of.update(summed)
      progress.compiled("update", seconds, update.get("device_bytes"),
                        _update_fits(update, capacity))
  failures = []
  if counter.count > len(shapes) + 1:  # accumulate a block shape, and the update once
    failures.append(f"{counter.count} programs compiled for {len(shapes)} block shapes and the "
                    "update")
  off_dtype = compiler.off_dtype_parameters(programs_of.frozen, setup.dtype)
  if off_dtype:
    failures.append(f"frozen parameters not in {jnp.dtype(setup.dtype).name}, copied to it in "
                    f"every step: {', '.join(off_dtype)}")
  peak = max([b["device_bytes"] or 0 for b in blocks]
             + [(update or {}).get("device_bytes") or 0])
  per_host = config.loop.batch_size * share["data_per_host"] / data_size
  return {"mode": "lora" if config.lora.enabled else "full", "flags": command_flags(config),
          **share, "batch_size": config.loop.batch_size,
          "pairs_per_host": int(per_host) if per_host == int(per_host) else None,
          "resident_bytes": resident, "blocks": blocks, "update": update,
          "fits": all(b["fits"] for b in blocks) and peak <= capacity,
          "compilations": counter.count, "failures": failures}


# What --remat_policy a remedy sets: nothing kept for the backward pass but each layer's input.
REMEDY_REMAT_POLICY = "full"


def remedies(config: train.TrainConfig, setup: compiler.AbstractScorer) -> list[dict[str, Any]]:
  """The settings a step of `config` that does not fit may fit with, cheapest first, each as
  {flag: value} of what it changes: --remat_policy=full where not already (the backward pass
  recomputes each layer), then with it --tokens_per_block halved, down to one row of --row_length
  a device of the data axis (more blocks a step, each smaller)."""
  asked = target_settings(config, setup)
  tokens, policy = asked.pairs.tokens_per_block, asked.remat_policy
  smallest = pair_batches.packed_row_length(asked.pairs.row_length,
                                            asked.pairs.max_length) * setup.mesh.shape["data"]
  tries = []
  if policy != REMEDY_REMAT_POLICY:
    tries.append({"remat_policy": REMEDY_REMAT_POLICY})
  rows_tried = {tokens}
  halved = tokens // 2
  while halved >= smallest:
    resolved = target_settings(settings_lib.replace(config, tokens_per_block=halved), setup)
    if resolved.pairs.tokens_per_block not in rows_tried:  # rounded to the data axis: a new size
      rows_tried.add(resolved.pairs.tokens_per_block)
      tries.append({"remat_policy": REMEDY_REMAT_POLICY,
                    "tokens_per_block": resolved.pairs.tokens_per_block})
    halved //= 2
  return tries


def remedy_flags(changes: dict[str, Any]) -> str:
  return " ".join(f"--{name}={value}" for name, value in changes.items())


def fitting_remedy(setup: compiler.AbstractScorer, hf_config: dict, source: str,
                   config: train.TrainConfig, step: dict[str, Any],
                   progress: compiler.Progress | None = None) -> dict[str, Any] | None:
  """For a `step` (`compile_training`'s, of `config`) that does not fit: the first of its
  `remedies` whose every program fits, each compiled in turn, its longest rows' block first (the
  likeliest not to fit) and left at its first block that does not fit; the update too where the
  step's own was not compiled. {"tried": [each try's flags], "fits": {"flags", the settings it
  changes, "device_bytes": its largest program's} or None: none fits}. None (nothing tried) when
  the step fits, when a block of it failed a check, or when its update does not fit (no block
  setting changes its memory). A `progress` line a program, naming the try."""
  capacity = setup.topology.usable_bytes
  if step["fits"] or any(entry["failures"] for entry in step["blocks"]):
    return None
  update = step["update"]
  if update is not None and (update["failures"] or not _update_fits(update, capacity)):
    return None
  progress = progress or compiler.Progress()
  model = abstract_train_model(setup, hf_config, source, REMEDY_REMAT_POLICY)
  mode = "lora" if config.lora.enabled else "full"
  platform, data_size = setup.mesh.devices.flat[0].platform, setup.mesh.shape["data"]
  tried = []
  for changes in remedies(config, setup):
    flags = remedy_flags(changes)
    tried.append(flags)
    trial = target_settings(settings_lib.replace(config, **changes), setup)
    programs_of = _Programs(setup, model, trial)
    shapes = block_shapes(trial, platform, data_size)
    progress.start(f"training ({mode})", len(shapes) + (update is None),
                   f"a remedy: {flags}")
    worst, summed = 0, None
    for rows, length in reversed(shapes):
      entry, summed = programs_of.block(rows, length)
      progress.compiled(f"block {rows}x{length}", entry["compile_seconds"], entry["device_bytes"],
                        entry["fits"])
      if not entry["fits"]:
        break
      worst = max(worst, entry["device_bytes"])
    else:
      if update is None:
        trial_update, seconds = programs_of.update(summed)
        fits = _update_fits(trial_update, capacity)
        progress.compiled("update", seconds, trial_update.get("device_bytes"), fits)
        if not fits:  # no block setting changes the update's memory
          return {"tried": tried, "fits": None}
        worst = max(worst, trial_update["device_bytes"])
      return {"tried": tried, "fits": {"flags": flags, **changes, "device_bytes": worst}}
  return {"tried": tried, "fits": None}
