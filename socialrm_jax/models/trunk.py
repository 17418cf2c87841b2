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
"""

from __future__ import annotations

import functools
from typing import Any, Callable

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

  @functools.partial(jax.checkpoint, policy=LAYER_SAVED_RESIDUALS, prevent_cse=False)
  def layer(x, scanned):
    state, data = scanned
    return call(nnx.merge(graphdef, state), x, data), None

  if last_call is None:
    x, _ = jax.lax.scan(layer, x, scanned)
    return x

  def layer_at(index):  # by a traced index, so that no slice of the stacked weights is copied
    return jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, index, keepdims=False), scanned)

  # The slicing inside the checkpoint: outside it, the backward pass kept every layer's slice of
  # the weights as a stacked [L - 1, ...] residual, a copy of the weights written on every call.
  @functools.partial(jax.checkpoint, policy=LAYER_SAVED_RESIDUALS, prevent_cse=False)
  def indexed_layer(x, index):
    state, data = layer_at(index)
    return call(nnx.merge(graphdef, state), x, data), None

  num_layers = jax.tree.leaves(stacked)[0].shape[0]
  x, _ = jax.lax.scan(indexed_layer, x, jnp.arange(num_layers - 1))
  state, data = layer_at(num_layers - 1)
  return last_call(nnx.merge(graphdef, state), x, data)
