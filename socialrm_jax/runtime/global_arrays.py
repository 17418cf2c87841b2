"""Arrays that span the mesh's processes: put from the host, read back to it.

Within one process each is a `device_put` or `np.asarray`. When a mesh spans processes (a `model`
axis larger than a host's devices, `mesh.group_devices`) every process calls the same function on
the same global shape, and each gives or reads only the slices its own devices hold; so a step
reads the same in one process and in many.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding


def put_global(array: np.ndarray, sharding: NamedSharding) -> jax.Array:
  """A host array every process holds whole -> a global array over `sharding`'s mesh.

  Within one process this is a device_put; when the mesh spans processes (a model axis across
  hosts) each process supplies only the slices its own devices hold.
  """
  if sharding.is_fully_addressable:
    return jax.device_put(array, sharding)
  return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def fetch(out: jax.Array) -> np.ndarray:
  """A global array whose rows are split over `data` only -> on this host: the whole array, or
  across hosts the rows this process holds (any replica of a row is complete)."""
  if out.is_fully_addressable:
    return np.asarray(out)
  full = np.zeros(out.shape, out.dtype)
  for shard in out.addressable_shards:
    full[shard.index] = np.asarray(shard.data)
  return full


def process_rows(sharding: NamedSharding, shape: tuple[int, ...]) -> np.ndarray:
  """The rows of a global [rows, ...] array of `shape` that this process's devices hold, in the
  order `jax.make_array_from_process_local_data` reads a process's local rows (a row several of
  its devices hold, over `model`, once)."""
  spans = sorted({index[0].indices(shape[0])[:2]
                  for index in sharding.addressable_devices_indices_map(shape).values()})
  return np.concatenate([np.arange(start, stop) for start, stop in spans])


def put_process_rows(array: np.ndarray, sharding: NamedSharding) -> jax.Array:
  """A global batch every process packed alike -> a global array whose rows are split over
  `data`: within one process a device_put; across processes each process gives only its own
  rows (`process_rows`) to `jax.make_array_from_process_local_data`."""
  if sharding.is_fully_addressable:
    return jax.device_put(array, sharding)
  return jax.make_array_from_process_local_data(
      sharding, array[process_rows(sharding, array.shape)], array.shape)
