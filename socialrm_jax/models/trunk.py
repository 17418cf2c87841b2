"""What every family's `Model` shares: its constructor, and its layers as one stacked module run
under `jax.lax.scan`.

`FamilyModel.__init__` is the one constructor: `Model(config, *, attention, dtype, param_dtype,
rngs)` keeps the config, the compute dtype and the attention implementation, draws from a fresh
random stream when none is given (each model its own, never a shared default), and hands the
family's `build` the keyword arguments its parameters take.

The layers are one module whose every parameter has a leading [L] axis (`stack_layers`, each
layer drawn from its own key), run by `scan_layers`: the traced program holds one layer, so compile
time does not grow with depth, and what differs between layers (a sliding window, RoPE
frequencies, an attention scale) is data scanned with the parameters. Their HF tensors are read
into the stacked parameters by `weights.stacked_sources`.

Under `residual_workspace` (the train step on one CPU device), the scan keeps the residuals its
backward pass reads in buffers the caller passes in and gets back, rather than in stacks made and
zeroed on every call.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from socialrm_jax.models import attention, layers

# What the scanned layers keep for a backward pass (a `jax.checkpoint` policy): their projections'
# outputs (dots without batch axes, and `layers.Projection`'s by name), attention's inputs
# (heads-major, after RoPE) and its output and row statistics (for `attention.softmax_attention`'s
# own backward); the norms and activations are recomputed from them. Keeping everything cost more
# than recomputing it on a CPU: each saved intermediate is a stacked [L, ...] buffer zeroed,
# written and read back per call (benchmarks/train_step_profile.py). A forward alone (scoring) is
# the same program either way.
LAYER_SAVED_RESIDUALS = jax.checkpoint_policies.save_from_both_policies(
    jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    jax.checkpoint_policies.save_only_these_names(layers.PROJECTION_OUTPUT,
                                                  layers.ROTARY_TABLES,
                                                  attention.ATTENTION_INPUTS,
                                                  attention.ATTENTION_OUTPUT,
                                                  attention.ATTENTION_ROW_STATISTICS))

# (layer, hidden [B, T, D], this layer's scanned data) -> hidden.
LayerCall = Callable[[nnx.Module, jax.Array, Any], jax.Array]


class FamilyModel(nnx.Module):
  """The opening of every family's Model. A family's Model implements `build` (its parameters),
  `__call__(input_ids, positions, layout, token_type_ids=None, output_index=None)` -> hidden
  [B, T or P, D] and `head(hidden)` -> scores, logits or the pooled hidden state."""

  def __init__(self, config, *, attention: str = "xla", dtype=jnp.float32,
               param_dtype=jnp.float32, rngs: nnx.Rngs | None = None):
    """`attention`: a concrete implementation of `attention.attend` ("xla", "cudnn", ...; see
    `attention.resolve`)."""
    rngs = nnx.Rngs(0) if rngs is None else rngs  # a fresh stream per model, not a shared default
    self.config = config
    self.dtype = dtype
    self.attention = attention
    self.build(config, dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs))

  def build(self, config, kw: dict[str, Any]) -> None:
    """Creates the family's parameters; `kw`: dtype, param_dtype and rngs, as layers take them."""
    raise NotImplementedError(f"{type(self).__name__} must define build")

  def stacked_blocks(self, block: Callable[..., nnx.Module], config,
                     kw: dict[str, Any]) -> nnx.Module:
    """The family's `block(config, attention=, dtype=, param_dtype=, rngs=)` stacked over
    `config.num_layers` (`stack_layers`), for `scan_layers`."""
    attention = self.attention
    return stack_layers(lambda rngs: block(config, attention=attention, **dict(kw, rngs=rngs)),
                        config.num_layers, kw["rngs"])


def stack_layers(make_layer: Callable[[nnx.Rngs], nnx.Module], num_layers: int,
                 rngs: nnx.Rngs) -> nnx.Module:
  """One layer module (`make_layer(rngs)`) whose parameters carry a leading [L] axis, each
  layer's drawn from its own key."""

  @nnx.split_rngs(splits=num_layers)
  @nnx.vmap(in_axes=(0,), out_axes=0)
  def stacked(rngs: nnx.Rngs) -> nnx.Module:
    return make_layer(rngs)

  return stacked(rngs)


def scan_layers(layers: nnx.Module, x: jax.Array, call: LayerCall, per_layer: Any = None,
                last_call: LayerCall | None = None) -> jax.Array:
  """x [B, T, D] through the stacked `layers` in order: `call(layer, x, data)` under one scan,
  `data` the layer's slice of `per_layer` (a pytree of [L, ...] arrays, or None).

  `last_call`: the last layer runs outside the scan through it instead (the decoder's last
  layer computes its queries only where the readouts read); the others are scanned by a traced
  index, so no slice of the stacked weights is copied.
  """
  graphdef, stacked = nnx.split(layers)  # every leaf [L, ...]
  scanned = (stacked, per_layer)  # per layer: parameters, data
  workspace = getattr(_active, "workspace", None)
  if workspace is not None:
    num_layers = jax.tree.leaves(stacked)[0].shape[0]
    count = num_layers if last_call is None else num_layers - 1
    x = workspace.scan(graphdef, stacked, per_layer, x, call, count)
    if last_call is None:
      return x
    state, data = _layer_at(scanned, num_layers - 1)
    return last_call(nnx.merge(graphdef, state), x, data)

  @functools.partial(jax.checkpoint, policy=LAYER_SAVED_RESIDUALS, prevent_cse=False)
  def layer(x, scanned):
    state, data = scanned
    return call(nnx.merge(graphdef, state), x, data), None

  if last_call is None:
    x, _ = jax.lax.scan(layer, x, scanned)
    return x

  # The slicing inside the checkpoint: outside it, the backward pass kept every layer's slice of
  # the weights as a stacked [L - 1, ...] residual, a copy of the weights written on every call.
  @functools.partial(jax.checkpoint, policy=LAYER_SAVED_RESIDUALS, prevent_cse=False)
  def indexed_layer(x, index):
    state, data = _layer_at(scanned, index)
    return call(nnx.merge(graphdef, state), x, data), None

  num_layers = jax.tree.leaves(stacked)[0].shape[0]
  x, _ = jax.lax.scan(indexed_layer, x, jnp.arange(num_layers - 1))
  state, data = _layer_at(scanned, num_layers - 1)
  return last_call(nnx.merge(graphdef, state), x, data)


def _layer_at(stacked, index):
  """One layer's slice of a pytree of [L, ...] stacks, by a traced index (inside a checkpoint, so
  that no slice of the stacked weights is copied for the backward pass)."""
  return jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, index, keepdims=False), stacked)


# `workspace`: the ResidualWorkspace `scan_layers` keeps its residuals in, while one is active
# (`residual_workspace`) in the thread tracing.
_active = threading.local()


@contextlib.contextmanager
def residual_workspace(buffers: Sequence[jax.Array] | None) -> Iterator[ResidualWorkspace | None]:
  """While active (for tracing a value and gradient), the one `scan_layers` call keeps the
  residuals its backward pass reads in `buffers` (`workspace_shapes`: one [count, ...] buffer
  each) rather than in stacks JAX's scan makes afresh, and zeroes, on every call; the buffers the
  backward pass read come back as `buffers`' gradient, to be donated to the next call.

  Why: on a CPU the stacks cost 6% of the 35M Llama's LoRA value and gradient (0.943 and 0.937
  of it with the workspace), most of it the kernel zeroing the pages of buffers allocated afresh
  on each call (benchmarks/train_step_profile.py --compare=scan_residuals,current). The gradients
  are the scan's to the bit (tests/models/test_trunk.py). `buffers` None: the scan as it is."""
  if buffers is None:
    yield None
    return
  with _activated(ResidualWorkspace(list(buffers))) as workspace:
    yield workspace


def workspace_shapes(forward: Callable[..., Any], *args) -> list[jax.ShapeDtypeStruct]:
  """The buffers `residual_workspace` needs for `forward(*args)` (its one `scan_layers` call's
  residuals of one layer, each with a leading [count]), found by tracing it, abstractly."""
  with _activated(ResidualWorkspace(None)) as workspace:
    jax.eval_shape(forward, *args)
  if workspace.shapes is None:
    raise ValueError("workspace_shapes: the forward runs no scan_layers")
  return workspace.shapes


@contextlib.contextmanager
def _activated(workspace: ResidualWorkspace) -> Iterator[ResidualWorkspace]:
  if getattr(_active, "workspace", None) is not None:
    raise RuntimeError("residual_workspace: one is active already")
  _active.workspace = workspace
  try:
    yield workspace
  finally:
    _active.workspace = None


class ResidualWorkspace:
  """`scan_layers`' scan as a `jax.custom_vjp`: the forward scan takes each layer's `jax.vjp`
  (under `LAYER_SAVED_RESIDUALS`' checkpoint, as the scan's) and writes the residuals it keeps in
  place into `buffers`, carried through the scan; the backward scan reads them back and calls the
  layer's vjp. The residuals that are the layer's own parameters or scanned data are not written:
  the backward pass slices them from the stacks again, as JAX's scan does. Integer residuals
  (positions) are few and small: they are stacked the scan's way."""

  def __init__(self, buffers: list[jax.Array] | None):
    self.buffers = buffers  # None: only finding their shapes (`workspace_shapes`)
    self.shapes: list[jax.ShapeDtypeStruct] | None = None
    self.used = False

  def scan(self, graphdef, stacked, per_layer, x: jax.Array, call: LayerCall,
           count: int) -> jax.Array:
    if self.used:
      raise RuntimeError("residual_workspace: a second scan_layers call")
    self.used = True

    def layer_call(state, x, data):
      return call(nnx.merge(graphdef, state), x, data)
    # What `call` closes over that has a gradient (DeBERTa's relative embeddings) as arguments:
    # a custom_vjp takes none by closure.
    layer_call, consts = jax.closure_convert(layer_call, _layer_at(stacked, 0), x,
                                             _layer_at(per_layer, 0))
    layer = jax.checkpoint(layer_call, policy=LAYER_SAVED_RESIDUALS, prevent_cse=False)

    def scanned(stacked, x, consts):  # the layers, no residuals kept
      return jax.lax.scan(
          lambda x, i: (layer(_layer_at(stacked, i), x, _layer_at(per_layer, i), *consts), None),
          x, jnp.arange(count))[0]

    structure = {}  # the layer's vjp: its tree, and where each of its leaves is kept

    def residuals(state, x, data, consts):
      """A layer's output, and the float residuals its vjp keeps (not its inputs' leaves)
      and the others."""
      y, vjp = jax.vjp(layer, state, x, data, *consts)
      leaves, structure["tree"] = jax.tree.flatten(vjp)
      inputs = {id(leaf): i for i, leaf in enumerate(jax.tree.leaves((state, data, consts)))}
      kept, others, structure["where"] = [], [], []
      for leaf in leaves:
        if id(leaf) in inputs:
          structure["where"].append(("input", inputs[id(leaf)]))
        elif jnp.issubdtype(leaf.dtype, jnp.inexact):
          structure["where"].append(("kept", len(kept)))
          kept.append(leaf)
        else:
          structure["where"].append(("other", len(others)))
          others.append(leaf)
      return y, kept, others

    if self.buffers is None:
      kept = jax.eval_shape(lambda stacked, x, per_layer, consts: residuals(
          _layer_at(stacked, 0), x, _layer_at(per_layer, 0), consts)[1],
          stacked, x, per_layer, consts)
      self.shapes = [jax.ShapeDtypeStruct((count, *r.shape), r.dtype) for r in kept]
      return scanned(stacked, x, consts)

    @jax.custom_vjp
    def run(stacked, x, buffers, consts):
      del buffers  # only the gradient reads them
      return scanned(stacked, x, consts)

    def run_forward(stacked, x, buffers, consts):
      def body(carry, i):
        x, buffers = carry
        y, kept, others = residuals(_layer_at(stacked, i), x, _layer_at(per_layer, i), consts)
        buffers = [jax.lax.dynamic_update_index_in_dim(b, r.astype(b.dtype), i, 0)
                   for b, r in zip(buffers, kept, strict=True)]
        return (y, buffers), others
      (y, buffers), others = jax.lax.scan(body, (x, list(buffers)), jnp.arange(count))
      return y, (stacked, buffers, others, consts)

    def run_backward(saved, d_y):
      stacked, buffers, others, consts = saved

      def body(carry, i):
        d_y, d_consts = carry
        state, data = _layer_at(stacked, i), _layer_at(per_layer, i)
        found = {"input": jax.tree.leaves((state, data, consts)), "kept": _layer_at(buffers, i),
                 "other": _layer_at(others, i)}
        vjp = jax.tree.unflatten(structure["tree"],
                                 [found[kind][j] for kind, j in structure["where"]])
        d_state, d_x, _, *d_layer_consts = vjp(d_y)
        return (d_x, jax.tree.map(jnp.add, d_consts, d_layer_consts)), d_state
      (d_x, d_consts), d_stacked = jax.lax.scan(
          body, (d_y, jax.tree.map(jnp.zeros_like, list(consts))), jnp.arange(count),
          reverse=True)
      # The layers after `count` (the last, run outside) get theirs outside: none here.
      d_stacked = jax.tree.map(
          lambda d, a: jnp.concatenate([d, jnp.zeros((a.shape[0] - count, *d.shape[1:]), d.dtype)])
          if a.shape[0] > count else d, d_stacked, stacked)
      return d_stacked, d_x, buffers, d_consts

    run.defvjp(run_forward, run_backward)
    return run(stacked, x, self.buffers, consts)
