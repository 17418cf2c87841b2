"""The dataset registry: which dataset adapters exist, and the dataset specs that name sources.

Each dataset module registers its adapter under the dataset's name by decorating its converter:

  @registry.register("bbq", templates=TEMPLATES)
  def convert(reader: SourceReader) -> Iterator[records.Item]: ...

and a lookup by name imports `socialrm_jax.datasets.<name>` (`base.registry.Registry`). The
built-in datasets are the modules listed in `BUILT_IN`, in the order `all` converts them. Other
installed packages join through an entry point in the `socialrm_jax.datasets` group that names a
module; importing it registers its adapter under the entry point's name (and, if the dataset has
its own metrics, report rows or figures, its analysis with `socialrm_jax.analysis.datasets.
register` under the same name; without one its items are analysed as `GENERIC`'s):

  [project.entry-points."socialrm_jax.datasets"]
  my_dataset = "my_package.my_dataset"

A dataset spec (`--datasets`, `config.datasets`) is one value or a list of them, each a
comma-separated list of
- `all`: every folder dataset, in `BUILT_IN` order;
- a folder dataset's name: its files under `<data_dir>/<name>/`;
- `<adapter>:PATH[:key=value,...]`: a path dataset reading PATH, e.g.
  `preference:data/mine.jsonl:name=mine,domain=safety`. The `key=value` options after the last
  `:` may continue past commas (`...:name=mine,domain=safety,bbq` is the source then `bbq`).
  `name` names the source's items (default: PATH's stem); the adapter lists its other options.

This module imports no dataset module: the lookup does, by name.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from typing import Callable, Iterator, Sequence, TypeVar

from socialrm_jax.base.errors import InputError
from socialrm_jax.base.records import Item
from socialrm_jax.base.registry import Registry
from socialrm_jax.base.templates import PromptTemplate
from socialrm_jax.datasets.adapter import FOLDER, PATH, DatasetAdapter
from socialrm_jax.sources.reading import SourceReader

BUILT_IN = ("bbq", "crows_pairs", "stereoset", "hh_rlhf", "xstest", "ethics", "moral_stories",
            "preference")
ENTRY_POINT_GROUP = "socialrm_jax.datasets"
# Items of a dataset no analysis is registered for (a path source's own name) are analysed as
# this dataset's: gold pairs of a preference label, accuracy per subset and label.
GENERIC = "preference"
ALL = "all"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
ADAPTERS = Registry("dataset", "socialrm_jax.datasets", ENTRY_POINT_GROUP)

Converter = TypeVar("Converter", bound=Callable[[SourceReader], Iterator[Item]])


def register(name: str, *, templates: tuple[PromptTemplate, ...] = (), source: str = FOLDER,
             options: tuple[str, ...] = (), check_ids: bool = True
             ) -> Callable[[Converter], Converter]:
  """Decorator: the function reads a source of dataset `name` into items; the rest is the
  adapter's (`adapter.DatasetAdapter`). Returns the function as it is."""

  def add(convert: Converter) -> Converter:
    ADAPTERS.register(name, DatasetAdapter(name, convert, templates, source, options, check_ids))
    return convert

  return add


def adapters() -> dict[str, DatasetAdapter]:
  """Every adapter by name: the built-in ones in `BUILT_IN` order, then the entry points'."""
  found = ADAPTERS.registered(BUILT_IN)
  for name in ADAPTERS.load_entry_points():
    if name not in found:
      raise InputError(f"entry point {name} in group {ENTRY_POINT_GROUP} should name a module "
                       f"that registers dataset {name!r} (@socialrm_jax.datasets.registry."
                       f"register({name!r}))")
  return found


def folder_names() -> list[str]:
  return [name for name, adapter in adapters().items() if adapter.source == FOLDER]


def get(name: str) -> DatasetAdapter:
  found = ADAPTERS.lookup(name)
  if found is None:
    known = adapters()
    raise InputError(f"unknown dataset {name!r}; known: {', '.join(folder_names())} (or "
                     f"'{ALL}', or a path source: "
                     f"{', '.join(n + ':PATH' for n, a in known.items() if a.source == PATH)})")
  return found


@dataclasses.dataclass(frozen=True)
class SourceSpec:
  """One source to convert: a folder dataset (`path` None: `<data_dir>/<name>/`) or a path."""
  adapter: DatasetAdapter
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
          raise InputError(f"dataset option {piece!r} follows no <adapter>:PATH spec")
        specs[-1].append(piece)
      else:
        specs.append([piece])
  return specs


def _path_spec(head: str, extra: list[str]) -> SourceSpec:
  adapter_name, rest = head.split(":", 1)
  adapter = get(adapter_name)
  if adapter.source != PATH:
    raise InputError(f"dataset {adapter_name!r} reads <data_dir>/{adapter_name}/, not a path; "
                     f"name it alone (got {head!r})")
  path_text, options_text = rest, ""
  if ":" in rest and "=" in rest.rsplit(":", 1)[1]:
    path_text, options_text = rest.rsplit(":", 1)
  options = {}
  for option in [o for o in [options_text] if o] + extra:
    key, _, value = option.partition("=")
    if key not in ("name", *adapter.options) or not value:
      raise InputError(f"{adapter_name}: option {option!r} is not key=value with a key in "
                       f"{', '.join(('name',) + adapter.options)}")
    options[key] = value
  if not path_text:
    raise InputError(f"{head!r} names no path; write {adapter_name}:PATH")
  path = pathlib.Path(path_text)
  name = options.pop("name", path.name.split(".")[0] if path.suffix else path.name)
  if not _NAME.match(name):
    raise InputError(f"{path_text}: cannot name the source {name!r} (letters, digits, _ . -); "
                     f"add :name=...")
  if name in adapters() and name != adapter_name:
    raise InputError(f"{path_text}: the name {name!r} is a registered dataset's; add :name=...")
  return SourceSpec(adapter, name, path, options)


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
  specs = [SourceSpec(adapters()[n], n) for n in folder_names() if n in folders] + paths
  if not specs:
    raise InputError(f"no dataset named; known: {', '.join(folder_names())} (or '{ALL}')")
  return specs
