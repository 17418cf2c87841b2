"""The engine's own scoring step, compiled for a TPU slice or GPUs with abstract parameters.

Everything a run would build is built the engine's way, only abstract: the mesh over the devices
one data-parallel group spans (`mesh.group_devices`), the attention kernel `resolve_attention`
picks for them, the model from `reward_model.abstract_module` with each parameter a
`jax.ShapeDtypeStruct` carrying the sharding `weights.load_params` would give it
(`weights.abstract_params`), the step (`step.ScoringStep`) and the batch shapes
(`engine.make_batcher`). Each shape is then traced and compiled (`ScoringStep.trace`, then
`.lower().compile()`, as a run compiles it) and read (`programs.read`): the attention kernel in
the program (cuDNN's `__cudnn$fmha...` custom call on a GPU, splash's `tpu_custom_call` Mosaic
kernel on a TPU, or XLA's own), the collectives, host transfers, the memory a device needs
(`memory_analysis`: arguments + temporaries + outputs), XLA's FLOP count where it gives one, and
the analytic cost and roofline estimate of `cost.py`. What a step must not do (compile without
the attention kernel it asked for, move data to the host, compile more programs than it has
shapes, carry weights in another dtype than it computes in) is a failure the plan lists.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
import types
from typing import Any, Callable

import jax
import jax.numpy as jnp
from absl import logging

from socialrm_jax.base.errors import InputError
from socialrm_jax.models import reward_model, weights
from socialrm_jax.orchestrators.plan import cost, hardware, programs
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.scoring import engine, packing, proxies
from socialrm_jax.scoring import step as step_lib

# How XLA's TPU compiler says a program does not fit: "... the total memory required for HLO
# temporaries (129.90G) exceeds available HBM (15.75G)", or "Used 21.5G of 15.75G hbm".
_TEMPORARIES = re.compile(r"required for HLO temporaries \(([0-9.]+)([KMGT])\)")
_USED = re.compile(r"Used ([0-9.]+)([KMGT]) of ([0-9.]+)([KMGT]) hbm")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclasses.dataclass
class AbstractScorer:
  """The scorer a run would build on `topology`, with abstract parameters (what a plan compiles):
  the model on the first data-parallel group's mesh, its scoring step and its batch shapes."""
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
          options: engine.ScoringOptions,
          tensors: weights.TensorSource | None = None) -> AbstractScorer:
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
  return AbstractScorer(topology, mesh, family, config, proxy, readout, implementation, dtype,
                        counts, step, engine.make_batcher(options, readout, mesh))


def shapes(scorer: AbstractScorer) -> list[tuple[int, int, int]]:
  """Every batch shape of the run, shortest rows first."""
  return [scorer.batcher.shape(bucket) for bucket in scorer.batcher.buckets]


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


def bytes_per_device(tree) -> int:
  """Bytes one device holds of a tree of (abstract) arrays: the largest shard of each, from
  their shapes and shardings."""
  total = 0
  for leaf in jax.tree.leaves(tree):
    shard = leaf.sharding.shard_shape(leaf.shape)
    total += math.prod(shard) * jnp.dtype(leaf.dtype).itemsize
  return int(total)


def parameter_bytes_per_chip(step: step_lib.ScoringStep) -> int:
  """Bytes of the parameters one chip holds (the largest shard of each)."""
  return bytes_per_device(step.state)


def path_name(path) -> str:
  """A tree path as the parameter's name: "layers/attn/q_proj/kernel"."""
  return jax.tree_util.keystr(path, simple=True, separator="/")


def off_dtype_parameters(tree, dtype, limit: int = 3) -> list[str]:
  """Floating-point parameters of `tree` ({path: array} or nested) not in the compute `dtype`:
  weights a step would copy to its dtype on every call. The first `limit` paths, and a count."""
  found = [path_name(path) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
           if jnp.issubdtype(leaf.dtype, jnp.floating)
           and jnp.dtype(leaf.dtype) != jnp.dtype(dtype)]
  return found[:limit] + ([f"... {len(found)} in all"] if len(found) > limit else [])


def program_failures(read: dict, attention: str, host_calls: list[str]) -> list[str]:
  """What a step must not hold: it asked for cuDNN attention and compiled without it (splash is
  left out: on rows no splash block divides, the model runs XLA's attention by design), or it
  moves data to the host while it runs. `read`: the compiled program's (empty: not compiled)."""
  failures = []
  if read and attention == "cudnn" and read["attention_kernel"] != "cudnn":
    failures.append(f"asked for cudnn attention, but the compiled program holds "
                    f"{read['attention_kernel']} attention")
  transfers = host_calls + read.get("host_transfers", [])
  if transfers:
    failures.append(f"host transfer inside the step: {', '.join(transfers)}")
  return failures


def _is_out_of_memory(message: str) -> bool:
  return "hbm" in message.lower() or "memory" in message.lower()


def _reason(message: str) -> str:
  """The line of a compiler error that says why: the last `...Error: ...` line of a traceback
  it carries (a custom partitioner's), else its first line."""
  lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
  errors = [line for line in lines if re.match(r"^\w*(Error|Exception): ", line)]
  return (errors[-1] if errors else lines[0] if lines else "no message")[:300]


class Progress:
  """A line per compiled program as a plan goes (a large model's plan compiles for minutes):
  `[3/8] scoring rows 4x512: 12.3 s, 1.20 GiB/device, fits; 5 to go`. A stage (`start`) is a run
  of programs of known count; each try of a search (a batch size, a model axis: left at its first
  program that does not fit) is one, and says which (`note`)."""

  def __init__(self, log: Callable[..., None] | None = None):
    self.log = log or logging.info
    self.stage, self.total, self.done, self.note = "", 0, 0, ""

  def start(self, stage: str, total: int, note: str = "") -> None:
    self.stage, self.total, self.done, self.note = stage, total, 0, note

  def compiled(self, what: str, seconds: float, device_bytes: int | None, fits: bool) -> None:
    self.done += 1
    memory = "not compiled" if device_bytes is None else f"{device_bytes / 2**30:.2f} GiB/device"
    self.log("[%d/%d] %s %s: %.1f s, %s, %s; %d to go%s", self.done, self.total, self.stage, what,
             seconds, memory, "fits" if fits else "does not fit", self.total - self.done,
             f" ({self.note})" if self.note else "")

  def batch(self, entry: dict) -> None:
    """A scoring program's line (`compile_shape`'s entry)."""
    rows, length = entry["shape"][:2]
    self.compiled(f"rows {rows}x{length}", entry["compile_seconds"], entry["hbm_bytes_per_chip"],
                  entry["fits"])


def compile_traced(traced: jax.stages.Traced, mesh: jax.sharding.Mesh, attention: str,
                   compile_program=None, parameter_bytes: int = 0
                   ) -> tuple[jax.stages.Compiled | None, dict[str, Any]]:
  """A traced step compiled (by `compile_program(traced)` where given, else `traced.lower()
  .compile()` under the mesh) and read (`programs.read`), with its failures; a step holding a
  callback into Python is not compiled (it cannot be for a device this host lacks), and is one.
  A program a TPU compiler refuses for lack of HBM is not compiled, with the bytes it asked for
  (`needed_bytes`: from the compiler's message, at least `parameter_bytes`; None when it gives
  none): it does not fit, and is no failure."""
  host_calls = programs.host_calls(traced)
  if host_calls:
    return None, {"compiled": False, "custom_calls": [], "attention_kernel": None,
                  "collectives": {}, "host_transfers": host_calls, "memory": None, "flops": None,
                  "failures": program_failures({}, attention, host_calls)}
  try:
    if compile_program is None:
      with jax.set_mesh(mesh):
        compiled = traced.lower().compile()
    else:
      compiled = compile_program(traced)
  except jax.errors.JaxRuntimeError as error:
    message = str(error)
    refused = {"compiled": False, "custom_calls": [], "attention_kernel": None,
               "collectives": {}, "host_transfers": [], "memory": None, "flops": None}
    if _is_out_of_memory(message):
      return None, {**refused, "failures": [], "error": message.strip().splitlines()[0][:300],
                    "needed_bytes": _bytes_from_error(message, parameter_bytes)}
    return None, {**refused, "failures": [f"XLA cannot compile the step: {_reason(message)}"]}
  read = programs.read(compiled, mesh)
  read.update(compiled=True, failures=program_failures(read, attention, []))
  return compiled, read


def trace_step(trace, *args, attention: str):
  """`trace(*args)`; where JAX's cuDNN attention refuses the step while it is traced, one line
  saying why a compile-only plan cannot go on (JAX's checks read this host's default device, a
  CPU, where a GPU would answer for itself: head dims above 128 are refused, though Hopper GPUs
  take up to 256)."""
  try:
    return trace(*args)
  except NotImplementedError as error:
    if attention != "cudnn":
      raise
    raise InputError(f"--attention=cudnn: JAX's cuDNN attention refused the step on this host "
                     f"({str(error).strip().splitlines()[0]}); its checks read the compute "
                     "capability of this host's default device, not the target's, so a plan "
                     "cannot compile it: plan with --attention=xla") from None


def compile_shape(scorer: AbstractScorer, shape: tuple[int, int, int]) -> dict:
  """One batch shape compiled and read (see the module doc); a program the compiler refuses
  for lack of HBM is `compiled: false` with the bytes it asked for, when the compiler says."""
  chip, capacity = scorer.topology.chip, scorer.topology.usable_bytes
  analytic = cost.analytic_flops(scorer.counts, shape, scorer.attention, scorer.step.is_causal)
  entry: dict[str, Any] = {"shape": list(shape)}
  start = time.perf_counter()
  traced = trace_step(scorer.step.trace, shape, attention=scorer.attention)
  compiled, read = compile_traced(traced, scorer.mesh, scorer.attention,
                                  lambda t: scorer.step.compile(shape, t),
                                  parameter_bytes_per_chip(scorer.step))
  if "needed_bytes" in read:  # refused for lack of HBM: what it asked for
    needed = read.pop("needed_bytes")
    entry.update(read, compile_seconds=round(time.perf_counter() - start, 2),
                 hbm_bytes_per_chip=needed, hbm_capacity_bytes=capacity, fits=False,
                 analytic_flops=analytic, bytes_moved_per_chip=None, estimated_seconds=None)
    return entry
  entry.update(read, compile_seconds=round(time.perf_counter() - start, 2),
               hbm_capacity_bytes=capacity, analytic_flops=analytic)
  if compiled is None:  # not compilable for the target: a failure, no figures
    entry.update(hbm_bytes_per_chip=None, fits=False, bytes_moved_per_chip=None,
                 estimated_seconds=None)
    return entry
  used = read["memory"]["total"]
  moved = cost.bytes_moved(read["memory"]["arguments"], scorer.counts, shape,
                           scorer.mesh.shape["data"], jnp.dtype(scorer.dtype).itemsize)
  entry.update(
      hbm_bytes_per_chip=used, fits=used <= capacity, bytes_moved_per_chip=moved,
      estimated_seconds=cost.roofline_seconds(analytic / scorer.mesh.devices.size, moved,
                                              chip.bf16_flops_per_second,
                                              chip.hbm_bytes_per_second))
  return entry


def compile_all(scorer: AbstractScorer, progress: Progress | None = None
                ) -> tuple[list[dict], dict[str, Any]]:
  """Every batch shape of `scorer` compiled (`compile_shape`, a `progress` line each), and the
  step's own checks: the backend compilations made (one a shape, or the plan says which more),
  and parameters not in the compute dtype (weights copied to it in every step)."""
  progress = progress or Progress()
  batch_shapes = shapes(scorer)
  progress.start("scoring", len(batch_shapes))
  batches = []
  with programs.CompileCounter() as counter:
    for shape in batch_shapes:
      batches.append(compile_shape(scorer, shape))
      progress.batch(batches[-1])
  checks = {"shapes": len(batches), "compilations": counter.count,
            "step_compilations": scorer.step.compilations,
            "off_dtype_parameters": off_dtype_parameters(scorer.step.state, scorer.dtype)}
  failures = []
  if max(counter.count, scorer.step.compilations) > len(batches):
    failures.append(f"{counter.count} programs compiled for {len(batches)} batch shapes: the "
                    "step compiles more than once a shape")
  if checks["off_dtype_parameters"]:
    failures.append(f"parameters not in {jnp.dtype(scorer.dtype).name}, copied to it in every "
                    f"step: {', '.join(checks['off_dtype_parameters'])}")
  checks["failures"] = failures
  return batches, checks


def largest_fitting_tokens_per_batch(topology: hardware.Topology, hf_config: dict, source: str,
                                     options: engine.ScoringOptions,
                                     fits: bool, tensors: weights.TensorSource | None = None,
                                     progress: Progress | None = None) -> dict[str, Any]:
  """The largest `--tokens_per_batch` of the form `options.tokens_per_batch` x 2^k whose every
  batch shape fits, each candidate compiled: up to the largest batch the engine makes
  (`ScoringOptions.batch_tokens`: `--chunk_size` rows of `--max_length`), down to one row of
  the longest bucket per data-parallel device. {"tokens_per_batch" (None when none fits),
  "hbm_bytes_per_chip" of its largest shape, "limit": it is the engine's largest, which fits}.
  `fits`: whether `options.tokens_per_batch` itself fits. A `progress` line a program."""
  platform = topology.devices[0].platform
  progress = progress or Progress()

  def worst_if_fitting(tokens: int) -> int | None:
    scorer = build(topology, hf_config, source,
                   dataclasses.replace(options, tokens_per_batch=tokens), tensors)
    worst = 0
    progress.start("scoring", len(shapes(scorer)),
                   f"the largest batch that fits: --tokens_per_batch={tokens}")
    for shape in reversed(shapes(scorer)):  # longest rows first: the likeliest not to fit
      entry = compile_shape(scorer, shape)
      progress.batch(entry)
      if not entry["fits"]:
        return None
      worst = max(worst, entry["hbm_bytes_per_chip"])
    return worst

  base = options.tokens_per_batch
  if fits:
    largest = dataclasses.replace(options, tokens_per_batch=2**62).batch_tokens(platform)
    best = {"tokens_per_batch": base, "hbm_bytes_per_chip": None, "limit": base >= largest}
    tokens = base
    while tokens < largest:
      tokens *= 2
      worst = worst_if_fitting(tokens)
      if worst is None:
        break
      best = {"tokens_per_batch": tokens, "hbm_bytes_per_chip": worst, "limit": tokens >= largest}
    return best
  # The smallest batch: one row of the longest bucket for each device of the data axis.
  data = int(mesh_lib.parse_mesh_spec(options.mesh, len(mesh_lib.group_devices(
      options.mesh, topology.devices, process_index=0)))["data"])
  smallest = options.max_length * data
  tokens = base // 2
  while tokens >= smallest:
    worst = worst_if_fitting(tokens)
    if worst is not None:
      return {"tokens_per_batch": tokens, "hbm_bytes_per_chip": worst, "limit": False}
    tokens //= 2
  return {"tokens_per_batch": None, "hbm_bytes_per_chip": None, "limit": False}


def model_axis_choices(topology: hardware.Topology) -> list[int]:
  """Model axis sizes a mesh on `topology` can have: divisors of a host's devices, or whole
  numbers of hosts that divide the job's hosts (`mesh.group_devices`)."""
  local, hosts = topology.devices_per_host, topology.hosts
  within = [m for m in range(1, local + 1) if local % m == 0]
  across = [local * k for k in range(2, hosts + 1) if hosts % k == 0]
  return within + across


def smallest_fitting_model_axis(topology: hardware.Topology, hf_config: dict, source: str,
                                options: engine.ScoringOptions, larger_than: int,
                                tensors: weights.TensorSource | None = None,
                                progress: Progress | None = None) -> dict | None:
  """The smallest model axis above `larger_than` whose every batch shape fits a chip's HBM:
  {"mesh": ..., "model": m, "hbm_bytes_per_chip": the largest shape's}; None when none does.
  Longest rows are tried first, and a mesh is left at its first shape that does not fit. A
  `progress` line a program."""
  progress = progress or Progress()
  for model_axis in (m for m in model_axis_choices(topology) if m > larger_than):
    trial = dataclasses.replace(options, mesh=f"data:-1,model:{model_axis}")
    try:
      scorer = build(topology, hf_config, source, trial, tensors)
    except InputError:
      continue
    worst = 0
    progress.start("scoring", len(shapes(scorer)),
                   f"the smallest model axis that fits: {model_axis}")
    for shape in reversed(shapes(scorer)):
      entry = compile_shape(scorer, shape)
      progress.batch(entry)
      if not entry["fits"]:
        break
      worst = max(worst, entry["hbm_bytes_per_chip"])
    else:
      return {"mesh": mesh_lib.describe(scorer.mesh), "model": model_axis,
              "hbm_bytes_per_chip": worst}
  return None
