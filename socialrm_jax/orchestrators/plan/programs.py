"""What a traced and compiled step holds, read from its jaxpr and its compiled program: memory,
custom calls, the attention kernel, collectives and host transfers.

Read the same way for every target, so a TPU plan and a GPU plan say the same things of their
programs: the memory is XLA's own account (`memory_analysis`), the rest is read from the
optimized HLO (`as_text`) and, for callbacks, from the jaxpr (a callback to Python cannot be
compiled for a device this host does not have, so it is found before compiling).
"""

from __future__ import annotations

import collections
import math
import re
from typing import Any, Iterator

import jax
import numpy as np

CUSTOM_CALL = re.compile(r'custom_call_target="([^"]+)"')
# cuDNN's fused attention, as XLA's GPU compiler names its custom calls: `__cudnn$fmhaSoftmax`,
# `__cudnn$fmhaScaleBiasSoftmax`, `__cudnn$fmhaSoftmaxBackward`, ...
CUDNN_ATTENTION_PREFIX = "__cudnn$fmha"
# A Mosaic kernel compiled for a TPU (in this project's steps, splash attention).
TPU_KERNEL = "tpu_custom_call"
# An HLO instruction that moves data between devices: `all-reduce(` or its async `-start(`.
COLLECTIVE = re.compile(r"\s(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|"
                        r"collective-permute|collective-broadcast)(?:-start)?\(")
# A collective's device groups, in one of XLA's three spellings: a mesh and the axes each group
# spans, `replica_groups=mesh['axis_0'=1,'axis_1'=8] {'axis_1'}` (each collective names its own
# mesh of the devices' positions); an iota, `replica_groups=[2,4]<=[4,2]T(1,0)`; or the groups,
# `replica_groups={{0,1},{2,3}}`.
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_LISTED_GROUPS = re.compile(r"replica_groups=\{\{([\d,]+)\}")
# Instructions that move data between the device and its host inside a program, and buffers in
# host memory (memory space 5, `S(5)`, in a shape's layout).
HOST_INSTRUCTION = re.compile(r"\s(send|recv|infeed|outfeed)\(")
HOST_MEMORY_SPACE = "S(5)"
# Primitives that call back into Python on the host (jax.debug.print and .callback,
# jax.experimental.io_callback, jax.pure_callback).
CALLBACK_PRIMITIVES = ("debug_print", "debug_callback", "io_callback", "pure_callback")
HOST_MEMORY_KINDS = ("pinned_host", "unpinned_host")


def _subjaxprs(value: Any) -> Iterator[Any]:
  if hasattr(value, "eqns"):
    yield value
  elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):
    yield value.jaxpr
  elif isinstance(value, (tuple, list)):
    for item in value:
      yield from _subjaxprs(item)


def _equations(jaxpr) -> Iterator[Any]:
  for eqn in jaxpr.eqns:
    yield eqn
    for param in eqn.params.values():
      for inner in _subjaxprs(param):
        yield from _equations(inner)


def host_calls(traced: jax.stages.Traced) -> list[str]:
  """The step's transfers to the host found in its jaxpr (nested ones too): callbacks into Python
  and copies to host memory, each "primitive x count"."""
  found: collections.Counter = collections.Counter()
  for eqn in _equations(traced.jaxpr.jaxpr):
    name = eqn.primitive.name
    if name in CALLBACK_PRIMITIVES:
      found[name] += 1
    elif name == "device_put" and any(
        getattr(s, "memory_kind", None) in HOST_MEMORY_KINDS
        for s in eqn.params.get("devices", ()) or ()):
      found["device_put to host memory"] += 1
  return [f"{name} x{count}" for name, count in sorted(found.items())]


def attention_kernel(custom_calls: list[str]) -> str:
  """The attention kernel a program holds: "cudnn" (cuDNN's fused attention), "splash" (a Mosaic
  kernel on TPU), else "xla" (XLA's own fusions and matmuls)."""
  if any(call.startswith(CUDNN_ATTENTION_PREFIX) for call in custom_calls):
    return "cudnn"
  if TPU_KERNEL in custom_calls:
    return "splash"
  return "xla"


def _first_group(line: str) -> list[int] | None:
  """The positions (in the program's device order) of a collective's first device group."""
  mesh = _MESH_GROUPS.search(line)
  if mesh is not None:
    sizes = {name: int(size) for name, size in re.findall(r"'(\w+)'=(\d+)", mesh[1])}
    spanned = set(re.findall(r"'(\w+)'", mesh[2]))
    positions = np.arange(math.prod(sizes.values())).reshape(tuple(sizes.values()))
    index = tuple(slice(None) if name in spanned else 0 for name in sizes)
    return positions[index].reshape(-1).tolist()
  iota = _IOTA_GROUPS.search(line)
  if iota is not None:
    dims = [int(d) for d in iota[3].split(",")]
    positions = np.arange(math.prod(dims)).reshape(dims)
    if iota[4]:
      positions = positions.transpose([int(a) for a in iota[4].split(",")])
    return positions.reshape(int(iota[1]), int(iota[2]))[0].tolist()
  listed = _LISTED_GROUPS.search(line)
  return None if listed is None else [int(p) for p in listed[1].split(",")]


def spanned_axes(group: list[int], mesh_shape: tuple[int, ...],
                 axis_names: tuple[str, ...]) -> str:
  """The mesh axes a device group spans: "data", "model", "data,model", or "4 of model" for a
  part of one. Positions count the mesh's devices in order (`mesh.devices.flat`)."""
  coords = np.array(np.unravel_index(np.array(group), mesh_shape)).T  # [group, axes]
  spans = []
  for axis, name in enumerate(axis_names):
    values = len(set(coords[:, axis].tolist()))
    if values > 1:
      spans.append(name if values == mesh_shape[axis] else f"{values} of {name}")
  return ",".join(spans) or "one device"


def collectives(text: str, mesh_shape: tuple[int, ...],
                axis_names: tuple[str, ...]) -> dict[str, int]:
  """{"all-reduce over data": count, ...}: the collectives of a program's HLO and the axes of
  the mesh (`mesh_shape`, `axis_names`) their device groups span."""
  found: collections.Counter = collections.Counter()
  for line in text.splitlines():
    match = COLLECTIVE.search(line)
    if match is None:
      continue
    group = _first_group(line)
    where = "unread groups" if group is None else spanned_axes(group, mesh_shape, axis_names)
    found[f"{match[1]} over {where}"] += 1
  return dict(sorted(found.items()))


def host_transfers(text: str) -> list[str]:
  """Host transfers a compiled program holds: send/recv/infeed/outfeed instructions and buffers
  in host memory."""
  found: collections.Counter = collections.Counter()
  for line in text.splitlines():
    match = HOST_INSTRUCTION.search(line)
    if match is not None:
      found[match[1]] += 1
    elif HOST_MEMORY_SPACE in line:
      found["buffer in host memory"] += 1
  return [f"{name} x{count}" for name, count in sorted(found.items())]


def memory(compiled: jax.stages.Compiled) -> dict[str, int]:
  """XLA's memory account of a program on one device, in bytes: `total` is what it needs at once
  (arguments + temporaries + outputs, less the outputs that reuse an argument's buffer); the
  generated code is reported beside it (a compile-only GPU program has none loaded: 0)."""
  stats = compiled.memory_analysis()
  parts = {"arguments": int(stats.argument_size_in_bytes),
           "outputs": int(stats.output_size_in_bytes),
           "temporaries": int(stats.temp_size_in_bytes),
           "aliased": int(stats.alias_size_in_bytes),
           "generated_code": int(stats.generated_code_size_in_bytes)}
  parts["total"] = (parts["arguments"] + parts["temporaries"] + parts["outputs"]
                    - parts["aliased"])
  return parts


def xla_flops(compiled: jax.stages.Compiled) -> float | None:
  """XLA's FLOP count of the program, where its cost analysis gives one (libtpu does; a
  compile-only GPU program gives none)."""
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0] if analysis else {}
  flops = (analysis or {}).get("flops")
  return None if flops is None else float(flops)


def read(compiled: jax.stages.Compiled, mesh: jax.sharding.Mesh) -> dict[str, Any]:
  """Everything above of one program compiled for `mesh`."""
  text = compiled.as_text()
  calls = sorted(set(CUSTOM_CALL.findall(text)))
  return {"custom_calls": calls, "attention_kernel": attention_kernel(calls),
          "collectives": collectives(text, mesh.devices.shape, tuple(mesh.axis_names)),
          "host_transfers": host_transfers(text),
          "memory": memory(compiled), "flops": xla_flops(compiled)}


class CompileCounter:
  """Counts the backend compilations JAX makes while in use (its `backend_compile_duration`
  event, one a program), so a plan can say whether a step compiled more programs than it has
  batch shapes."""

  EVENT = "/jax/core/compile/backend_compile_duration"

  def __init__(self):
    self.count = 0

  def _listen(self, event: str, duration: float, **kwargs) -> None:
    del duration, kwargs
    if event == self.EVENT:
      self.count += 1

  def __enter__(self) -> "CompileCounter":
    jax.monitoring.register_event_duration_secs_listener(self._listen)
    return self

  def __exit__(self, *exc) -> None:
    jax.monitoring.unregister_event_duration_listener(self._listen)
