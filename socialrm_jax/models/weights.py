"""Reading HF tensors and placing them into a model's parameters, each device's shard on its own.

A family's `weight_sources(config)` says, for each of our parameter paths, which HF tensor feeds it
(or which per-layer tensors, stacked), how to lay it out as ours, and which axis is split over the
`model` mesh axis. `load_params` builds each parameter with `jax.make_array_from_callback`: the
callback is asked for one device's index and reads only that slice of the checkpoint, so no
process reads (or holds) a tensor's rows or columns that none of its devices keeps.

A shard's bytes are read once, straight from the file into the host array the device gets: a
projection's kernel is its Linear's [out, in] as stored (`layers.Projection`), so a stacked
parameter is its layers' bytes one after the other, read with `os.preadv` into a 64-byte-aligned
buffer, which JAX's CPU client takes as the device buffer itself and a GPU's transfer reads as it
is. Casts to the model's dtype run on the device. Parameters are read one after the other, so the
host holds at most one parameter's shards beside what the devices keep.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import math
import mmap
import os
import struct
import threading
import time
from typing import Callable, Container, Iterable, Mapping, Protocol

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from absl import logging
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError

MODEL_AXIS = "model"
SAFETENSORS_INDEX = "model.safetensors.index.json"

Index = tuple[slice, ...]  # a numpy basic index: one slice per leading axis; () = everything


def identity(x: np.ndarray) -> np.ndarray:
  return x


# Transforms that keep a tensor's bytes in order (a reshape), so a slice of its rows is read from
# the file straight into the parameter's buffer.
identity.keeps_bytes = True


def reshape_to(*shape: int):
  """A tensor -> the same values in `shape`, where -1 stands for the axis split over `model`, so
  the same transform lays out a slice of rows or columns: a HF Linear weight [out, in] is our
  kernel as stored (`layers.Projection`), its heads unflattened. E.g. q_proj [N*H, D] -> [N, H, D]
  as (-1, H, D) (rows = heads); o_proj [D, N*H] -> [D, N, H] as (D, -1, H) (columns = heads)."""
  def transform(w: np.ndarray) -> np.ndarray:
    return w.reshape(shape)
  transform.keeps_bytes = True
  return transform


@dataclasses.dataclass(frozen=True)
class WeightSource:
  """Where one of our parameters comes from in a HF checkpoint.

  `hf_name`: the HF tensor, or a tuple of L per-layer tensors stacked on a new leading axis (our
    parameter is then [L, ...]).
  `transform`: one HF tensor -> our layout (of one layer, for a stacked parameter).
  `model_axis`: the axis of OUR parameter split over the `model` mesh axis (None = replicated);
    it counts the stacked [L] axis.
  `hf_axis`: the axis of the HF tensor that `model_axis` is read from, with our axis outermost
    (HF index = ours * (HF size / our size)). Set, a device's shard reads only its rows (axis 0)
    or columns (axis 1) of the tensor, and `transform` sees that slice, so it must not depend on
    the size of the split axis (`reshape(d, -1, h)`). None: the whole tensor is read, then cut.
  `hf_span`: (start, stop) rows of `hf_axis` that this parameter reads, for a part of a fused
    tensor (Phi-3's `qkv_proj`: q, then k, then v); None = the whole axis.
  `hf_block`: how many of our indices share one block of HF rows that only `transform` takes
    apart (InternLM2's `wqkv` holds each key/value head's G query heads, key and value as one
    block: G for q, 1 for k and v). A shard that cuts a block reads the whole tensor, then cuts.
  """
  hf_name: str | tuple[str, ...]
  transform: Callable[[np.ndarray], np.ndarray] = identity
  model_axis: int | None = None
  hf_axis: int | None = None
  hf_span: tuple[int, int] | None = None
  hf_block: int = 1

  @property
  def stacked(self) -> bool:
    return isinstance(self.hf_name, tuple)

  @property
  def hf_names(self) -> tuple[str, ...]:
    return self.hf_name if self.stacked else (self.hf_name,)


def stacked_sources(layer_prefix: str, num_layers: int) -> Callable[..., WeightSource]:
  """The sources of a family's scanned block: `block = stacked_sources("model.layers.{layer}.",
  L)`, then `block("mlp.up_proj.weight", transform, model_axis, hf_axis, ...)` is the
  WeightSource of the L tensors `model.layers.0.mlp.up_proj.weight`, ... (further arguments as
  WeightSource's)."""

  def block(name: str, *args, **kwargs) -> WeightSource:
    names = tuple(f"{layer_prefix.format(layer=i)}{name}" for i in range(num_layers))
    return WeightSource(names, *args, **kwargs)

  return block


class TensorSource(Protocol):
  """Named tensors of a checkpoint (float32, float16 or ml_dtypes.bfloat16 numpy arrays)."""

  def keys(self) -> Iterable[str]:
    ...

  def shape(self, name: str) -> tuple[int, ...]:
    ...

  def dtype(self, name: str) -> np.dtype:
    """The dtype of the arrays `get` gives for the tensor."""
    ...

  def get(self, name: str, index: Index = ()) -> np.ndarray:
    """The tensor, or only `index` of it."""
    ...

  # A source may also read a run of a tensor's leading rows straight into an array,
  # `read_into(name, start, stop, out)` (`SafetensorsSource`); without it, `get` is used.


# safetensors dtype -> numpy dtype of its (little-endian) bytes.
_SAFETENSORS_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}


class SafetensorsSource:
  """Tensors of a folder's `*.safetensors` files (one file, or shards listed in the index).

  A tensor is read through a read-only memory map of its bytes, so indexing it reads only the
  slice asked for (safetensors' own numpy reader cannot build bfloat16 arrays); a run of its
  leading rows is read into an array by `read_into`. `bytes_read` counts the bytes asked for.
  """

  def __init__(self, folder: str | os.PathLike):
    self.folder = os.fspath(folder)
    index_path = os.path.join(self.folder, SAFETENSORS_INDEX)
    if os.path.exists(index_path):
      files = sorted(set(_weight_map(index_path).values()))
    else:
      files = sorted(n for n in os.listdir(self.folder) if n.endswith(".safetensors"))
    if not files:
      raise InputError("no *.safetensors weights found", self.folder)
    self.bytes_read = 0
    self._count_lock = threading.Lock()  # layers are read from several threads
    self._file_of: dict[str, str] = {}
    self._info: dict[str, dict] = {}  # name -> {dtype, shape, data_offsets}, offsets from file start
    for name in files:
      path = os.path.join(self.folder, name)
      if not os.path.exists(path):
        raise InputError(f"{SAFETENSORS_INDEX} lists {name}, which is missing", self.folder)
      header, data_start = _read_header(path)
      for key, info in header.items():
        if key != "__metadata__":
          start, end = info["data_offsets"]
          self._file_of[key] = path
          self._info[key] = dict(info, data_offsets=(data_start + start, data_start + end))

  def keys(self) -> Iterable[str]:
    return self._file_of.keys()

  def shape(self, name: str) -> tuple[int, ...]:
    return tuple(self._info[name]["shape"])

  def dtype(self, name: str) -> np.dtype:
    info = self._info[name]
    if info["dtype"] not in _SAFETENSORS_DTYPES:
      raise InputError(f"tensor {name} has dtype {info['dtype']}, which is not supported",
                       self._file_of[name])
    return _SAFETENSORS_DTYPES[info["dtype"]]

  def get(self, name: str, index: Index = ()) -> np.ndarray:
    dtype, shape = self.dtype(name), self.shape(name)
    if math.prod(shape) == 0:
      return np.zeros(shape, dtype)[index]
    start, _ = self._info[name]["data_offsets"]
    data = np.memmap(self._file_of[name], dtype=dtype, mode="r", offset=start, shape=shape)
    # A view of the read-only map, which stays open while the view lives: `load_params` copies
    # what it reads once.
    view = data[index]
    with self._count_lock:
      self.bytes_read += view.nbytes
    return view

  def read_into(self, name: str, start: int, stop: int, out: np.ndarray) -> None:
    """Rows [start, stop) of tensor `name` into `out` (C-contiguous, of their size and dtype)."""
    shape, dtype = self.shape(name), self.dtype(name)
    row_bytes = math.prod(shape[1:]) * dtype.itemsize
    if out.dtype != dtype or not out.flags.c_contiguous or out.nbytes != (stop - start) * row_bytes:
      raise ValueError(f"{name}: rows [{start}, {stop}) do not fit an array of {out.dtype} "
                       f"{out.shape}")
    offset = self._info[name]["data_offsets"][0] + start * row_bytes
    view = memoryview(out.reshape(-1).view(np.uint8))
    descriptor = os.open(self._file_of[name], os.O_RDONLY)
    try:
      done = 0
      while done < len(view):  # preadv may return fewer bytes than asked
        read = os.preadv(descriptor, [view[done:done + _READ_CHUNK]], offset + done)
        if read == 0:
          raise InputError(f"tensor {name}: the file ended before its bytes did",
                           self._file_of[name])
        done += read
    finally:
      os.close(descriptor)
    with self._count_lock:
      self.bytes_read += out.nbytes


# Bytes of one `preadv` call (Linux reads at most about 2 GiB in one).
_READ_CHUNK = 1 << 28
# The alignment at which JAX's CPU client takes a host array as the device buffer, uncopied.
_HOST_ALIGNMENT = 64
# Reads in flight at once, and the bytes of one (a run of a tensor's rows).
_READ_THREADS = 16
_READ_CHUNK_BYTES = 1 << 25
# The bytes of a large buffer whose pages one task faults in (a multiple of every page size;
# smaller buffers are malloc's).
_POPULATE_PIECE_BYTES = 1 << 25


def _read_header(path: str) -> tuple[dict, int]:
  """The JSON header of a safetensors file (name -> {dtype, shape, data_offsets}) and where the
  data its offsets count from begins. A file too short for what its header says (cut off in a
  copy or a download), or not a safetensors file at all, is an error naming it."""
  size = os.path.getsize(path)
  with open(path, "rb") as f:
    prefix = f.read(8)
    if len(prefix) < 8:
      raise InputError(f"not a safetensors file: {size} bytes, too short to hold a header "
                       "(empty or truncated)", path)
    (length,) = struct.unpack("<Q", prefix)
    if 8 + length > size:
      raise InputError(f"truncated, or not a safetensors file: the header should take {length} "
                       f"bytes and the file holds {size} in all", path)
    try:
      header = json.loads(f.read(length))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
      raise InputError(f"not a safetensors file: its header is not JSON ({e})", path) from None
  if not isinstance(header, dict):
    raise InputError("not a safetensors file: its header is not a JSON object", path)
  data_size = size - 8 - length
  for name, info in header.items():
    if name != "__metadata__":
      _check_tensor_entry(name, info, data_size, path)
  return header, 8 + length


def _check_tensor_entry(name: str, info, data_size: int, path: str) -> None:
  """One header entry is well formed and its bytes lie inside the file."""
  try:
    start, end = (int(offset) for offset in info["data_offsets"])
    shape = [int(d) for d in info["shape"]]
    dtype = info["dtype"]
  except (KeyError, TypeError, ValueError):
    raise InputError(f"tensor {name}: the header entry lacks dtype, shape or two data_offsets",
                     path) from None
  if end > data_size:
    raise InputError(f"truncated: tensor {name} ends at byte {end} of the data, which holds "
                     f"{data_size} bytes", path)
  itemsize = _SAFETENSORS_DTYPES[dtype].itemsize if dtype in _SAFETENSORS_DTYPES else None
  if itemsize is not None and end - start != math.prod(shape) * itemsize:
    raise InputError(f"tensor {name}: {end - start} bytes for a {dtype} tensor of shape "
                     f"{shape}", path)


def _weight_map(index_path: str) -> dict[str, str]:
  """The sharded checkpoint's index: tensor name -> the file holding it."""
  weight_map = tables.read_json_object(index_path).get("weight_map")
  if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
    raise InputError("`weight_map` must map each tensor name to a file name", index_path)
  return weight_map


def partition_spec(shape: tuple[int, ...], model_axis: int | None, mesh: Mesh) -> PartitionSpec:
  """Split `model_axis` over the mesh's `model` axis when it divides evenly; else replicate."""
  if model_axis is None or MODEL_AXIS not in mesh.axis_names:
    return PartitionSpec()
  if shape[model_axis] % mesh.shape[MODEL_AXIS]:
    return PartitionSpec()
  spec: list[str | None] = [None] * len(shape)
  spec[model_axis] = MODEL_AXIS
  return PartitionSpec(*spec)


def param_sharding(shape: tuple[int, ...], model_axis: int | None, mesh: Mesh | None):
  if mesh is None:
    return jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return NamedSharding(mesh, partition_spec(shape, model_axis, mesh))


def param_paths(model: nnx.Module) -> dict[str, nnx.Variable]:
  """Our parameter path ('layers/attn/q_proj/kernel') -> its nnx Variable."""
  flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
  return {"/".join(str(p) for p in path): var for path, var in flat}


def _location(tensors: TensorSource) -> str | None:
  """The folder or file a source reads, for error messages."""
  return getattr(tensors, "folder", getattr(tensors, "path", None))


def check_names(sources: Mapping[str, WeightSource], tensors: TensorSource,
                ignore: Container[str] = ()) -> None:
  """Every needed tensor is present and every present tensor is used (or explicitly ignored)."""
  available = set(tensors.keys())
  needed = {name for s in sources.values() for name in s.hf_names}
  missing = sorted(needed - available)
  unexpected = sorted(n for n in available - needed if n not in ignore)
  problems = []
  if missing:
    problems.append(f"missing tensors: {', '.join(missing)}")
  if unexpected:
    problems.append(f"unexpected tensors (not used by this architecture): {', '.join(unexpected)}")
  if problems:
    raise InputError("checkpoint does not match its config; " + "; ".join(problems),
                     _location(tensors))


def _hf_rows(source: WeightSource, start: int, stop: int) -> Index:
  """The HF index reading rows [start, stop) of `source.hf_axis`."""
  return (slice(None),) * source.hf_axis + (slice(start, stop),)


def _read_plan(name: str, source: WeightSource, layer_shape: tuple[int, ...], index: Index,
               tensors: TensorSource) -> tuple[Index, Index]:
  """What `index` (a bounded slice per axis of `layer_shape`) of HF tensor `name` reads: (the
  HF index read, the index of its transform that is kept)."""
  axis = None if source.model_axis is None else source.model_axis - source.stacked
  whole = () if source.hf_span is None else _hf_rows(source, *source.hf_span)
  if source.hf_axis is None or axis is None or index[axis] == slice(0, layer_shape[axis]):
    return whole, index
  span_start, span_stop = source.hf_span or (0, tensors.shape(name)[source.hf_axis])
  # Our index i covers HF rows [i * hf / ours, (i + 1) * hf / ours) of the span.
  hf_size, ours = span_stop - span_start, layer_shape[axis]
  start, stop = index[axis].start * hf_size, index[axis].stop * hf_size
  if index[axis].start % source.hf_block or index[axis].stop % source.hf_block or (
      start % ours or stop % ours):  # the shard cuts a block of HF rows: read all, then cut
    return whole, index
  hf_index = _hf_rows(source, span_start + start // ours, span_start + stop // ours)
  return hf_index, index[:axis] + (slice(None),) + index[axis + 1:]


def _leading_rows(index: Index, shape: tuple[int, ...]) -> tuple[int, int] | None:
  """(start, stop) when `index` of an array of `shape` is its rows [start, stop), whole."""
  bounds = [s.indices(n) for s, n in zip(index, shape)]
  if any(step != 1 for _, _, step in bounds) or any(
      (a, b) != (0, n) for (a, b, _), n in zip(bounds[1:], shape[1:])):
    return None
  return bounds[0][:2] if bounds else (0, shape[0])


def _read_layer(name: str, source: WeightSource, layer_shape: tuple[int, ...], index: Index,
                tensors: TensorSource) -> np.ndarray:
  """`index` of HF tensor `name` in our layout (a view where the transform gives one)."""
  hf_index, kept = _read_plan(name, source, layer_shape, index, tensors)
  return np.asarray(source.transform(tensors.get(name, hf_index)))[kept]


def _layer_reads(path: str, name: str, source: WeightSource, layer_shape: tuple[int, ...],
                 index: Index, tensors: TensorSource,
                 out: np.ndarray) -> list[Callable[[], None]]:
  """The reads that put `index` of HF tensor `name`, in our layout, into `out`: from the file
  straight into it, in runs of rows of about `_READ_CHUNK_BYTES` each (so that one large tensor's
  reads run in parallel too), when the transform keeps the bytes' order and the slice is a run of
  whole rows; else one read of the transformed slice, copied in."""
  hf_index, _ = _read_plan(name, source, layer_shape, index, tensors)
  shape = tensors.shape(name)
  rows = _leading_rows(hf_index, shape)
  row_size = math.prod(shape[1:])
  if (rows is not None and getattr(source.transform, "keeps_bytes", False)
      and (rows[1] - rows[0]) * row_size == out.size  # the whole read slice is kept
      and hasattr(tensors, "read_into") and tensors.dtype(name) == out.dtype):
    flat = out.reshape(-1)
    step = max(1, _READ_CHUNK_BYTES // max(1, row_size * out.dtype.itemsize))
    return [functools.partial(tensors.read_into, name, start, min(start + step, rows[1]),
                              flat[(start - rows[0]) * row_size:
                                   (min(start + step, rows[1]) - rows[0]) * row_size])
            for start in range(rows[0], rows[1], step)]

  def copy() -> None:
    part = _read_layer(name, source, layer_shape, index, tensors)
    if part.shape != out.shape:
      raise InputError(f"{path}: tensor {name} gives a shard of shape {part.shape} after "
                       f"conversion, not {out.shape}", _location(tensors))
    np.copyto(out, part)
  return [copy]


def _host_buffer(shape: tuple[int, ...], dtype, pool: concurrent.futures.Executor) -> np.ndarray:
  """An uninitialised C-contiguous array whose data starts at a multiple of `_HOST_ALIGNMENT`
  bytes, so that JAX's CPU client uses it as the device buffer rather than copy it. A large one
  is its own memory map whose pages `pool` faults in, a byte written to each, on several cores,
  before the reads write it: otherwise each page is a fault trapped as a read first touches it,
  one core at a time. Not `MADV_POPULATE_WRITE`, which holds the process's memory-map lock
  through each piece, so the `mmap`s and `munmap`s of a compilation running beside the load
  (`while_loading`) wait on it; a page fault takes no such lock (Linux 6.4's per-VMA locks)."""
  dtype = np.dtype(dtype)
  size = math.prod(shape) * dtype.itemsize
  if size < _POPULATE_PIECE_BYTES or not hasattr(mmap, "MAP_ANONYMOUS"):
    raw = np.empty(size + _HOST_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % _HOST_ALIGNMENT
    return raw[start:start + size].view(dtype).reshape(shape)
  pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
  page_bytes = np.frombuffer(pages, np.uint8)

  def populate(start: int) -> None:  # numpy writes the strided bytes without the GIL
    page_bytes[start:start + _POPULATE_PIECE_BYTES:mmap.PAGESIZE] = 0
  for done in [pool.submit(populate, start) for start in range(0, size, _POPULATE_PIECE_BYTES)]:
    done.result()
  return np.frombuffer(pages, dtype).reshape(shape)  # page-aligned; the array keeps the map


def _read_shard(path: str, source: WeightSource, shape: tuple[int, ...], index: Index,
                tensors: TensorSource, pool: concurrent.futures.Executor) -> np.ndarray:
  """`index` (a bounded slice per axis) of our parameter of `shape`, in an aligned array of its
  own, in the checkpoint's dtype; a stacked one reads each layer's tensor into its place. The
  reads run on `pool`, so several are in flight."""
  names = source.hf_name[index[0]] if source.stacked else (source.hf_name,)
  layer_shape, layer_index = (shape[1:], index[1:]) if source.stacked else (shape, index)
  wanted = tuple(s.stop - s.start for s in layer_index)
  out = _host_buffer((len(names), *wanted) if source.stacked else wanted,
                     tensors.dtype(names[0]), pool)
  per_layer = out if source.stacked else out[None]
  reads = [read for layer, name in enumerate(names)
           for read in _layer_reads(path, name, source, layer_shape, layer_index, tensors,
                                    per_layer[layer])]
  for done in [pool.submit(read) for read in reads]:
    done.result()  # raises a read's error
  return out


@functools.partial(jax.jit, static_argnames="dtype")
def _cast(array: jax.Array, dtype) -> jax.Array:
  """A parameter read in its checkpoint's dtype, in the model's: on the device, in its sharding."""
  return array.astype(dtype)


class _LoadProgress:
  """One log line every few seconds of a long load: bytes placed, their rate, the time left."""

  EVERY_SECONDS = 5.0

  def __init__(self, total_bytes: int):
    self.total, self.done = total_bytes, 0
    self.start = self.last = time.perf_counter()

  def add(self, nbytes: int) -> None:
    self.done += nbytes
    now = time.perf_counter()
    if now - self.last >= self.EVERY_SECONDS and self.done < self.total:
      self.last = now
      rate = self.done / (now - self.start)
      logging.info("weights: %.2f of %.2f GB placed, %.2f GB/s, ETA %.0f s", self.done / 1e9,
                   self.total / 1e9, rate / 1e9, (self.total - self.done) / rate)


def load_params(model: nnx.Module, sources: Mapping[str, WeightSource], tensors: TensorSource, *,
                dtype, mesh: Mesh | None = None, ignore: Container[str] = ()) -> nnx.Module:
  """Fills `model`'s parameters (real or abstract, from `nnx.eval_shape`) from `tensors`.

  Each device receives its shard, read for it alone (a shard several devices share, such as a
  replicated parameter, is read once), in the checkpoint's dtype, then cast to `dtype` on the
  device. Returns `model`, updated in place.
  """
  variables = param_paths(model)
  if set(variables) != set(sources):
    raise ValueError("weight_sources does not cover the model's parameters exactly: "
                     f"no source for {sorted(set(variables) - set(sources))}, "
                     f"no parameter for {sorted(set(sources) - set(variables))}")
  check_names(sources, tensors, ignore)
  dtype = jnp.dtype(dtype)
  progress = _LoadProgress(sum(math.prod(v.get_value().shape) * dtype.itemsize
                               for v in variables.values()))
  # One pool for the whole load: its threads start once, not again for each parameter.
  with concurrent.futures.ThreadPoolExecutor(_READ_THREADS, "weights") as pool:
    _place_params(variables, sources, tensors, dtype, mesh, pool, progress)
  return model


def _place_params(variables: Mapping[str, nnx.Variable], sources: Mapping[str, WeightSource],
                  tensors: TensorSource, dtype, mesh: Mesh | None,
                  pool: concurrent.futures.Executor, progress: _LoadProgress) -> None:
  casting = None  # the last parameter's cast, still computing
  for path, variable in variables.items():
    source = sources[path]
    shape = tuple(variable.get_value().shape)
    shards: dict[tuple, np.ndarray] = {}  # this parameter's shards by index, read once each

    def shard(index: Index) -> np.ndarray:  # called before the loop moves on
      index = tuple(slice(*s.indices(n)[:2]) for s, n in zip(index, shape))  # bounded
      key = tuple((s.start, s.stop) for s in index)
      if key not in shards:
        shards[key] = _read_shard(path, source, shape, index, tensors, pool)
      return shards[key]

    sharding = param_sharding(shape, source.model_axis, mesh)
    value = jax.make_array_from_callback(shape, sharding, shard)
    if value.dtype != dtype:
      # One cast in flight: the checkpoint-dtype copies wait for theirs, so they would pile up
      # beside the model's if the reads ran ahead of the casts.
      if casting is not None:
        casting.block_until_ready()
      value = casting = _cast(value, dtype)
    variable.set_value(value)
    progress.add(math.prod(shape) * dtype.itemsize)


def abstract_params(model: nnx.Module, sources: Mapping[str, WeightSource],
                    mesh: Mesh) -> nnx.Module:
  """Gives `model`'s parameters (abstract, from `nnx.eval_shape`) the shardings `load_params`
  would place them with, as `jax.ShapeDtypeStruct`s: a program can then be compiled for them
  with no weights and no memory (`socialrm_jax.main.plan`). Returns `model`, updated in place."""
  for path, variable in param_paths(model).items():
    value = variable.get_value()
    variable.set_value(jax.ShapeDtypeStruct(
        value.shape, value.dtype,
        sharding=param_sharding(tuple(value.shape), sources[path].model_axis, mesh)))
  return model
