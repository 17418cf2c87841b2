"""A registry of named things, each registered by its own module and looked up by name (the
pattern of big_vision's `pp/registry.py` and `evaluators.common.from_config`).

A module registers what it defines under a name (`@REGISTRY.register("name")` on a function or
class, or `REGISTRY.register("name", value)`); a lookup of a name not yet registered imports
the module of that name from the registry's package (`<package>.<name>`), which registers it,
and then, if the name is still unknown, every module named in the registry's entry-point group
(the way other installed packages join). So the code that registers and the code that looks up meet
by name alone: neither imports the other, and nothing is handed down between them.

This module imports nothing of the project but its errors.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
from typing import Any

from socialrm_jax.base.errors import InputError

_MODULE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")  # not `__init__` or a private module
_UNSET = object()


class Registry:
  """Names -> registered values of one kind (`what`, for messages), found in `package`'s modules
  and in the modules that entry points of `entry_point_group` name."""

  def __init__(self, what: str, package: str, entry_point_group: str):
    self.what = what
    self.package = package
    self.entry_point_group = entry_point_group
    self._values: dict[str, Any] = {}
    self._from_entry_points: list[str] | None = None  # None until the entry points are loaded
    self._missing: set[str] = set()  # names looked up that no module registers

  def register(self, name: str, value: Any = _UNSET) -> Any:
    """Registers `value` under `name` and returns it; without `value`, a decorator that does so.
    A name is registered once: a second registration is refused."""
    if value is _UNSET:
      return lambda decorated: self.register(name, decorated)
    if name in self._values:
      raise InputError(f"{self.what} {name!r} is registered twice")
    self._values[name] = value
    self._missing.discard(name)
    return value

  def lookup(self, name: str) -> Any | None:
    """The value registered under `name`, importing `<package>.<name>` and then the entry
    points' modules as needed; None when no module registers it."""
    found = self._values.get(name)
    if found is not None or name in self._missing:  # per row of a table: kept cheap
      return found
    if _MODULE_NAME.match(name) and _has_module(f"{self.package}.{name}"):
      importlib.import_module(f"{self.package}.{name}")
    if name not in self._values:
      self.load_entry_points()
    if name not in self._values:
      self._missing.add(name)
    return self._values.get(name)

  def registered(self, built_in: tuple[str, ...]) -> dict[str, Any]:
    """Every registered value by name: the modules `built_in` names, in that order (each must
    register its own name), then those the entry points registered, by name."""
    for name in built_in:
      if self.lookup(name) is None:
        raise ValueError(f"module {self.package}.{name} registers no {self.what} {name!r}")
    entries = self.load_entry_points()
    return {name: self._values[name] for name in (*built_in, *sorted(entries))
            if name in self._values}

  def load_entry_points(self) -> list[str]:
    """Imports the module each entry point of the group names (once); the names they hold."""
    if self._from_entry_points is None:
      names = []
      for entry in sorted(importlib.metadata.entry_points(group=self.entry_point_group),
                          key=lambda e: e.name):
        try:
          entry.load()
        except InputError as e:
          raise InputError(f"entry point {entry.name} = {entry.value} in group "
                           f"{self.entry_point_group}: {e}") from None
        names.append(entry.name)
      self._from_entry_points = names
    return self._from_entry_points

  def forget_entry_points(self) -> None:
    """Drops what modules outside the package registered (the entry points'), so the next lookup
    loads the entry points anew (for tests that install a package for a while)."""
    for name in [n for n in self._values if not _has_module(f"{self.package}.{n}")]:
      del self._values[name]
    self._from_entry_points = None
    self._missing.clear()


def _has_module(dotted: str) -> bool:
  try:
    return importlib.util.find_spec(dotted) is not None
  except ModuleNotFoundError:
    return False
