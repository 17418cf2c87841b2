"""The jitted train step over the mesh, as the scoring step runs: batch rows split over `data`,
parameters and optimizer state where the loader placed them (split over `model`, FSDP-style),
the decoder's layers under `lax.scan`, one program a row length (a few, compiled once each).

The forward is the scorer's own (`models.readout.readouts` on a packed, prefix-shared row, read
at each candidate's last token), so training optimizes exactly the reward the project's commands
score. The loss is TRL's (`training.loss`).
"""

from __future__ import annotations

import functools
from typing import Mapping

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from socialrm_jax.models import attention
from socialrm_jax.models import readout as readout_lib
from socialrm_jax.scoring import mesh as mesh_lib
from socialrm_jax.training import loss as loss_lib
from socialrm_jax.training import trainable


def pair_rewards(model: trainable.TrainModel, params: Mapping[str, jax.Array], batch) -> jax.Array:
  """[B, 2] rewards (chosen, rejected) of a packed pair batch under `params` (compute dtype)."""
  module = nnx.merge(model.graphdef, trainable.nested(params), model.rest)
  layout = attention.Layout(batch["segment_ids"], batch["branch_ids"], True)
  readouts = readout_lib.readouts(
      module, batch["input_ids"], batch["positions"], layout, None, batch["readout_index"],
      jnp.zeros_like(batch["readout_index"]), "score")  # [B, 2, 1]
  return readouts[..., 0]


def full_params(trained, frozen, lora_scale: float, dtype):
  """The model's parameters in the compute dtype: trained ones cast, LoRA merged in."""
  base = {**frozen, **{p: v for p, v in trained.items() if p in frozen or not _is_lora(p)}}
  lora = {p: v for p, v in trained.items() if _is_lora(p)}
  params = trainable.apply_lora({p: v.astype(dtype) for p, v in base.items()}, lora, lora_scale)
  return params


def _is_lora(path: str) -> bool:
  return path.endswith("/" + trainable.LORA_A) or path.endswith("/" + trainable.LORA_B)


class TrainStep:
  """`loss_and_grads`, `step` (one micro-batch: gradients, then the optimizer's update) and
  `evaluate` (metrics only), each jitted once per batch shape under the mesh."""

  def __init__(self, model: trainable.TrainModel, tx: optax.GradientTransformation, mesh, *,
               dtype, lora_scale: float = 1.0, center_rewards_coefficient: float | None = None):
    self.model, self.tx, self.mesh = model, tx, mesh
    self.sharding = mesh_lib.batch_sharding(mesh)

    def loss_fn(trained, frozen, batch):
      rewards = pair_rewards(model, full_params(trained, frozen, lora_scale, dtype), batch)
      return loss_lib.pairwise_loss(rewards[:, 0], rewards[:, 1], batch["margin"],
                                    batch["weight"], center_rewards_coefficient)

    self._loss_fn = loss_fn
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step(trained, opt_state, frozen, batch):
      (_, metrics), grads = grad_fn(trained, frozen, batch)
      metrics["grad_norm"] = optax.global_norm(grads)
      updates, opt_state = tx.update(grads, opt_state, trained)
      return optax.apply_updates(trained, updates), opt_state, metrics

    self._step = jax.jit(step, donate_argnums=(0, 1))
    self._grads = jax.jit(grad_fn)
    self._evaluate = jax.jit(lambda trained, frozen, batch: loss_fn(trained, frozen, batch)[1])

  def put(self, arrays: Mapping) -> dict[str, jax.Array]:
    return {name: jax.device_put(value, self.sharding) for name, value in arrays.items()}

  def init(self, trained):
    with jax.set_mesh(self.mesh):
      return jax.jit(self.tx.init)(trained)

  def step(self, trained, opt_state, frozen, arrays):
    with jax.set_mesh(self.mesh):
      return self._step(trained, opt_state, frozen, self.put(arrays))

  def loss_and_grads(self, trained, frozen, arrays):
    """((loss, metrics), gradients of the loss by each trained parameter)."""
    with jax.set_mesh(self.mesh):
      return self._grads(trained, frozen, self.put(arrays))

  def evaluate(self, trained, frozen, arrays):
    with jax.set_mesh(self.mesh):
      return self._evaluate(trained, frozen, self.put(arrays))


@functools.partial(jax.jit, static_argnums=(2, 3))
def merged_params(trained, frozen, lora_scale: float, dtype):
  """The parameters a trained model ends on, LoRA merged (for the export and scoring)."""
  return full_params(trained, frozen, lora_scale, dtype)
