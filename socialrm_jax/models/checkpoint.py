"""The native checkpoint: orbax-saved parameters plus a manifest naming the family and config.

Layout of a native folder:
  socialrm_model.json   {"format_version", "family", "param_dtype", "config"}
  params/               orbax StandardCheckpointer tree, one key per parameter path:
                        {"layers.attn.q_proj.kernel": [L, D, N, H] array, ...}
  tokenizer files       copied from the source checkpoint
Restoring places each parameter straight into its sharding, as loading from HF does.

Format 1 predates stacked layers: it kept each layer's parameters under their own keys
(`layers.0.attn.q_proj.kernel`, ...). Format 2 stacked every family's layers but GPT-2's and
BERT's, which kept theirs per layer until format 3 stacked them too. Such checkpoints still load;
their layers are stacked on restore.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import weights

MANIFEST = "socialrm_model.json"
PARAMS_DIR = "params"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
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
  per_layer_keys = manifest["format_version"] == 1 or (
      manifest["format_version"] == 2 and manifest["family"] in PER_LAYER_IN_FORMAT_2)
  variables = weights.param_paths(module)
  shardings, target = {}, {}
  for path, var in variables.items():
    shape, model_axis = tuple(var.get_value().shape), sources[path].model_axis
    shardings[path] = weights.param_sharding(shape, model_axis, mesh)
    if per_layer_keys and sources[path].stacked:
      layer_sharding = weights.param_sharding(
          shape[1:], None if model_axis is None else model_axis - 1, mesh)
      for layer in range(shape[0]):
        target[_format1_layer_key(path, layer)] = jax.ShapeDtypeStruct(
            shape[1:], stored_dtype, sharding=layer_sharding)
    else:
      target[_flat_key(path)] = jax.ShapeDtypeStruct(shape, stored_dtype, sharding=shardings[path])
  with _checkpointer() as checkpointer:
    try:
      restored = checkpointer.restore(os.path.join(folder, PARAMS_DIR), target)
    except (ValueError, KeyError) as e:
      raise InputError(f"native checkpoint does not match its manifest: {e}", folder) from None
  dtype = jnp.dtype(dtype)
  for path, var in variables.items():
    if _flat_key(path) in restored:
      value = restored[_flat_key(path)]
    else:  # format 1: stack the layers, straight into the stacked parameter's sharding
      layers = [restored[_format1_layer_key(path, i)] for i in range(var.get_value().shape[0])]
      value = jax.jit(lambda *xs: jnp.stack(xs), out_shardings=shardings[path])(*layers)
    var.set_value(value if value.dtype == dtype else value.astype(dtype))
  return module
