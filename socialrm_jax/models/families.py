"""Which module implements which HuggingFace architecture.

Each family module (`decoder`, `gpt2`, `gpt_neox`, `bert`, `deberta`) exports `ARCHITECTURES`, a dict from a HF
architecture name (as in `config.json`'s `architectures`) to the head it carries: `"score"`
(sequence classification), `"lm"` (causal language model) or `"none"` (bare encoder). Family
modules are imported lazily, so importing this module costs nothing.
"""

from __future__ import annotations

import importlib
import types

FAMILY_MODULES = ("decoder", "gpt2", "gpt_neox", "bert", "deberta")


def family_modules() -> list[types.ModuleType]:
  return [importlib.import_module(f"socialrm_jax.models.{name}") for name in FAMILY_MODULES]


def supported_architectures() -> dict[str, str]:
  """Every supported HF architecture name -> its head kind."""
  out: dict[str, str] = {}
  for module in family_modules():
    out.update(module.ARCHITECTURES)
  return dict(sorted(out.items()))


def family_for(architecture: str) -> types.ModuleType:
  """The family module implementing `architecture`, or a ValueError listing the supported ones
  (or saying why a family refuses it: its `REFUSED_ARCHITECTURES`)."""
  for module in family_modules():
    if architecture in module.ARCHITECTURES:
      return module
  for module in family_modules():
    reason = getattr(module, "REFUSED_ARCHITECTURES", {}).get(architecture)
    if reason:
      raise ValueError(f"unsupported architecture {architecture!r}: {reason}")
  raise ValueError(
      f"unsupported architecture {architecture!r}; supported: "
      + ", ".join(supported_architectures()))
