"""The device mesh (`--mesh data:8,model:1`), batch sharding, and multi-process start-up.

A scoring process builds its mesh over its own (local) devices: rows of a batch are split over
`data`, parameters over `model` (see `models/weights.py`). Several processes (hosts) each score
their own contiguous slice of the items on their own mesh and write their own shards; scoring needs
no communication between hosts, so none is done. `jax.distributed.initialize` still runs when a
launcher starts several processes, so JAX sees the whole job (and device ids are global).
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from socialrm_jax.errors import InputError

AXES = ("data", "model")


def parse_mesh_spec(spec: str | None, num_devices: int) -> dict[str, int]:
  """`"data:4,model:2"` -> {"data": 4, "model": 2}. Missing axes are 1; empty or None puts every
  device on `data`; one size may be -1 (whatever the other leaves)."""
  sizes = {"data": -1, "model": 1}
  if spec:
    sizes = {"data": 1, "model": 1}
    for part in spec.split(","):
      name, _, size = part.strip().partition(":")
      if name not in AXES or not size.lstrip("-").isdigit():
        raise InputError(f"bad --mesh entry {part!r}: expected NAME:SIZE with NAME in {AXES}, "
                         "e.g. data:8,model:1")
      sizes[name] = int(size)
  free = [name for name, size in sizes.items() if size == -1]
  if len(free) > 1:
    raise InputError(f"--mesh {spec!r}: at most one axis may be -1")
  if free:
    known = math.prod(size for size in sizes.values() if size != -1)
    if num_devices % known:
      raise InputError(f"--mesh {spec!r}: {num_devices} devices do not split by {known}")
    sizes[free[0]] = num_devices // known
  if math.prod(sizes.values()) != num_devices:
    raise InputError(f"--mesh {spec!r} holds {math.prod(sizes.values())} devices; this process "
                     f"has {num_devices}: the axis sizes must multiply to that")
  return sizes


def make_mesh(spec: str | None = None, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A `data` x `model` mesh over `devices` (default: this process's devices)."""
  devices = list(jax.local_devices() if devices is None else devices)
  sizes = parse_mesh_spec(spec, len(devices))
  grid = np.asarray(devices, dtype=object).reshape(sizes["data"], sizes["model"])
  return Mesh(grid, AXES, axis_types=(AxisType.Auto,) * len(AXES))


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Rows (the leading axis) split over `data`, the rest whole."""
  return NamedSharding(mesh, PartitionSpec("data"))


def describe(mesh: Mesh) -> str:
  return ",".join(f"{name}:{size}" for name, size in mesh.shape.items())


def initialize_distributed(coordinator_address: str | None, num_processes: int | None,
                           process_id: int | None, auto: bool) -> None:
  """Joins a multi-process job: with an explicit coordinator (the local launcher, Slurm scripts)
  or, with `auto`, from the environment JAX recognises (Cloud TPU pods, Slurm)."""
  if coordinator_address or auto:
    # CPU processes (the local launcher's) need a cross-process collective backend for the
    # barrier at the end of a run; accelerators bring their own.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if coordinator_address:
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id)
  elif auto:
    jax.distributed.initialize()
