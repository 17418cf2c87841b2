"""The device mesh (`--mesh data:8,model:1`), batch sharding, and multi-process start-up.

The mesh is laid on the devices' physical topology (`device_grid`, JAX's `create_device_mesh`):
on a TPU slice the `model` axis runs along neighbouring chips.

Rows of a batch are split over `data`, parameters over `model` (see `models/weights.py`). A
*data-parallel group* is the set of processes one mesh spans:
- a model that fits on one host's devices: each process builds its mesh over its own devices, so
  each process is its own group, scores its own contiguous slice of the items and writes its own
  shards; no communication between hosts;
- a `model` axis larger than a host's devices (a multiple of them): the mesh spans that many
  whole processes, which form one group, run the same batches together (each feeding only its own
  devices' slices, see `global_arrays.put_global`), and the group's first process writes its
  shards.
`jax.distributed.initialize` runs when a launcher starts several processes, so JAX sees the whole
job (and device ids are global): `runtime/distributed.py`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax
import numpy as np
from absl import logging
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from socialrm_jax.base.errors import InputError

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


def _model_axis_size(spec: str | None) -> int | None:
  for part in (spec or "").split(","):
    name, _, size = part.strip().partition(":")
    if name == "model" and size.isdigit():
      return int(size)
  return None


def make_mesh(spec: str | None = None, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A `data` x `model` mesh over `devices` (default: this process's group, `group_devices`),
  laid on the devices' physical topology (`device_grid`)."""
  if devices is None:
    devices = group_devices(spec, jax.devices(), jax.process_index())
  devices = list(devices)
  sizes = parse_mesh_spec(spec, len(devices))
  return Mesh(device_grid((sizes["data"], sizes["model"]), devices), AXES,
              axis_types=(AxisType.Auto,) * len(AXES))


def device_grid(shape: tuple[int, int], devices: Sequence[jax.Device]) -> np.ndarray:
  """`devices` as a [data, model] array placed by the physical topology: on a TPU slice, JAX's
  `mesh_utils.create_device_mesh` (what `jax.make_mesh` calls) maps the `model` axis, the one whose
  collectives run every layer, onto neighbouring chips of the torus (and `data` across), splitting
  a physical axis where the shape needs it; on GPUs it orders by device id, on CPUs it keeps the
  order given. Devices that form no whole cuboid (a group over hosts of several slices) keep the
  order given, with a warning: the run is the same, its collectives may be slower."""
  try:
    return mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
  except (ValueError, NotImplementedError, AssertionError) as error:
    reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
    logging.warning("mesh %s over %d %s devices: not laid on their topology (%s); using their "
                    "order", shape, len(devices), devices[0].platform, reason)
    return np.asarray(devices, dtype=object).reshape(shape)


def group_devices(spec: str | None, devices: Sequence[jax.Device],
                  process_index: int) -> list[jax.Device]:
  """The devices the mesh of process `process_index` spans, among the job's `devices`: its own,
  or, for a `model` axis larger than them, those of the `model // local` consecutive processes
  whose group holds it. Takes the devices as arguments, so a plan can ask it for a TPU topology
  this host does not have (`socialrm_jax.main.plan`)."""
  local = [d for d in devices if d.process_index == process_index]
  model = _model_axis_size(spec)
  if model is None or model <= len(local):
    return local
  if model % len(local):
    raise InputError(f"--mesh model:{model} spans hosts, so it must be a multiple of the "
                     f"{len(local)} devices each process has")
  per_group = model // len(local)
  process_count = len({d.process_index for d in devices})
  if process_count % per_group:
    raise InputError(f"--mesh model:{model} needs groups of {per_group} processes; the job has "
                     f"{process_count}")
  first = process_index // per_group * per_group
  members = range(first, first + per_group)
  return sorted((d for d in devices if d.process_index in members),
                key=lambda d: (d.process_index, d.id))


@dataclasses.dataclass(frozen=True)
class DataGroup:
  """This process's data-parallel group: its index among `count` groups, and whether this
  process writes the group's shards."""
  index: int
  count: int
  is_writer: bool


def data_group(mesh: Mesh) -> DataGroup:
  processes = sorted({d.process_index for d in mesh.devices.flat})
  size = len(processes)
  return DataGroup(index=processes[0] // size, count=jax.process_count() // size,
                   is_writer=jax.process_index() == processes[0])


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Rows (the leading axis) split over `data`, the rest whole."""
  return NamedSharding(mesh, PartitionSpec("data"))


def describe(mesh: Mesh) -> str:
  return ",".join(f"{name}:{size}" for name, size in mesh.shape.items())
