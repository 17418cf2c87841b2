"""The compiled scoring step: only what runs under `jax.jit`, one program per batch shape.

A batch ([B, T] ids, positions, segment and branch ids, token types; [B, S] readout positions and
targets) goes through `models.readout.readouts` under its packed `attention.Layout`: rewards
[B, S, L] from the score head, or [B, S] log-probabilities of the readouts' target tokens. With a
reference model (the implicit reward, `scoring/proxies.py`) both models run on the same batch in
the same program, which returns both readouts, [B, S, 2] (policy, reference): one compilation a
shape for the pair, and the batch goes to the devices once.

Shapes are known before the first batch (`packing.Batcher.shape`), so each is compiled ahead of
time (`jit(...).lower(...).compile()`), once, and counted: `compilations`, `compile_seconds` (the
programs the persistent XLA cache supplied are counted apart: `runtime/compilation_cache.py`).
A program needs only the parameters' shapes and shardings: `precompile` compiles the run's shapes
in a thread from a model whose weights are still loading (its abstract twin), and `bind` gives the
step the loaded weights.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Callable, Iterable

import jax
import jax.numpy as jnp
from flax import nnx

from socialrm_jax.models import attention
from socialrm_jax.models import readout as readout_lib
from socialrm_jax.models import trunk
from socialrm_jax.runtime import global_arrays
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.scoring import packing

BATCH_FIELDS = ("input_ids", "positions", "segment_ids", "branch_ids", "token_type_ids",
                "readout_index", "readout_target")
READOUT_FIELDS = ("readout_index", "readout_target")
# [B, S]: where a gated reward head reads each readout's gate; sent only for such a head.
GATE_FIELD = "gate_index"


def batch_fields(readout: str, gated: bool = False) -> tuple[str, ...]:
  """The batch arrays the step of `readout` takes (`gated`: the model's head reads a gate)."""
  return (BATCH_FIELDS + readout_lib.ROW_INPUTS.get(readout, ())
          + ((GATE_FIELD,) if gated else ()))


def is_gated(model) -> bool:
  """Whether `model`'s reward head reads a gate at a prompt position (ArmoRM, QRM)."""
  spec = model.config.reward_head
  return spec is not None and bool(spec.gate_pattern) and model.config.head == "score"


class ScoringStep:
  """The one jit-compiled scoring step of a model, a readout and a mesh; one program a shape."""

  def __init__(self, model, mesh, readout: str, ref_model=None):
    """`ref_model`: a second model run on every batch (same readout), its readouts stacked after
    the first's."""
    self.mesh = mesh
    self.readout = readout
    self.is_causal = model.is_causal
    if ref_model is not None and ref_model.is_causal != model.is_causal:
      raise ValueError("a model and its reference must both be causal (or both not)")
    # One (graph, state) per model; the states go to the program as one tuple.
    graphdefs, self.state = zip(*(nnx.split(m.module) for m in (model, ref_model) if m is not None))
    self.sharding = mesh_lib.batch_sharding(mesh)
    self.compilations = 0
    self.compile_seconds = 0.0
    # (first start, last end) of the compilations, wall-clock seconds (`time.time`).
    self.compile_window: list[float] | None = None
    self._precompiling: concurrent.futures.Future | None = None  # `precompile`'s job
    self.fields = batch_fields(readout, readout == "score" and is_gated(model))
    self._programs: dict[tuple[int, int, int], jax.stages.Compiled] = {}

    def step(states, batch):
      layout = attention.Layout(batch["segment_ids"], batch["branch_ids"], self.is_causal)
      out = [readout_lib.readouts(
          nnx.merge(graphdef, state), batch["input_ids"], batch["positions"], layout,
          batch["token_type_ids"], batch["readout_index"], batch["readout_target"], readout,
          gate_index=batch.get(GATE_FIELD),
          **{name: batch[name] for name in readout_lib.ROW_INPUTS.get(readout, ())})
             for graphdef, state in zip(graphdefs, states)]
      return out[0] if len(out) == 1 else jnp.stack(out, axis=-1)  # [B, S(, L)] or [B, S, 2]

    self._jitted = jax.jit(step, out_shardings=self.sharding,
                           compiler_options=trunk.compiler_options(self.state))

  def trace(self, shape: tuple[int, int, int]) -> jax.stages.Traced:
    """The step traced for batches of (rows, row length, readout slots): its jaxpr, and what
    `compile` lowers and compiles (a plan reads the jaxpr first, `socialrm_jax.main.plan`)."""
    rows, length, slots = shape
    widths = {name: slots if name in READOUT_FIELDS else length for name in BATCH_FIELDS}
    widths[GATE_FIELD] = slots
    spec = {name: jax.ShapeDtypeStruct((rows, widths[name]) if name in widths else (rows,),
                                       jnp.int32, sharding=self.sharding)
            for name in self.fields}
    # Traced under the mesh: kernels that cannot be partitioned automatically (splash) place
    # themselves per device with shard_map over it.
    with jax.set_mesh(self.mesh):
      return self._jitted.trace(self.state, spec)

  def compile(self, shape: tuple[int, int, int],
              traced: jax.stages.Traced | None = None) -> jax.stages.Compiled:
    """The program for batches of (rows, row length, readout slots), compiled ahead of time
    (from `traced`, the step `trace(shape)` gave, where the caller has it), once `precompile`'s
    programs are (raising its error, if it failed)."""
    if self._precompiling is not None:
      precompiling, self._precompiling = self._precompiling, None
      precompiling.result()
    return self._compile_now(shape, traced)

  def _compile_now(self, shape, traced=None) -> jax.stages.Compiled:
    if shape not in self._programs:
      start, wall = time.perf_counter(), time.time()
      traced = traced or self.trace(shape)
      with jax.set_mesh(self.mesh):
        self._programs[shape] = traced.lower().compile()
      self.compile_seconds += time.perf_counter() - start
      self.compilations += 1
      first = wall if self.compile_window is None else self.compile_window[0]
      self.compile_window = [first, time.time()]
    return self._programs[shape]

  def precompile(self, shapes: Callable[[], Iterable[tuple[int, int, int]]]) -> None:
    """In a thread of its own, while the caller goes on (loading the weights: the state may be
    abstract until `bind`): `shapes()`, then their programs, one after the other."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="precompile")
    self._precompiling = pool.submit(lambda: [self._compile_now(shape) for shape in shapes()])
    pool.shutdown(wait=False)

  def bind(self, model, ref_model=None) -> None:
    """The step's parameters: the loaded `model`'s (and its reference's), in place of the
    abstract twin's it was built with; the same shapes and shardings, so the same programs."""
    self.state = tuple(nnx.state(m.module) for m in (model, ref_model) if m is not None)

  def put(self, batch: packing.Batch) -> dict[str, jax.Array]:
    """The batch's arrays on the devices (rows split over `data`); asynchronous."""
    return {name: global_arrays.put_global(getattr(batch, name), self.sharding)
            for name in self.fields}

  def __call__(self, arrays: dict[str, jax.Array]) -> jax.Array:
    """Dispatches one batch (from `put`); returns at once, the result computes on the devices."""
    rows, length = arrays["input_ids"].shape
    slots = arrays["readout_index"].shape[1]
    return self.compile((rows, length, slots))(self.state, arrays)
