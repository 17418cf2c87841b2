"""The native checkpoint: orbax-saved parameters plus a manifest naming the family and config.

Layout of a native folder:
  socialrm_model.json   {"format_version", "family", "param_dtype", "config"}
  params/               orbax StandardCheckpointer tree: {"layers.0.attn.q_proj.kernel": array, ...}
  tokenizer files       copied from the source checkpoint
Restoring places each parameter straight into its sharding, as loading from HF does.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

from socialrm_jax import tables
from socialrm_jax.errors import InputError
from socialrm_jax.models import weights

MANIFEST = "socialrm_model.json"
PARAMS_DIR = "params"
FORMAT_VERSION = 1


def is_native(path: str) -> bool:
  return os.path.isdir(path) and os.path.exists(os.path.join(path, MANIFEST))


def read_manifest(folder: str) -> tuple[str, dict[str, Any]]:
  """-> (family module name, config dict)."""
  with open(os.path.join(folder, MANIFEST)) as f:
    manifest = json.load(f)
  if manifest.get("format_version") != FORMAT_VERSION:
    raise InputError(f"unsupported native checkpoint version {manifest.get('format_version')!r}",
                     os.path.join(folder, MANIFEST))
  return manifest["family"], manifest["config"]


def _flat_key(path: str) -> str:
  # orbax turns keys into file names: no slashes.
  return path.replace("/", ".")


def save(folder: str, module: nnx.Module, family_name: str, config) -> None:
  """Writes `module`'s parameters and the manifest into `folder` (created if needed)."""
  folder = os.path.abspath(folder)
  os.makedirs(folder, exist_ok=True)
  params = {_flat_key(path): var.get_value() for path, var in weights.param_paths(module).items()}
  dtypes = {str(jnp.dtype(a.dtype)) for a in params.values()}
  if len(dtypes) != 1:
    raise ValueError(f"parameters have mixed dtypes {sorted(dtypes)}")
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(os.path.join(folder, PARAMS_DIR), params, force=True)
    checkpointer.wait_until_finished()
  manifest = {"format_version": FORMAT_VERSION, "family": family_name,
              "param_dtype": dtypes.pop(), "config": config.to_dict()}
  tables.atomic_write_json(os.path.join(folder, MANIFEST), manifest)


def restore_params(folder: str, module: nnx.Module, sources: Mapping[str, weights.WeightSource], *,
                   dtype, mesh=None) -> nnx.Module:
  """Fills `module` (abstract or real) from `folder`'s orbax params, each into its sharding."""
  folder = os.path.abspath(folder)
  with open(os.path.join(folder, MANIFEST)) as f:
    stored_dtype = jnp.dtype(json.load(f)["param_dtype"])
  variables = weights.param_paths(module)
  target = {}
  for path, var in variables.items():
    shape = tuple(var.get_value().shape)
    target[_flat_key(path)] = jax.ShapeDtypeStruct(
        shape, stored_dtype, sharding=weights.param_sharding(shape, sources[path], mesh))
  with ocp.StandardCheckpointer() as checkpointer:
    try:
      restored = checkpointer.restore(os.path.join(folder, PARAMS_DIR), target)
    except (ValueError, KeyError) as e:
      raise InputError(f"native checkpoint does not match its manifest: {e}", folder) from None
  dtype = jnp.dtype(dtype)
  for path, var in variables.items():
    value = restored[_flat_key(path)]
    var.set_value(value if value.dtype == dtype else value.astype(dtype))
  return module
