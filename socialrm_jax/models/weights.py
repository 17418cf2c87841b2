"""Reading HF tensors and placing them into a model's parameters, one tensor at a time.

A family's `weight_sources(config)` says, for each of our parameter paths, which HF tensor feeds it,
how to reshape it, and which axis is split over the `model` mesh axis. `load_params` reads each
tensor, transforms and casts it, and builds a global array whose devices each receive only their
shard (`jax.make_array_from_callback`), so a model never has to fit on one device on its way in.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from typing import Callable, Container, Iterable, Mapping, Protocol

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from safetensors import safe_open

from socialrm_jax.errors import InputError

MODEL_AXIS = "model"
SAFETENSORS_INDEX = "model.safetensors.index.json"


def identity(x: np.ndarray) -> np.ndarray:
  return x


@dataclasses.dataclass(frozen=True)
class WeightSource:
  """Where one of our parameters comes from in a HF checkpoint.

  `model_axis`: the axis of OUR parameter split over the `model` mesh axis (None = replicated).
  """
  hf_name: str
  transform: Callable[[np.ndarray], np.ndarray] = identity
  model_axis: int | None = None


class TensorSource(Protocol):
  """Named tensors of a checkpoint (float32, float16 or ml_dtypes.bfloat16 numpy arrays)."""

  def keys(self) -> Iterable[str]:
    ...

  def get(self, name: str) -> np.ndarray:
    ...


# safetensors' numpy backend cannot build bfloat16 arrays; those are read from the file's bytes.
_RAW_DTYPES = {"BF16": ml_dtypes.bfloat16}


class SafetensorsSource:
  """Tensors of a folder's `*.safetensors` files (one file, or shards listed in the index)."""

  def __init__(self, folder: str | os.PathLike):
    self.folder = os.fspath(folder)
    index_path = os.path.join(self.folder, SAFETENSORS_INDEX)
    if os.path.exists(index_path):
      with open(index_path) as f:
        weight_map: dict[str, str] = json.load(f)["weight_map"]
      files = sorted(set(weight_map.values()))
    else:
      files = sorted(n for n in os.listdir(self.folder) if n.endswith(".safetensors"))
    if not files:
      raise InputError("no *.safetensors weights found", self.folder)
    self._file_of: dict[str, str] = {}
    self._headers: dict[str, dict] = {}
    for name in files:
      path = os.path.join(self.folder, name)
      if not os.path.exists(path):
        raise InputError(f"{SAFETENSORS_INDEX} lists {name}, which is missing", self.folder)
      header = _read_header(path)
      self._headers[path] = header
      for key in header:
        if key != "__metadata__":
          self._file_of[key] = path

  def keys(self) -> Iterable[str]:
    return self._file_of.keys()

  def get(self, name: str) -> np.ndarray:
    path = self._file_of[name]
    info = self._headers[path][name]
    if info["dtype"] in _RAW_DTYPES:
      return _read_raw(path, info, _RAW_DTYPES[info["dtype"]])
    with safe_open(path, framework="numpy") as f:
      return f.get_tensor(name)


def _read_header(path: str) -> dict:
  """The JSON header of a safetensors file: name -> {dtype, shape, data_offsets}."""
  with open(path, "rb") as f:
    (length,) = struct.unpack("<Q", f.read(8))
    return json.loads(f.read(length))


def _read_raw(path: str, info: dict, dtype) -> np.ndarray:
  with open(path, "rb") as f:
    (length,) = struct.unpack("<Q", f.read(8))
    start, end = info["data_offsets"]
    f.seek(8 + length + start)
    data = f.read(end - start)
  return np.frombuffer(data, dtype=dtype).reshape(info["shape"])


def partition_spec(shape: tuple[int, ...], model_axis: int | None, mesh: Mesh) -> PartitionSpec:
  """Split `model_axis` over the mesh's `model` axis when it divides evenly; else replicate."""
  if model_axis is None or MODEL_AXIS not in mesh.axis_names:
    return PartitionSpec()
  if shape[model_axis] % mesh.shape[MODEL_AXIS]:
    return PartitionSpec()
  spec: list[str | None] = [None] * len(shape)
  spec[model_axis] = MODEL_AXIS
  return PartitionSpec(*spec)


def param_sharding(shape: tuple[int, ...], source: WeightSource, mesh: Mesh | None):
  if mesh is None:
    return jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return NamedSharding(mesh, partition_spec(shape, source.model_axis, mesh))


def param_paths(model: nnx.Module) -> dict[str, nnx.Variable]:
  """Our parameter path ('layers/0/attn/q_proj/kernel') -> its nnx Variable."""
  flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
  return {"/".join(str(p) for p in path): var for path, var in flat}


def check_names(sources: Mapping[str, WeightSource], tensors: TensorSource,
                ignore: Container[str] = ()) -> None:
  """Every needed tensor is present and every present tensor is used (or explicitly ignored)."""
  available = set(tensors.keys())
  needed = {s.hf_name for s in sources.values()}
  missing = sorted(needed - available)
  unexpected = sorted(n for n in available - needed if n not in ignore)
  problems = []
  if missing:
    problems.append(f"missing tensors: {', '.join(missing)}")
  if unexpected:
    problems.append(f"unexpected tensors (not used by this architecture): {', '.join(unexpected)}")
  if problems:
    raise InputError("checkpoint does not match its config; " + "; ".join(problems),
                     getattr(tensors, "folder", getattr(tensors, "path", None)))


def load_params(model: nnx.Module, sources: Mapping[str, WeightSource], tensors: TensorSource, *,
                dtype, mesh: Mesh | None = None, ignore: Container[str] = ()) -> nnx.Module:
  """Fills `model`'s parameters (real or abstract, from `nnx.eval_shape`) from `tensors`.

  Tensors are read, transformed, cast and placed one at a time; each device receives only its
  shard. Returns `model`, updated in place.
  """
  variables = param_paths(model)
  if set(variables) != set(sources):
    raise ValueError("weight_sources does not cover the model's parameters exactly: "
                     f"no source for {sorted(set(variables) - set(sources))}, "
                     f"no parameter for {sorted(set(sources) - set(variables))}")
  check_names(sources, tensors, ignore)
  dtype = jnp.dtype(dtype)
  for path, variable in variables.items():
    source = sources[path]
    shape = tuple(variable.get_value().shape)
    array = np.asarray(source.transform(tensors.get(source.hf_name)))
    if array.shape != shape:
      raise InputError(f"tensor {source.hf_name} has shape {array.shape} after conversion; "
                       f"{path} needs {shape}", getattr(tensors, "folder", None))
    array = array.astype(dtype)
    sharding = param_sharding(shape, source, mesh)
    variable.set_value(jax.make_array_from_callback(shape, sharding, lambda idx: array[idx]))
  return model
