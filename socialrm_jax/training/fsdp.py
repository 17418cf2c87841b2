"""Where training's state lives on the mesh: FSDP, as MaxText and levanter train.

Every trained parameter, its gradient sum and its optimizer moments, and every frozen weight, is
split over the mesh: over `model` as the loader splits it (`models/weights.py`, the parameter's
`WeightSource.model_axis`), and over `data` along its largest other axis that the `data` axis
divides (never a stacked layer parameter's [L] axis, which the scan indexes). The step's programs
gather a layer's weights where its products need them (XLA's SPMD partitioner inserts the
all-gathers inside the scanned layer, and reduce-scatters the gradients), so each device holds
1 / devices of the model's state rather than all of it. A tensor no axis of which divides stays
replicated over `data`.

The rule depends on a parameter's path and shape only, so the programs constrain their outputs
to it (`constrain`) and the state a step returns is sharded as it came in: one compiled program
a block shape, whatever the step.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from socialrm_jax.models import weights

DATA_AXIS = "data"
# Paths of parameters whose leading axis is the stacked layers' (`trunk.stack_layers`).
LAYERS_PREFIX = "layers/"


def partition_spec(path: str, shape: tuple[int, ...], mesh: Mesh,
                   model_axes: Mapping[str, int | None]) -> PartitionSpec:
  """The parameter at `path` [shape]: its `model` split (`model_axes[path]`, as loaded), and its
  largest other axis that divides by the `data` axis's size split over `data`."""
  spec = list(weights.partition_spec(shape, model_axes.get(path), mesh))
  spec += [None] * (len(shape) - len(spec))
  data = mesh.shape.get(DATA_AXIS, 1)
  if data > 1:
    first = 1 if path.startswith(LAYERS_PREFIX) else 0
    free = [axis for axis in range(first, len(shape))
            if spec[axis] is None and shape[axis] % data == 0]
    if free:
      spec[max(free, key=lambda axis: (shape[axis], -axis))] = DATA_AXIS
  return PartitionSpec(*spec)


def shardings(params: Mapping[str, Any], mesh: Mesh,
              model_axes: Mapping[str, int | None]) -> dict[str, NamedSharding]:
  """{path: NamedSharding} for flat parameters (arrays or `jax.ShapeDtypeStruct`s)."""
  return {path: NamedSharding(mesh, partition_spec(path, tuple(value.shape), mesh, model_axes))
          for path, value in params.items()}


def place(params: Mapping[str, Any], mesh: Mesh,
          model_axes: Mapping[str, int | None]) -> dict[str, Any]:
  """Flat parameters moved to their FSDP shardings (abstract ones given them). Moved by a program
  that constrains them as the step's programs constrain their outputs, so that they come out
  sharded exactly as a step returns them (one compiled program for both); it reshards arrays
  that span several processes as well as local ones."""
  if all(isinstance(v, jax.ShapeDtypeStruct) for v in params.values()):
    target = shardings(params, mesh, model_axes)
    return {p: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=target[p])
            for p, v in params.items()}
  return jax.jit(lambda params: constrain(params, mesh, model_axes))(dict(params))


def constrain(params: Mapping[str, jax.Array], mesh: Mesh,
              model_axes: Mapping[str, int | None]) -> dict[str, jax.Array]:
  """Inside a program: flat parameters (or their gradients) held to their FSDP shardings."""
  return {path: jax.lax.with_sharding_constraint(params[path], sharding)
          for path, sharding in shardings(params, mesh, model_axes).items()}


def constrain_state(state: Any, mesh: Mesh, model_axes: Mapping[str, int | None]) -> Any:
  """Inside a program: an optax state held to FSDP: each leaf kept under a parameter's path (the
  moments, MultiSteps' gradient sums) sharded as that parameter, the others (counts) replicated."""
  replicated = NamedSharding(mesh, PartitionSpec())

  def leaf(key_path, value):
    names = [k.key for k in key_path if isinstance(k, jax.tree_util.DictKey)]
    if names and getattr(value, "ndim", 0):
      spec = partition_spec(str(names[-1]), tuple(value.shape), mesh, model_axes)
      return jax.lax.with_sharding_constraint(value, NamedSharding(mesh, spec))
    return jax.lax.with_sharding_constraint(value, replicated)

  return jax.tree_util.tree_map_with_path(leaf, state)
