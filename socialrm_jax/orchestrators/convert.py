"""The convert stage as a library: datasets -> items, pairs and a conversion report.

Generic rules live here, not in the adapters (docs/spec.md sec. 2): an item whose candidates are all
identical is dropped, a pair whose two texts are identical is dropped, and every drop is counted
with its reason in the report, per dataset and subset. A source whose every row was malformed
and skipped (`on_error="skip"`) is an error: it gave no item to audit.

A source is converted once per prompt template chosen for its dataset (`templates.chosen`;
`--templates=all` converts every one), all into the same tables: items of a non-default template
get ids that name it (`records.templated_item_id`), and the report counts each template apart.

Items flow from the adapters into a sink one at a time: `convert_all` collects them (what tests
and small suites want), `convert_to` writes them in batches as they come, so a source of millions
of rows never sits in memory whole. Outputs are written into a staged folder and moved into place
together at the end, so an error leaves the output folder as it was.
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from socialrm_jax.base import records, tables
from socialrm_jax.datasets import registry
from socialrm_jax.sources import fetch
from socialrm_jax.sources.reading import MALFORMED, SourceReader
from socialrm_jax.base.errors import InputError
from socialrm_jax.base import templates as prompt_templates

IDENTICAL_CANDIDATES = "identical_candidates"
IDENTICAL_PAIR_TEXTS = "identical_pair_texts"
REPORT_FILE = "conversion_report.json"


@dataclasses.dataclass
class Conversion:
  items: list[dict[str, Any]]
  pairs: list[dict[str, Any]]
  report: dict[str, Any]

  def add(self, item: dict[str, Any], pairs: Sequence[dict[str, Any]]) -> None:
    self.items.append(item)
    self.pairs.extend(pairs)


class Sink(Protocol):
  """Where converted rows go: a `Conversion`'s lists, or table writers."""

  def add(self, item: dict[str, Any], pairs: Sequence[dict[str, Any]]) -> None: ...


def _subset_report() -> dict[str, Any]:
  return {"rows_read": 0, "items": 0, "pairs": collections.Counter(),
          "drops": collections.Counter()}


def _finish(counts: dict[str, Any]) -> dict[str, Any]:
  return {"rows_read": counts["rows_read"], "items": counts["items"],
          "pairs": dict(sorted(counts["pairs"].items())),
          "drops": dict(sorted(counts["drops"].items()))}


def _sum(reports: list[dict[str, Any]]) -> dict[str, Any]:
  total = _subset_report()
  for r in reports:
    total["rows_read"] += r["rows_read"]
    total["items"] += r["items"]
    total["pairs"].update(r["pairs"])
    total["drops"].update(r["drops"])
  return _finish(total)


class _IdHashes:
  """The items' ids as hashes, 8 bytes an id (a set of a million ids would hold a hundred MB
  through the conversion); a repeated hash is checked against the ids themselves, read again."""

  _BLOCK = 1 << 16

  def __init__(self):
    self.blocks: list[np.ndarray] = []
    self.pending: list[int] = []

  def add(self, item_id: str) -> None:
    self.pending.append(hash(item_id))  # salted per process: used within this one
    if len(self.pending) == self._BLOCK:
      self.blocks.append(np.asarray(self.pending, np.int64))
      self.pending = []

  def repeated_id(self, read_ids: Callable[[], Iterable[str]]) -> str | None:
    """The first id (in order) that repeats an earlier one, None when all differ; `read_ids`
    reads the ids again, in the same order, only when two hashes are equal."""
    hashes = np.sort(np.concatenate([*self.blocks, np.asarray(self.pending, np.int64)]))
    same = hashes[1:][hashes[1:] == hashes[:-1]]
    if not same.size:
      return None
    suspects, seen = set(same.tolist()), set()
    for item_id in read_ids():
      if hash(item_id) in suspects:
        if item_id in seen:
          return item_id
        seen.add(item_id)
    return None  # two ids shared a hash, no id repeats


def convert_source(spec: registry.SourceSpec, data_dir: str | pathlib.Path | None = None, *,
                   on_error: str = "raise", template: str | None = None,
                   path_options: Mapping[str, str] | None = None,
                   sink: Sink | None = None) -> Conversion:
  """Converts one source, a folder dataset under `data_dir` or a path source, into `sink` (by
  default the returned `Conversion`'s lists); the returned report counts what went in.
  `path_options` go to a path source beside its spec's own (the command's `--columns`). `template`
  names the prompt template (default: the dataset's default); items of another get templated ids."""
  if spec.path is None:
    if data_dir is None:
      raise InputError(f"dataset {spec.name!r} reads <data_dir>/{spec.name}/: give --data_dir")
    source = pathlib.Path(data_dir) / spec.name
    if not source.is_dir():
      command = fetch.command_for(spec.name, data_dir)
      raise InputError(f"no folder for dataset {spec.name!r} (expected the original files under "
                       "it)" + (f"; `{command}` downloads them" if command else ""), source)
  else:
    source = spec.path
    if not source.exists():
      raise InputError(f"no such file or folder (the {spec.adapter.name} source "
                       f"{spec.name!r})", source)
  default = prompt_templates.default_template(spec.adapter.name)
  def new_reader() -> SourceReader:
    return SourceReader(spec.name, source,
                        prompt_templates.named(spec.adapter.templates, template or default),
                        on_error=on_error,
                        options={**(path_options or {}), **spec.options} if spec.path else {})

  def items(reader: SourceReader) -> Iterator[records.Item]:
    for item in spec.adapter.convert(reader):
      if reader.template.name != default:
        item.item_id = records.templated_item_id(item.item_id, reader.template.name)
      yield item
  reader = new_reader()
  subsets: dict[str, dict[str, Any]] = collections.defaultdict(_subset_report)
  conversion = Conversion([], [], {})
  sink = conversion if sink is None else sink
  id_hashes = _IdHashes()
  for item in items(reader):
    counts = subsets[item.subset]
    if spec.adapter.check_ids:
      id_hashes.add(item.item_id)
    if len(set(item.candidates)) == 1:
      counts["drops"][IDENTICAL_CANDIDATES] += 1
      continue
    counts["items"] += 1
    pairs = []
    for chosen, rejected, source_label in item.pairs:
      if item.candidates[chosen] == item.candidates[rejected]:
        counts["drops"][IDENTICAL_PAIR_TEXTS] += 1
        continue
      counts["pairs"][source_label] += 1
      pairs.append(records.pair_row(item, chosen, rejected, source_label))
    sink.add(item.row(), pairs)
  repeated = id_hashes.repeated_id(lambda: (item.item_id for item in items(new_reader())))
  if repeated is not None:
    raise InputError(f"two items get the id {repeated!r}: the source repeats a key",
                     reader.source)
  malformed = sum(n for (_, reason), n in reader.drops.items() if reason == MALFORMED)
  if malformed and not any(counts["items"] for counts in subsets.values()):
    # A skip that kept no row is a wrong file or column mapping, not a dataset to audit.
    first = reader.errors[0].removeprefix(f"{reader.source}, ")
    raise InputError(f"--on_error=skip skipped every row ({malformed} malformed; the first: "
                     f"{first}): nothing to convert", reader.source)
  for subset, n in reader.rows_read.items():
    subsets[subset]["rows_read"] += n
  for (subset, reason), n in reader.drops.items():
    subsets[subset]["drops"][reason] += n
  by_subset = {s: _finish(subsets[s]) for s in sorted(subsets)}
  report = {**_sum(list(by_subset.values())), "template": reader.template.name,
            "template_version": reader.template.version, "subsets": by_subset}
  if spec.path is not None:
    report["source"] = str(spec.path)
  report.update(reader.details)
  if reader.errors:
    report["skipped_row_errors"] = reader.errors
  conversion.report = report
  return conversion


def convert_dataset(name: str, data_dir: str | pathlib.Path, *, on_error: str = "raise",
                    template: str | None = None) -> Conversion:
  """Converts one folder dataset found under `data_dir`."""
  spec, = registry.parse_specs(name)
  return convert_source(spec, data_dir, on_error=on_error, template=template)


# What `--templates` / `config.templates` take: see `templates.parse_selection`.
TemplateSpec = str | Sequence[str] | Mapping[str, str] | None


def _convert_specs(data_dir: str | pathlib.Path | None, names: str | Sequence[str], sink: Sink, *,
                   on_error: str, templates: TemplateSpec,
                   path_options: Mapping[str, str] | None) -> dict[str, Any]:
  """Converts every source `names` names, with each template chosen for it, into `sink`; returns
  the conversion report. A source converted with several templates reports the sums over them
  (rows are read once per template) and each template's own report under `templates`."""
  if data_dir is not None and not pathlib.Path(data_dir).is_dir():
    raise InputError("no such data folder", data_dir)
  selection = prompt_templates.parse_selection(templates, registry.adapters())
  specs = registry.parse_specs(names)
  chosen = {spec.name: prompt_templates.chosen(spec.adapter.name, spec.adapter.templates, selection)
            for spec in specs}
  per_dataset = {}
  for spec in specs:
    reports = {template: convert_source(spec, data_dir, on_error=on_error, sink=sink,
                                        template=template, path_options=path_options).report
               for template in chosen[spec.name]}
    per_dataset[spec.name] = (next(iter(reports.values())) if len(reports) == 1 else
                              {**_sum(list(reports.values())), "templates": reports})
  return {"on_error": on_error, "totals": _sum(list(per_dataset.values())),
          "datasets": per_dataset}


def convert_all(data_dir: str | pathlib.Path | None, names: str | Sequence[str], *,
                on_error: str = "raise", templates: TemplateSpec = None,
                path_options: Mapping[str, str] | None = None) -> Conversion:
  """Converts every source a dataset spec names (see `socialrm_jax.datasets.registry`), in memory: folder
  datasets under `data_dir` (one folder each), path sources where their specs point."""
  conversion = Conversion([], [], {})
  conversion.report = _convert_specs(data_dir, names, conversion, on_error=on_error,
                                     templates=templates, path_options=path_options)
  return conversion


class _Writers:
  """A sink that writes items and pairs tables as rows arrive."""

  def __init__(self, items: tables.TableWriter, pairs: tables.TableWriter):
    self.items, self.pairs = items, pairs

  def add(self, item: dict[str, Any], pairs: Sequence[dict[str, Any]]) -> None:
    self.items.add([item])
    self.pairs.add(pairs)


def _write_outputs(output_dir: str | pathlib.Path, fmt: str,
                   fill: Callable[[_Writers], dict[str, Any]]) -> dict[str, Any]:
  """Writes the items and pairs tables `fill` puts into its sink, and the report it returns, into
  `output_dir` at once (see `tables.staged_folder`); tables of the other formats from an earlier
  run are removed, so readers never see two item sets. Returns the report."""
  names = {prefix: tables.table_name(prefix, fmt) for prefix in ("items", "pairs")}
  with tables.staged_folder(output_dir) as stage:
    with tables.TableWriter(stage / names["items"], fmt, records.ITEMS_SCHEMA) as items, \
        tables.TableWriter(stage / names["pairs"], fmt, records.PAIRS_SCHEMA,
                           hf_columns=records.pairs_to_trl) as pairs:
      report = {"format": fmt, **fill(_Writers(items, pairs))}
    tables.atomic_write_json(stage / REPORT_FILE, report)
  for other in tables.FORMATS:
    for prefix in names:
      if other != fmt:
        tables.remove(pathlib.Path(output_dir) / tables.table_name(prefix, other))
  return report


def convert_to(output_dir: str | pathlib.Path, data_dir: str | pathlib.Path | None,
               names: str | Sequence[str], fmt: str = "parquet", *, on_error: str = "raise",
               templates: TemplateSpec = None,
               path_options: Mapping[str, str] | None = None) -> dict[str, Any]:
  """`convert_all`, writing items and pairs in `fmt` as they come; returns the report."""
  return _write_outputs(output_dir, fmt, lambda sink: _convert_specs(
      data_dir, names, sink, on_error=on_error, templates=templates, path_options=path_options))


def write(conversion: Conversion, output_dir: str | pathlib.Path, fmt: str = "parquet") -> None:
  """Writes a conversion held in memory: `items`, `pairs` (in `fmt`) and the report."""
  def fill(writers: _Writers) -> dict[str, Any]:
    writers.items.add(conversion.items)
    writers.pairs.add(conversion.pairs)
    return conversion.report
  _write_outputs(output_dir, fmt, fill)
