"""Dataset adapters: one module per dataset, each turning original files into items (SPEC sec. 3).

An adapter module exports `convert(reader: SourceReader) -> Iterator[Item]`; it reads its files
through the reader (which counts rows and drops) and builds each `Item` with the pairs it implies.
"""

from __future__ import annotations

import importlib
import types

from socialrm_jax.errors import InputError

DATASETS = ("bbq", "crows_pairs", "stereoset", "hh_rlhf", "xstest", "ethics", "moral_stories")


def _check(name: str) -> None:
  if name not in DATASETS:
    raise InputError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)} (or 'all')")


def adapter(name: str) -> types.ModuleType:
  _check(name)
  return importlib.import_module(f"socialrm_jax.datasets.{name}")


def resolve(names: str | list[str]) -> list[str]:
  """`"all"` or a comma-separated list -> dataset names, in the canonical order."""
  if isinstance(names, str):
    names = [n.strip() for n in names.split(",") if n.strip()]
  if names == ["all"]:
    return list(DATASETS)
  for name in names:
    _check(name)
  if not names:
    raise InputError(f"no dataset named; known: {', '.join(DATASETS)} (or 'all')")
  return [n for n in DATASETS if n in names]
