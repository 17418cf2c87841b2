"""report.html: the report as one self-contained page (styles, script and figures inline; nothing
fetched), written beside report.md from the same data.

The page holds report.md's sections, in its order, rendered from its markdown (markdown-it), with
what a browser adds: every table sorts by a click on a column's header; a filter bar shows only
one dataset, domain or model (rows and blocks of other datasets and domains are hidden, and the
columns of other models); each worst pair is folded (`<details>`) and opens to its prompt and
both responses; the figures are inline PNGs. A headline table comes first: each model's domain
accuracies (and each dataset's RewardBench 2 score, where there is one) with their intervals,
every cell carrying its metrics.json path and full value (`data-path`, `data-value`), which the
browser test checks against metrics.json.

What a table row or block is about is read from the report's own structure, against the names in
the metrics (never guessed from free text): a `### <dataset>` heading tags what follows it with
the dataset and its domain, `### <model>: <dataset>` (worst pairs) with the model too; a row whose
first cell is a domain, `domain <d>: ...` or `<dataset>: ...` gets that domain or dataset; a
column whose header is a model's name, or starts with `<model>:` or `<model> `, gets the model.

The page reads its filters from the URL's fragment too (`#dataset=bbq&model=m&open=all`), so a
filtered view can be linked, and a headless browser can be shown one (`--dump-dom`,
`--screenshot`).
"""

from __future__ import annotations

import base64
import os
import pathlib
import re
from typing import Any, Mapping, Sequence

import jinja2
from markdown_it import MarkdownIt

from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.tables import evidence
from socialrm_jax.analysis.dataset_analysis import Models
from socialrm_jax.base.tables import atomic_write_bytes

TEMPLATES = pathlib.Path(__file__).resolve().parent / "templates"
HEADING = re.compile(r"^(#{2,3}) (.*)$")


def _environment() -> jinja2.Environment:
  return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                            autoescape=jinja2.select_autoescape(["html", "j2"]),
                            undefined=jinja2.StrictUndefined, trim_blocks=True,
                            lstrip_blocks=True)


class Names:
  """The datasets, domains and models of a report, to tag its parts with."""

  def __init__(self, models: Models):
    self.models = list(models)
    self.domain_of: dict[str, str] = {}
    for metrics in models.values():
      for domain, node in (metrics.get("domains") or {}).items():
        for dataset in node.get("datasets", []):
          self.domain_of.setdefault(dataset, domain)
      for dataset in metrics.get("datasets") or {}:
        self.domain_of.setdefault(dataset, "")
    self.datasets = list(self.domain_of)
    self.domains = list(dict.fromkeys(d for m in models.values() for d in m.get("domains") or {}))

  def heading_tags(self, text: str) -> dict[str, str]:
    """A `###` heading's tags: `<dataset>` or `<model>: <dataset>`."""
    model, sep, rest = text.partition(": ")
    if sep and model in self.models and rest in self.domain_of:
      return {"model": model, **self.dataset_tags(rest)}
    return self.dataset_tags(text) if text in self.domain_of else {}

  def dataset_tags(self, dataset: str) -> dict[str, str]:
    return {"dataset": dataset, "domain": self.domain_of[dataset]}

  def row_tags(self, first_cell: str) -> dict[str, str]:
    """A table row's tags from its first cell."""
    text = first_cell.strip()
    if text in self.domains:
      return {"domain": text}
    if text.startswith("domain "):
      domain = text[len("domain "):].split(":")[0]
      if domain in self.domains:
        return {"domain": domain}
    head = text.split(":")[0]
    return self.dataset_tags(head) if head in self.domain_of else {}

  def column_model(self, header: str) -> str | None:
    text = header.strip()
    return next((m for m in self.models if text == m or text.startswith((f"{m}:", f"{m} "))),
                None)


def _inline_text(tokens: list, start: int) -> str:
  """The text of the inline token after tokens[start] (a cell's or heading's opening)."""
  inline = tokens[start + 1]
  return inline.content if inline.type == "inline" else ""


def _figure_uri(path: pathlib.Path) -> str | None:
  if not path.is_file():
    return None
  return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _tag_tokens(tokens: list, names: Names, figures_dir: pathlib.Path) -> None:
  """Sets the data attributes (and inline figures) on markdown-it's tokens in place."""
  column_models: list[str | None] = []
  cell = 0
  for i, token in enumerate(tokens):
    if token.type == "table_open":
      token.attrSet("class", "sortable")
      column_models = []
    elif token.type == "th_open":
      column_models.append(names.column_model(_inline_text(tokens, i)))
      if column_models[-1]:
        token.attrSet("data-model", column_models[-1])
    elif token.type == "tr_open":
      cell = 0
      if tokens[i + 1].type == "td_open":
        for key, value in names.row_tags(_inline_text(tokens, i + 1)).items():
          token.attrSet(f"data-{key}", value)
    elif token.type == "td_open":
      if cell < len(column_models) and column_models[cell]:
        token.attrSet("data-model", column_models[cell])
      cell += 1
    elif token.type == "inline":
      for child in token.children or ():
        if child.type == "image":
          uri = _figure_uri(figures_dir / child.attrGet("src"))
          if uri:
            child.attrSet("src", uri)


def _blocks(markdown: str, names: Names, figures_dir: pathlib.Path) -> list[dict[str, Any]]:
  """report.md as sections ({title, parts}); each part ({tags, title, html}) is the text under a
  `###` heading (or before the first), rendered with its tags."""
  # Raw HTML in the markdown stays text: subset names, labels and ids come from users' files.
  parser = MarkdownIt("commonmark", {"html": False}).enable("table")
  sections: list[dict[str, Any]] = []
  lines: list[str] = []

  def flush():
    if not sections:
      return
    text = "\n".join(lines).strip()
    if text:
      tokens = parser.parse(text)
      _tag_tokens(tokens, names, figures_dir)
      sections[-1]["parts"][-1]["html"] = parser.renderer.render(tokens, parser.options, {})
    lines.clear()

  for line in markdown.splitlines():
    match = HEADING.match(line)
    if match:
      flush()
      title = match.group(2)
      if len(match.group(1)) == 2:
        sections.append({"title": title, "parts": [{"title": None, "tags": {}, "html": ""}]})
      else:
        sections[-1]["parts"].append({"title": title, "tags": names.heading_tags(title),
                                      "html": ""})
    elif sections:
      lines.append(line)
  flush()
  return sections


def _headline(models: Models, names: Names) -> dict[str, Any]:
  """The first table: per domain (accuracy) and per dataset with a RewardBench 2 score, one cell
  per model with its metrics.json path and value."""
  rows = []
  for domain in names.domains:
    rows.append({"label": f"{domain}: accuracy", "tags": {"domain": domain}, "cells": [
        _cell(m.get("domains", {}).get(domain), f"domains.{domain}", "accuracy")
        for m in models.values()]})
  for dataset in names.datasets:
    nodes = [m.get("datasets", {}).get(dataset) for m in models.values()]
    if any(n and n.get("rewardbench2_score") is not None for n in nodes):
      rows.append({"label": f"{dataset}: rewardbench2_score",
                   "tags": names.dataset_tags(dataset),
                   "cells": [_cell(n, f"datasets.{dataset}", "rewardbench2_score")
                             for n in nodes]})
  return {"models": names.models, "rows": rows}


def _cell(node: Mapping[str, Any] | None, path: str, name: str) -> dict[str, Any]:
  value = (node or {}).get(name)
  return {"path": f"{path}.{name}", "value": "" if value is None else repr(float(value)),
          "text": report.cell(node, name), "verdict": report.verdict(node)
          if name == "accuracy" else ""}


def _worst_pairs(models: Models, names: Names) -> list[dict[str, Any]]:
  """Every model's worst pairs per dataset, as the template folds them."""
  groups = []
  for model, metrics in models.items():
    for dataset, node in (metrics.get("datasets") or {}).items():
      pairs = (node or {}).get("worst_pairs") or []
      if pairs:
        groups.append({"model": model, "dataset": dataset, "pairs": pairs,
                       "tags": {"model": model, **names.dataset_tags(dataset)}})
  return groups


def render(models: Models, figures_dir: str | os.PathLike,
           figures: Mapping[str, str | None] | None = None,
           sections: Sequence[Sequence[str]] = ()) -> str:
  """The page, from what `report.render` is given (the figures read from `figures_dir`)."""
  names = Names(models)
  markdown = report.render(models, figures, sections)
  title = markdown.splitlines()[0].lstrip("# ")  # report.md's one `#` heading
  return _environment().get_template("report.html.j2").render(
      title=title, headline=_headline(models, names),
      sections=_blocks(markdown, names, pathlib.Path(figures_dir)),
      worst_title=evidence.SECTION_TITLE,
      worst_pairs=_worst_pairs(models, names), names=names)


def write(models: Models, path: str | os.PathLike,
          figures: Mapping[str, str | None] | None = None,
          sections: Sequence[Sequence[str]] = ()) -> None:
  path = pathlib.Path(path)
  atomic_write_bytes(path, render(models, path.parent, figures, sections).encode())
