"""The engine's own scoring step, compiled for a TPU topology with abstract parameters.

Everything a run would build is built the engine's way, only abstract: the mesh over the devices
one data-parallel group spans (`mesh.group_devices`), the attention kernel `resolve_attention`
picks for them, the model from `reward_model.abstract_module` with each parameter a
`jax.ShapeDtypeStruct` carrying the sharding `weights.load_params` would give it
(`weights.abstract_params`), the step (`step.ScoringStep`) and the batch shapes
(`engine.make_batcher`). Each shape is then compiled (`jit(...).lower(...).compile()`, as a run
compiles it) and read: the custom calls in the program (splash is `tpu_custom_call`, a Mosaic
kernel), the HBM a chip needs (`memory_analysis`: arguments + temporaries + outputs), XLA's FLOP
count, and the analytic cost and roofline estimate of `cost.py`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
import types
from typing import Any

import jax
import jax.numpy as jnp

from socialrm_jax.base.errors import InputError
from socialrm_jax.models import reward_model, weights
from socialrm_jax.orchestrators.plan import cost, hardware
from socialrm_jax.scoring import engine, packing, proxies
from socialrm_jax.scoring import mesh as mesh_lib
from socialrm_jax.scoring import step as step_lib

_CUSTOM_CALL = re.compile(r'custom_call_target="([^"]+)"')
# How XLA's TPU compiler says a program does not fit: "... the total memory required for HLO
# temporaries (129.90G) exceeds available HBM (15.75G)", or "Used 21.5G of 15.75G hbm".
_TEMPORARIES = re.compile(r"required for HLO temporaries \(([0-9.]+)([KMGT])\)")
_USED = re.compile(r"Used ([0-9.]+)([KMGT]) of ([0-9.]+)([KMGT]) hbm")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclasses.dataclass
class Setup:
  """What one plan compiles: the abstract model on a mesh, its step and batch shapes."""
  topology: hardware.Topology
  mesh: jax.sharding.Mesh
  family: types.ModuleType
  config: Any
  proxy: str
  readout: str
  attention: str
  dtype: Any
  counts: cost.ModelCounts
  step: step_lib.ScoringStep
  batcher: packing.Batcher

  @property
  def groups(self) -> int:
    """Data-parallel groups in the job: each scores its own share of the items."""
    return len(self.topology.devices) // self.mesh.devices.size


def build(topology: hardware.Topology, hf_config: dict, source: str,
          options: engine.ScoringOptions, tensors: weights.TensorSource | None = None) -> Setup:
  """The abstract model, step and batch shapes a run with `options` would use on `topology`'s
  first data-parallel group (every group compiles the same program). `tensors`: the checkpoint's
  tensor headers, which describe a custom reward head (`reward_model.family_and_config`)."""
  options.validate()
  family, config = reward_model.family_and_config(hf_config, source, tensors=tensors)
  proxy = proxies.resolve(config.head, options.proxy)
  readout = proxies.ScoreHead.readout if proxy == "none" else proxies.LogLik.readout
  devices = mesh_lib.group_devices(options.mesh, topology.devices, process_index=0)
  mesh = mesh_lib.make_mesh(options.mesh, devices=devices)
  dtype = reward_model.model_dtype(options.dtype)
  implementation = reward_model.resolve_attention(options.attention, family, config, dtype, mesh)
  module = reward_model.abstract_module(family, config, dtype, implementation)
  counts = cost.model_counts(module, config, readout)
  weights.abstract_params(module, family.weight_sources(config), mesh)
  model = reward_model.RewardModel(config, family, module, tokenizer_path=source,
                                   attention=implementation)
  # The implicit reward runs a reference model of the policy's own shape in the same program.
  step = step_lib.ScoringStep(model, mesh, readout, model if proxy == "implicit" else None)
  return Setup(topology, mesh, family, config, proxy, readout, implementation, dtype, counts,
               step, engine.make_batcher(options, readout, mesh))


def shapes(setup: Setup) -> list[tuple[int, int, int]]:
  """Every batch shape of the run, shortest rows first."""
  return [setup.batcher.shape(bucket) for bucket in setup.batcher.buckets]


def _memory_bytes(compiled) -> int:
  stats = compiled.memory_analysis()
  return int(stats.argument_size_in_bytes + stats.temp_size_in_bytes
             + stats.output_size_in_bytes - stats.alias_size_in_bytes)


def _xla_flops(compiled) -> float | None:
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0] if analysis else {}
  flops = (analysis or {}).get("flops")
  return None if flops is None else float(flops)


def _bytes_from_error(message: str, parameter_bytes: int) -> int | None:
  """The HBM a program needs per chip, from the compiler's out-of-memory message (its figure for
  "HLO temporaries" holds the arguments too: 129.90 GiB for a 139.0 GB parameter shard), and at
  least the parameters' shard; None when the message gives no figure."""
  used = _USED.search(message)
  if used is not None:
    return int(float(used[1]) * _UNITS[used[2]])
  temporaries = _TEMPORARIES.search(message)
  if temporaries is not None:
    return max(int(float(temporaries[1]) * _UNITS[temporaries[2]]), parameter_bytes)
  return None


def parameter_bytes_per_chip(step: step_lib.ScoringStep) -> int:
  """Bytes of the parameters one chip holds (the largest shard of each), from their abstract
  shapes and shardings."""
  total = 0
  for leaf in jax.tree.leaves(step.state):
    shard = leaf.sharding.shard_shape(leaf.shape)
    total += math.prod(shard) * jnp.dtype(leaf.dtype).itemsize
  return int(total)


def compile_shape(setup: Setup, shape: tuple[int, int, int]) -> dict:
  """One batch shape compiled and read (see the module doc); a program the compiler refuses
  for lack of HBM is `compiled: false` with the bytes it asked for, when the compiler says."""
  chip = setup.topology.chip
  analytic = cost.analytic_flops(setup.counts, shape, setup.attention, setup.step.is_causal)
  entry: dict[str, Any] = {"shape": list(shape)}
  start = time.perf_counter()
  try:
    compiled = setup.step.compile(shape)
  except Exception as error:  # pylint: disable=broad-except  # XLA's refusal is the answer
    message = str(error)
    if "hbm" not in message.lower() and "memory" not in message.lower():
      raise
    needed = _bytes_from_error(message, parameter_bytes_per_chip(setup.step))
    entry.update(compiled=False, compile_seconds=round(time.perf_counter() - start, 2),
                 error=message.strip().splitlines()[0][:300], custom_calls=[],
                 hbm_bytes_per_chip=needed, hbm_capacity_bytes=chip.hbm_bytes, fits=False,
                 flops=None, analytic_flops=analytic, bytes_moved_per_chip=None,
                 estimated_seconds=None)
    return entry
  memory = compiled.memory_analysis()
  hbm = _memory_bytes(compiled)
  moved = cost.bytes_moved(int(memory.argument_size_in_bytes), setup.counts, shape,
                           setup.mesh.shape["data"], jnp.dtype(setup.dtype).itemsize)
  entry.update(
      compiled=True, compile_seconds=round(time.perf_counter() - start, 2),
      custom_calls=sorted(set(_CUSTOM_CALL.findall(compiled.as_text()))),
      hbm_bytes_per_chip=hbm, hbm_capacity_bytes=chip.hbm_bytes, fits=hbm <= chip.hbm_bytes,
      flops=_xla_flops(compiled), analytic_flops=analytic, bytes_moved_per_chip=moved,
      estimated_seconds=cost.roofline_seconds(analytic / setup.mesh.devices.size, moved,
                                              chip.bf16_flops_per_second,
                                              chip.hbm_bytes_per_second))
  return entry


def model_axis_choices(topology: hardware.Topology) -> list[int]:
  """Model axis sizes a mesh on `topology` can have: divisors of a host's devices, or whole
  numbers of hosts that divide the job's hosts (`mesh.group_devices`)."""
  local, hosts = topology.devices_per_host, topology.hosts
  within = [m for m in range(1, local + 1) if local % m == 0]
  across = [local * k for k in range(2, hosts + 1) if hosts % k == 0]
  return within + across


def smallest_fitting_model_axis(topology: hardware.Topology, hf_config: dict, source: str,
                                options: engine.ScoringOptions, larger_than: int,
                                tensors: weights.TensorSource | None = None) -> dict | None:
  """The smallest model axis above `larger_than` whose every batch shape fits a chip's HBM:
  {"mesh": ..., "model": m, "hbm_bytes_per_chip": the largest shape's}; None when none does.
  Longest rows are tried first, and a mesh is left at its first shape that does not fit."""
  for model_axis in (m for m in model_axis_choices(topology) if m > larger_than):
    trial = dataclasses.replace(options, mesh=f"data:-1,model:{model_axis}")
    try:
      setup = build(topology, hf_config, source, trial, tensors)
    except InputError:
      continue
    worst = 0
    for shape in reversed(shapes(setup)):
      entry = compile_shape(setup, shape)
      if not entry["fits"]:
        break
      worst = max(worst, entry["hbm_bytes_per_chip"])
    else:
      return {"mesh": mesh_lib.describe(setup.mesh), "model": model_axis,
              "hbm_bytes_per_chip": worst}
  return None
