"""What every family's `Model` shares: its constructor, and its layers as one stacked module run
under `jax.lax.scan`.

`FamilyModel.__init__` is the one constructor: `Model(config, *, attention, remat_policy, dtype,
param_dtype, rngs)` keeps the config, the compute dtype, the attention implementation and the
remat policy, draws from a fresh random stream when none is given (each model its own, never a
shared default), and hands the family's `build` the keyword arguments its parameters take.

The layers are one module whose every parameter has a leading [L] axis (`stack_layers`, each
layer drawn from its own key), run by `scan_layers`: the traced program holds one layer, so compile
time does not grow with depth, and what differs between layers (a sliding window, RoPE
frequencies, an attention scale) is data scanned with the parameters. Their HF tensors are read
into the stacked parameters by `weights.stacked_sources`. Each scanned layer runs under
`jax.checkpoint` with the model's remat policy (`REMAT_POLICIES`): what its backward pass keeps,
and so recomputes, is a setting, as MaxText's `remat_policy` is. A forward alone (scoring) is the
same program whatever the policy.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

from socialrm_jax.models import attention, layers

_POLICIES = jax.checkpoint_policies
# What a scanned layer keeps for its backward pass, by name (`remat_policy`):
# - "save_projections_and_attention": the projections' outputs (dots without batch axes, and
#   `layers.Projection`'s by name), RoPE's tables, attention's inputs (heads-major, after RoPE),
#   its output and its rows' softmax statistics (`attention.softmax_attention`'s backward reads
#   them); norms and activations are recomputed;
# - "save_dots": every dot without batch axes (MaxText's "minimal"): attention's inputs and
#   statistics are recomputed too;
# - "full": nothing: the whole layer is recomputed (least memory; MaxText's "full");
# - "none": everything (no recomputation, most memory).
# "auto" is save_projections_and_attention on every platform.
REMAT_POLICIES = {
    "save_projections_and_attention": _POLICIES.save_from_both_policies(
        _POLICIES.dots_with_no_batch_dims_saveable,
        _POLICIES.save_only_these_names(layers.PROJECTION_OUTPUT, layers.ROTARY_TABLES,
                                        attention.ATTENTION_INPUTS, attention.ATTENTION_OUTPUT,
                                        attention.ATTENTION_ROW_STATISTICS)),
    "save_dots": _POLICIES.dots_with_no_batch_dims_saveable,
    "full": _POLICIES.nothing_saveable,
    "none": _POLICIES.everything_saveable,
}
REMAT_POLICY_NAMES = ("auto", *REMAT_POLICIES)
DEFAULT_REMAT_POLICY = "save_projections_and_attention"


def checkpoint_policy(name: str):
  """The `jax.checkpoint` policy of the remat policy `name` (one of REMAT_POLICY_NAMES)."""
  name = DEFAULT_REMAT_POLICY if name == "auto" else name
  if name not in REMAT_POLICIES:
    raise ValueError(f"unknown remat policy {name!r}; one of {', '.join(REMAT_POLICY_NAMES)}")
  return REMAT_POLICIES[name]


# (layer, hidden [B, T, D], this layer's scanned data) -> hidden.
LayerCall = Callable[[nnx.Module, jax.Array, Any], jax.Array]


class FamilyModel(nnx.Module):
  """The opening of every family's Model. A family's Model implements `build` (its parameters),
  `__call__(input_ids, positions, layout, token_type_ids=None, output_index=None)` -> hidden
  [B, T or P, D] and `head(hidden)` -> scores, logits or the pooled hidden state."""

  def __init__(self, config, *, attention: str = "xla", remat_policy: str = "auto",
               dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs | None = None):
    """`attention`: a concrete implementation of `attention.attend` ("xla", "cudnn", ...; see
    `attention.resolve`); `remat_policy`: a name of REMAT_POLICY_NAMES."""
    rngs = nnx.Rngs(0) if rngs is None else rngs  # a fresh stream per model, not a shared default
    checkpoint_policy(remat_policy)  # an unknown name refused when the model is made
    self.config = config
    self.dtype = dtype
    self.attention = attention
    self.remat_policy = remat_policy
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
                last_call: LayerCall | None = None, remat: str = "auto") -> jax.Array:
  """x [B, T, D] through the stacked `layers` in order: `call(layer, x, data)` under one scan,
  `data` the layer's slice of `per_layer` (a pytree of [L, ...] arrays, or None), each layer
  under `jax.checkpoint` with the remat policy `remat` (a name of REMAT_POLICY_NAMES).

  `last_call`: the last layer runs outside the scan through it instead (the decoder's last
  layer computes its queries only where the readouts read).
  """
  graphdef, stacked = nnx.split(layers)  # every leaf [L, ...]
  scanned = (stacked, per_layer)  # per layer: parameters, data
  num_layers = jax.tree.leaves(stacked)[0].shape[0]
  count = num_layers if last_call is None else num_layers - 1

  # Each layer's slice taken inside the checkpoint, by a traced index: taken outside, the backward
  # pass would keep every layer's slice of the weights as a stacked residual, a copy of them.
  @functools.partial(jax.checkpoint, policy=checkpoint_policy(remat), prevent_cse=False)
  def layer(x, index):
    state, data = _layer_at(scanned, index)
    return call(nnx.merge(graphdef, state), x, data), None

  x, _ = jax.lax.scan(layer, x, jnp.arange(count))
  if last_call is None:
    return x
  state, data = _layer_at(scanned, num_layers - 1)
  return last_call(nnx.merge(graphdef, state), x, data)


# XLA:CPU computes bfloat16 in float32: its float normalization widens the layer stack that
# `_layer_at` slices, whole, and its loop-invariant code motion then hoists that widening out of the
# layer loop, so the program would write a float32 copy of every layer's weights (twice their
# bytes) before the first layer runs. With that pass off, each iteration widens its own layer.
_BFLOAT16_WEIGHTS_ON_CPU = {"xla_disable_hlo_passes": "while-loop-invariant-code-motion"}


def compiler_options(params) -> dict[str, str]:
  """XLA's options for the programs that run a model of `params` (arrays or abstract arrays, with
  their shardings) on the devices they are placed on: none but on CPU with bfloat16 weights."""
  leaves = [leaf for leaf in jax.tree.leaves(params) if hasattr(leaf, "dtype")]
  sharding = next((leaf.sharding for leaf in leaves if getattr(leaf, "sharding", None)), None)
  platform = (next(iter(sharding.device_set)).platform if sharding is not None
              else jax.default_backend())
  bfloat16 = any(leaf.dtype == jnp.bfloat16 for leaf in leaves)
  return dict(_BFLOAT16_WEIGHTS_ON_CPU) if platform == "cpu" and bfloat16 else {}


def _layer_at(stacked, index):
  """One layer's slice of a pytree of [L, ...] stacks, by a traced index (inside a checkpoint, so
  that no slice of the stacked weights is copied for the backward pass)."""
  return jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, index, keepdims=False), stacked)
