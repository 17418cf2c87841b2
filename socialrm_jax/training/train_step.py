"""The jitted train step over the mesh, as the scoring step runs: batch rows split over `data`,
parameters, their gradient sums and the optimizer state split over the whole mesh (FSDP,
`training/fsdp.py`: each program holds its outputs to those shardings, so a step's state comes
back as it went in), the decoder's layers under `lax.scan`, one program a block shape (a few,
compiled once each).

The forward is the scorer's own (`models.readout.readouts` on a packed, prefix-shared row, read
at each candidate's last token), so training optimizes exactly the reward the project's commands
score. The loss is TRL's (`training.loss`).
"""

from __future__ import annotations

import functools
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from socialrm_jax.models import attention
from socialrm_jax.models import readout as readout_lib
from socialrm_jax.models import trunk
from socialrm_jax.runtime import global_arrays
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.training import fsdp
from socialrm_jax.training import loss as loss_lib
from socialrm_jax.training import trainable


def pair_rewards(model: trainable.TrainModel, params: Mapping[str, jax.Array], batch) -> jax.Array:
  """[R, K, 2] rewards (chosen, rejected) of the K pair slots of a block's R packed rows under
  `params` (compute dtype)."""
  module = nnx.merge(model.graphdef, trainable.nested(params), model.rest)
  layout = attention.Layout(batch["segment_ids"], batch["branch_ids"], True)
  rows, slots, _ = batch["readout_index"].shape
  index = batch["readout_index"].reshape(rows, 2 * slots)
  readouts = readout_lib.readouts(module, batch["input_ids"], batch["positions"], layout, None,
                                  index, jnp.zeros_like(index), "score")  # [R, 2K, 1]
  return readouts[..., 0].reshape(rows, slots, 2)


def full_params(trained, frozen, lora_scale: float, dtype):
  """The model's parameters in the compute dtype, LoRA's adapters beside their targets (B times
  alpha / r: `layers.Projection` adds (x A) B)."""
  params = {p: v.astype(dtype) for p, v in _base_params(trained, frozen).items()}
  for path, value in trained.items():
    if _is_lora(path):  # '<projection>/kernel/lora_b' -> the projection's 'lora_b'
      kernel, name = path.rsplit("/", 1)
      scaled = value * lora_scale if name == trainable.LORA_B else value
      params[f"{kernel.rsplit('/', 1)[0]}/{name}"] = scaled.astype(dtype)
  return params


def _base_params(trained, frozen) -> dict:
  """The model's own parameters, trained or frozen (LoRA's adapters left out)."""
  return {**frozen, **{p: v for p, v in trained.items() if not _is_lora(p)}}


def _is_lora(path: str) -> bool:
  return path.endswith("/" + trainable.LORA_A) or path.endswith("/" + trainable.LORA_B)


class TrainStep:
  """One optimizer step over a step's blocks (`training.pair_batches.pack_pairs`): each block's
  summed loss and its gradients added up (`accumulate`, jitted once per block shape), then divided
  by the step's pair count and given to the optimizer (`update`, jitted once). `loss_and_grads`
  and `evaluate` read the same sums."""

  def __init__(self, model: trainable.TrainModel, tx: optax.GradientTransformation, mesh, *,
               dtype, lora_scale: float = 1.0, center_rewards_coefficient: float | None = None):
    self.model, self.tx, self.mesh = model, tx, mesh
    self.sharding = mesh_lib.batch_sharding(mesh)
    # Each parameter's `model` axis as the loader split it, which FSDP keeps.
    self.model_axes = {path: source.model_axis
                       for path, source in model.family.weight_sources(model.config).items()}
    hold = functools.partial(fsdp.constrain, mesh=mesh, model_axes=self.model_axes)
    hold_state = functools.partial(fsdp.constrain_state, mesh=mesh, model_axes=self.model_axes)
    self.whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())  # every device
    hold_sums = lambda sums: jax.lax.with_sharding_constraint(sums, self.whole)

    def rewards_of(trained, frozen, batch):
      return pair_rewards(model, full_params(trained, frozen, lora_scale, dtype), batch)

    def block_sums(trained, frozen, batch):
      rewards = rewards_of(trained, frozen, batch)
      sums = loss_lib.pair_sums(rewards[..., 0].reshape(-1), rewards[..., 1].reshape(-1),
                                batch["margin"].reshape(-1), batch["weight"].reshape(-1),
                                center_rewards_coefficient)
      return sums["loss"], sums

    grad_fn = jax.value_and_grad(block_sums, has_aux=True)

    def accumulate(grads, sums, trained, frozen, batch):
      (_, block), block_grads = grad_fn(trained, frozen, batch)
      return (hold(jax.tree.map(jnp.add, grads, block_grads)),
              hold_sums(loss_lib.add_sums(sums, block)))

    def update(trained, opt_state, grads, sums):
      grads = jax.tree.map(lambda g: g / jnp.maximum(sums["pairs"], 1.0), grads)
      metrics = loss_lib.means(sums)
      metrics["grad_norm"] = optax.global_norm(grads)
      updates, opt_state = tx.update(grads, opt_state, trained)
      return hold(optax.apply_updates(trained, updates)), hold_state(opt_state), metrics

    def evaluate(sums, trained, frozen, batch):
      return hold_sums(loss_lib.add_sums(sums, block_sums(trained, frozen, batch)[1]))

    # The jitted programs (benchmarks/training/train_step_profile.py times them); those that run
    # the layers with the options of the model's parameters (bfloat16 on CPU: widened a layer at
    # a time, as scoring's).
    layers = trunk.compiler_options(model.params)
    self.zeros = jax.jit(lambda trained: hold(jax.tree.map(jnp.zeros_like, trained)))
    self.accumulate = jax.jit(accumulate, donate_argnums=(0, 1),  # grads, sums += a block's
                              compiler_options=layers)
    self.update = jax.jit(update, donate_argnums=(0, 1))  # the optimizer's step
    self.add_block_sums = jax.jit(evaluate, donate_argnums=(0,),  # sums += a block's, no grads
                                  compiler_options=layers)
    self._init = jax.jit(lambda trained: hold_state(tx.init(trained)))

  def _abstract_outputs(self, program, *args):
    """What jitted `program` returns for `args`, abstract (`abstract_outputs`)."""
    with jax.set_mesh(self.mesh):
      return abstract_outputs(program.trace(*args).lower().compile())

  def abstract_opt_state(self, trained):
    """The optimizer state `init` makes for `trained`, abstract (see `_abstract_outputs`)."""
    return self._abstract_outputs(self._init, trained)

  def abstract_grads(self, trained):
    """The zero gradients a step starts its sums from, abstract (see `_abstract_outputs`)."""
    return self._abstract_outputs(self.zeros, trained)

  def abstract_sums(self):
    """The loss sums a step starts from (`loss.no_sums`, made on the host), abstract."""
    return jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=self.whole),
                        jax.eval_shape(loss_lib.no_sums))

  # The programs of `step`, traced for abstract arguments (`jax.ShapeDtypeStruct`s with
  # shardings), so a plan compiles them for a target it does not have (`socialrm_jax.main.plan`).

  def trace_accumulate(self, grads, trained, frozen, block: Mapping) -> jax.stages.Traced:
    """A block's loss and gradients added to the sums (`grads`: the gradients so far)."""
    with jax.set_mesh(self.mesh):
      return self.accumulate.trace(grads, self.abstract_sums(), trained, frozen, block)

  def trace_update(self, trained, opt_state, grads) -> jax.stages.Traced:
    """The optimizer's step on the summed gradients."""
    with jax.set_mesh(self.mesh):
      return self.update.trace(trained, opt_state, grads, self.abstract_sums())

  def put(self, arrays: Mapping) -> dict[str, jax.Array]:
    """A block's arrays on the mesh, rows split over `data`; over several processes each places
    only the rows its own devices hold (`global_arrays.put_process_rows`)."""
    return {name: global_arrays.put_process_rows(value, self.sharding)
            for name, value in arrays.items()}

  def replicated(self, tree):
    """Host values every process holds alike (the RNG key, LoRA's initial adapters, the empty
    sums) as arrays whole on every device of the mesh, which may span processes."""
    return jax.tree.map(lambda v: global_arrays.put_global(np.asarray(v), self.whole), tree)

  def place(self, params: Mapping) -> dict:
    """Flat parameters (trained or frozen; arrays or abstract) at their FSDP shardings, where
    every program of the step takes and returns them."""
    return fsdp.place(params, self.mesh, self.model_axes)

  def init(self, trained):
    """The optimizer state of `trained` (placed: `place`), sharded as they are."""
    with jax.set_mesh(self.mesh):
      return self._init(trained)

  def _sums_and_grads(self, trained, frozen, blocks: Sequence[Mapping]):
    grads, sums = self.zeros(trained), self.replicated(loss_lib.no_sums())
    for arrays in blocks:
      grads, sums = self.accumulate(grads, sums, trained, frozen, self.put(arrays))
    return grads, sums

  def step(self, trained, opt_state, frozen, blocks: Sequence[Mapping]):
    """One optimizer step over a step's blocks -> (trained, opt_state, TRL's metrics)."""
    with jax.set_mesh(self.mesh):
      grads, sums = self._sums_and_grads(trained, frozen, blocks)
      return self.update(trained, opt_state, grads, sums)

  def loss_and_grads(self, trained, frozen, blocks: Sequence[Mapping]):
    """((loss, metrics), gradients of the loss by each trained parameter) over the blocks' pairs,
    as one batch's mean."""
    with jax.set_mesh(self.mesh):
      grads, sums = self._sums_and_grads(trained, frozen, blocks)
    count = jnp.maximum(sums["pairs"], 1.0)
    metrics = loss_lib.means(sums)
    return (metrics["loss"], metrics), jax.tree.map(lambda g: g / count, grads)

  def evaluate(self, trained, frozen, blocks: Sequence[Mapping]):
    """TRL's metrics over the blocks' pairs (each pair weighted alike)."""
    sums = self.replicated(loss_lib.no_sums())
    with jax.set_mesh(self.mesh):
      for arrays in blocks:
        sums = self.add_block_sums(sums, trained, frozen, self.put(arrays))
    return loss_lib.means(sums)


def abstract_outputs(compiled: jax.stages.Compiled):
  """A compiled program's outputs as `jax.ShapeDtypeStruct`s with the shardings it gives them
  (no memory: what a plan feeds the next program, `socialrm_jax.main.plan`)."""
  return jax.tree.map(lambda info, sharding: jax.ShapeDtypeStruct(
      info.shape, info.dtype, sharding=sharding), compiled.out_info, compiled.output_shardings)


@functools.partial(jax.jit, static_argnums=(2, 3))
def merged_params(trained, frozen, lora_scale: float, dtype):
  """The parameters a trained model ends on, LoRA merged (for the export and scoring)."""
  lora = {p: v for p, v in trained.items() if _is_lora(p)}
  return trainable.apply_lora({p: v.astype(dtype) for p, v in _base_params(trained, frozen).items()},
                              lora, lora_scale)
