"""The native checkpoint: orbax-saved parameters plus a manifest naming the family and config.

Layout of a native folder:
  socialrm_model.json   {"format_version", "family", "param_dtype", "config"}
  params/               orbax StandardCheckpointer tree, one key per parameter path:
                        {"layers.attn.q_proj.kernel": [L, N, H, D] array, ...}
  tokenizer files       copied from the source checkpoint
Restoring places each parameter straight into its sharding, as loading from HF does.

Format 1 predates stacked layers: it kept each layer's parameters under their own keys
(`layers.0.attn.q_proj.kernel`, ...). Format 2 stacked every family's layers but GPT-2's and
BERT's, which kept theirs per layer until format 3 stacked them too. Formats 1 to 3 laid a
projection's kernel out [in..., out...]; format 4 keeps `layers.Projection`'s [out..., in...] (a HF
Linear's). Such checkpoints still load: their layers are stacked and their kernels' axes moved on
restore.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import layers, weights

MANIFEST = "socialrm_model.json"
PARAMS_DIR = "params"
FORMAT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
# The last format whose projection kernels are laid out [in..., out...].
INPUTS_FIRST_UNTIL = 3
# The families whose format-2 checkpoints keep each layer's parameters under their own keys.
PER_LAYER_IN_FORMAT_2 = ("gpt2", "bert")


def _checkpointer():
  """orbax's StandardCheckpointer. orbax (with tensorstore) is imported here, not with this module:
  its import is slow, and only native checkpoints use it."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  return ocp.StandardCheckpointer()


def is_native(path: str) -> bool:
  return os.path.isdir(path) and os.path.exists(os.path.join(path, MANIFEST))


def _manifest(folder: str) -> dict[str, Any]:
  path = os.path.join(folder, MANIFEST)
  manifest = tables.read_json_object(path)
  if manifest.get("format_version") not in READABLE_VERSIONS:
    raise InputError(f"unsupported native checkpoint version {manifest.get('format_version')!r}",
                     path)
  missing = [key for key in ("family", "param_dtype", "config") if key not in manifest]
  if missing or not isinstance(manifest["config"], dict):
    raise InputError(f"the manifest lacks {', '.join(missing) or 'a config object'}", path)
  return manifest


def read_manifest(folder: str) -> tuple[str, dict[str, Any]]:
  """-> (family module name, config dict)."""
  manifest = _manifest(folder)
  return manifest["family"], manifest["config"]


def _flat_key(path: str) -> str:
  # orbax turns keys into file names: no slashes.
  return path.replace("/", ".")


def _format1_layer_key(path: str, layer: int) -> str:
  """Format 1's key for one layer of a stacked parameter: its index after the top-level module
  that holds the layers ('layers/attn/q_proj/kernel' -> 'layers.0.attn.q_proj.kernel')."""
  module, rest = path.split("/", 1)
  return _flat_key(f"{module}/{layer}/{rest}")


def _inputs_first_axes(module: nnx.Module, path: str, stacked: bool) -> tuple[int, ...] | None:
  """For a projection's kernel at `path`: the axes of its format-1-to-3 array [L?, in..., out...]
  in the order of ours [L?, out..., in...] (a `jnp.transpose` permutation); None for others."""
  node = module
  for key in path.split("/")[:-1]:
    node = getattr(node, key)
  if not (path.endswith("/kernel") and isinstance(node, layers.Projection)):
    return None
  outs, ins = layers.kernel_axes(node.equation)
  lead = int(stacked)
  return (*range(lead), *range(lead + ins, lead + ins + outs), *range(lead, lead + ins))


def save(folder: str, module: nnx.Module, family_name: str, config) -> None:
  """Writes `module`'s parameters and the manifest into `folder` (created if needed)."""
  folder = os.path.abspath(folder)
  os.makedirs(folder, exist_ok=True)
  params = {_flat_key(path): var.get_value() for path, var in weights.param_paths(module).items()}
  dtypes = {str(jnp.dtype(a.dtype)) for a in params.values()}
  if len(dtypes) != 1:
    raise ValueError(f"parameters have mixed dtypes {sorted(dtypes)}")
  with _checkpointer() as checkpointer:
    checkpointer.save(os.path.join(folder, PARAMS_DIR), params, force=True)
    checkpointer.wait_until_finished()
  manifest = {"format_version": FORMAT_VERSION, "family": family_name,
              "param_dtype": dtypes.pop(), "config": config.to_dict()}
  tables.atomic_write_json(os.path.join(folder, MANIFEST), manifest)


def restore_params(folder: str, module: nnx.Module, sources: Mapping[str, weights.WeightSource], *,
                   dtype, mesh=None) -> nnx.Module:
  """Fills `module` (abstract or real) from `folder`'s orbax params, each into its sharding."""
  folder = os.path.abspath(folder)
  manifest = _manifest(folder)
  stored_dtype = jnp.dtype(manifest["param_dtype"])
  version = manifest["format_version"]
  per_layer_keys = version == 1 or (version == 2 and manifest["family"] in PER_LAYER_IN_FORMAT_2)
  variables = weights.param_paths(module)
  shardings, target, moved = {}, {}, {}
  for path, var in variables.items():
    shape, model_axis = tuple(var.get_value().shape), sources[path].model_axis
    shardings[path] = weights.param_sharding(shape, model_axis, mesh)
    axes = (_inputs_first_axes(module, path, sources[path].stacked)
            if version <= INPUTS_FIRST_UNTIL else None)
    if axes is not None:  # stored [L?, in..., out...], read unsharded, then moved
      moved[path] = axes
      shape, model_axis = tuple(shape[axes.index(i)] for i in range(len(shape))), None
    if per_layer_keys and sources[path].stacked:
      layer_sharding = weights.param_sharding(
          shape[1:], None if model_axis is None else model_axis - 1, mesh)
      for layer in range(shape[0]):
        target[_format1_layer_key(path, layer)] = jax.ShapeDtypeStruct(
            shape[1:], stored_dtype, sharding=layer_sharding)
    else:
      target[_flat_key(path)] = jax.ShapeDtypeStruct(
          shape, stored_dtype,
          sharding=weights.param_sharding(shape, model_axis, mesh) if path in moved
          else shardings[path])
  with _checkpointer() as checkpointer:
    try:
      restored = checkpointer.restore(os.path.join(folder, PARAMS_DIR), target)
    except (ValueError, KeyError) as e:
      raise InputError(f"native checkpoint does not match its manifest: {e}", folder) from None
  dtype = jnp.dtype(dtype)
  for path, var in variables.items():
    if _flat_key(path) in restored:
      parts = [restored[_flat_key(path)]]
      gather = lambda x: x
    else:  # per-layer keys: stack the layers, straight into the stacked parameter's sharding
      parts = [restored[_format1_layer_key(path, i)] for i in range(var.get_value().shape[0])]
      gather = lambda *xs: jnp.stack(xs)
    if path in moved:
      value = jax.jit(lambda *xs, axes=moved[path]: jnp.transpose(gather(*xs), axes),
                      out_shardings=shardings[path])(*parts)
    elif len(parts) > 1:
      value = jax.jit(gather, out_shardings=shardings[path])(*parts)
    else:
      value = parts[0]
    var.set_value(value if value.dtype == dtype else value.astype(dtype))
  return module
