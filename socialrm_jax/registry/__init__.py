"""The dataset registry: which dataset plug-ins exist, and the dataset specs that name sources.

It sits above every plug-in (it imports them, by name, the first time it is asked) and below the
orchestrators that read it and hand it down: the item tables (`orchestrators.convert`), the
metrics command and the audit pipeline (as `analysis.hooks.Options.plugins`). Analysis and
templates never import it.

A plug-in (`plugin.DatasetPlugin`) is a module's `PLUGIN`: its adapter, its metric hook, its
report rows, findings and figures. The built-in ones are the modules listed in `BUILT_IN`; others
join from installed packages that declare an entry point in the `socialrm_jax.datasets` group
whose object is a `DatasetPlugin`:

  [project.entry-points."socialrm_jax.datasets"]
  my_dataset = "my_package.my_dataset:PLUGIN"

A dataset spec (`--datasets`, `config.datasets`) is one value or a list of them, each a
comma-separated list of
- `all`: every folder dataset, in `BUILT_IN` order;
- a folder dataset's name: its files under `<data_dir>/<name>/`;
- `<plugin>:PATH[:key=value,...]`: a path dataset reading PATH, e.g.
  `preference:data/mine.jsonl:name=mine,domain=safety`. The `key=value` options after the last
  `:` may continue past commas (`...:name=mine,domain=safety,bbq` is the source then `bbq`).
  `name` names the source's items (default: PATH's stem); the plug-in lists its other options.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import pathlib
import re
from typing import Sequence

from socialrm_jax.analysis.hooks import Plugins
from socialrm_jax.datasets.plugin import FOLDER, PATH, DatasetPlugin
from socialrm_jax.base.errors import InputError

BUILT_IN = ("bbq", "crows_pairs", "stereoset", "hh_rlhf", "xstest", "ethics", "moral_stories",
            "preference")
ENTRY_POINT_GROUP = "socialrm_jax.datasets"
# Items of a dataset no plug-in is registered under (a path source's own name) are evaluated as
# this plug-in's: gold pairs of a preference label, accuracy per subset and label.
GENERIC = "preference"
ALL = "all"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


@functools.cache
def plugins() -> Plugins:
  """Every plug-in by name: the built-in ones in `BUILT_IN` order, then the entry points'. What
  the orchestrators read and hand down (conversion, the metrics runner's callers, the audit)."""
  found = {}
  for name in BUILT_IN:
    found[name] = importlib.import_module(f"socialrm_jax.datasets.{name}").PLUGIN
  for entry in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
                      key=lambda e: e.name):
    plugin = entry.load()
    if not isinstance(plugin, DatasetPlugin) or plugin.name != entry.name:
      raise InputError(f"entry point {entry.name} = {entry.value} in group {ENTRY_POINT_GROUP} "
                       "should be a DatasetPlugin of that name")
    if entry.name in found:
      raise InputError(f"entry point {entry.value} registers dataset {entry.name!r}, which "
                       "exists already")
    found[entry.name] = plugin
  return Plugins(found, GENERIC)


def folder_names() -> list[str]:
  return [name for name, plugin in plugins().items() if plugin.source == FOLDER]


def get(name: str) -> DatasetPlugin:
  known = plugins()
  if name not in known:
    raise InputError(f"unknown dataset {name!r}; known: {', '.join(folder_names())} (or "
                     f"'{ALL}', or a path source: "
                     f"{', '.join(n + ':PATH' for n, p in known.items() if p.source == PATH)})")
  return known[name]


def for_dataset(name: str) -> DatasetPlugin:
  """The plug-in that evaluates items whose `dataset` is `name`."""
  return plugins().for_dataset(name)


@dataclasses.dataclass(frozen=True)
class SourceSpec:
  """One source to convert: a folder dataset (`path` None: `<data_dir>/<name>/`) or a path."""
  plugin: DatasetPlugin
  name: str
  path: pathlib.Path | None = None
  options: dict[str, str] = dataclasses.field(default_factory=dict)


def _tokens(values: str | Sequence[str]) -> list[list[str]]:
  """Each spec as [head, option, option, ...]: comma-separated pieces, `key=value` pieces joined
  to the path spec before them."""
  specs: list[list[str]] = []
  for value in [values] if isinstance(values, str) else values:
    for piece in (p.strip() for p in value.split(",")):
      if not piece:
        continue
      if ":" not in piece and "=" in piece:
        if not specs or ":" not in specs[-1][0]:
          raise InputError(f"dataset option {piece!r} follows no <plugin>:PATH spec")
        specs[-1].append(piece)
      else:
        specs.append([piece])
  return specs


def _path_spec(head: str, extra: list[str]) -> SourceSpec:
  plugin_name, rest = head.split(":", 1)
  plugin = get(plugin_name)
  if plugin.source != PATH:
    raise InputError(f"dataset {plugin_name!r} reads <data_dir>/{plugin_name}/, not a path; "
                     f"name it alone (got {head!r})")
  path_text, options_text = rest, ""
  if ":" in rest and "=" in rest.rsplit(":", 1)[1]:
    path_text, options_text = rest.rsplit(":", 1)
  options = {}
  for option in [o for o in [options_text] if o] + extra:
    key, _, value = option.partition("=")
    if key not in ("name", *plugin.options) or not value:
      raise InputError(f"{plugin_name}: option {option!r} is not key=value with a key in "
                       f"{', '.join(('name',) + plugin.options)}")
    options[key] = value
  if not path_text:
    raise InputError(f"{head!r} names no path; write {plugin_name}:PATH")
  path = pathlib.Path(path_text)
  name = options.pop("name", path.name.split(".")[0] if path.suffix else path.name)
  if not _NAME.match(name):
    raise InputError(f"{path_text}: cannot name the source {name!r} (letters, digits, _ . -); "
                     f"add :name=...")
  if name in plugins() and name != plugin_name:
    raise InputError(f"{path_text}: the name {name!r} is a registered dataset's; add :name=...")
  return SourceSpec(plugin, name, path, options)


def parse_specs(values: str | Sequence[str]) -> list[SourceSpec]:
  """The sources a dataset spec names: folder datasets in `BUILT_IN` order, then path sources in
  the order given."""
  folders, paths = set(), []
  for head, *extra in _tokens(values):
    if ":" in head:
      paths.append(_path_spec(head, extra))
    elif head == ALL:
      folders.update(folder_names())
    else:
      if get(head).source != FOLDER:
        raise InputError(f"dataset {head!r} reads a path: write {head}:PATH")
      folders.add(head)
  names = [spec.name for spec in paths]
  repeated = sorted({n for n in names if names.count(n) > 1} | (folders & set(names)))
  if repeated:
    raise InputError(f"two sources are named {', '.join(map(repr, repeated))}; give each its "
                     "own :name=...")
  specs = [SourceSpec(plugins()[n], n) for n in folder_names() if n in folders] + paths
  if not specs:
    raise InputError(f"no dataset named; known: {', '.join(folder_names())} (or '{ALL}')")
  return specs
