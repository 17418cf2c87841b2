"""Prompt templates: named, versioned data (docs/spec.md sec. 3), and which of them a conversion
uses.

A template turns a source row into the user turn of an item's prompt. One template may have
variants (StereoSet's two task types, each ETHICS task, Moral Stories with and without the norm);
the adapter picks the variant, and every item records the template's name. Changing a template's
text means a new name or a new version: never edit a released one in place, or old item files
stop matching what the code would make.

Each dataset adapter declares its templates (`DatasetAdapter.templates`) beside its reader, and
every built-in dataset has at least two (`tests/base/test_templates.py` checks each registered
adapter): `<dataset>.default`, the prompt docs/spec.md sec. 3 gives, and a paraphrase that asks the
same thing in other words, so that a finding can be checked for surviving a change of wording. A
fair paraphrase keeps the task, every source field and the candidates' fit as answers, and adds no
instruction that favours one kind of candidate; each one's comment says what it reworded. Where the
default prompt is the user's own text (HH-RLHF, XSTest, preference data) there is nothing to reword,
and the second template frames that text with `REPLY_FRAMING` instead.

Which templates a conversion uses (`--templates`, `config.templates`, `parse_selection`): by
default each dataset's `<dataset>.default`; `all` converts every template of every dataset;
`DATASET=all` every template of one dataset; `DATASET=T1+T2` the ones listed, by full name
(`bbq.instructed`) or by the part after the dataset's name (`instructed`). Items of every chosen
template go into the same tables; those of a non-default template carry its name in their id
(`records.templated_item_id`), so default items keep their ids and the two never collide.
"""

from __future__ import annotations

import dataclasses
from typing import Collection, Iterable, Mapping, Sequence

from socialrm_jax.base.errors import InputError

# The variant family of each dataset's template in docs/spec.md: `<dataset>.default`.
DEFAULT = "default"
ALL = "all"
SEPARATOR = "+"  # between the templates of one dataset: `bbq=default+instructed`
FLAG = "--templates (config.templates)"  # where a selection comes from, for error messages

# The framing sentence of the second template where the default prompt is the user's own text. It
# says only what every chat turn already implies, that the user wants a reply; it asks for neither
# compliance nor caution (a refusal is a reply too), so each candidate answers the framed text as
# it answered the bare one.
REPLY_FRAMING = "Please reply to the following message.\n\n"


@dataclasses.dataclass(frozen=True)
class PromptTemplate:
  name: str  # "<dataset>.<variant family>", e.g. "bbq.default"
  version: int
  variants: dict[str, str]  # variant -> str.format text over source fields; "" for the only one

  def render(self, variant: str = "", **fields: str) -> str:
    try:
      text = self.variants[variant]
    except KeyError:
      raise KeyError(f"template {self.name} has no variant {variant!r}; "
                     f"it has {sorted(self.variants)}") from None
    return text.format(**fields)


def named(templates: Iterable[PromptTemplate], name: str) -> PromptTemplate:
  """The template called `name` among `templates` (a dataset adapter's)."""
  known = {t.name: t for t in templates}
  try:
    return known[name]
  except KeyError:
    raise KeyError(f"unknown template {name!r}; known: {', '.join(known)}") from None


def default_template(dataset: str) -> str:
  return f"{dataset}.{DEFAULT}"


def is_default(name: str) -> bool:
  return name.rsplit(".", 1)[-1] == DEFAULT


def by_dataset(dataset_templates: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
  """Each dataset's templates, from (dataset, template) of its items: its primary one first (its
  default when present, else the first to appear: what the main metrics and the counterfactual
  swaps use when a table holds several), then in order of appearance."""
  found: dict[str, dict[str, None]] = {}
  for dataset, template in dataset_templates:
    found.setdefault(dataset, {})[template] = None
  return {name: sorted(names, key=lambda t: not is_default(t)) for name, names in found.items()}


Selection = Mapping[str, str]  # dataset (or ALL: every dataset not named) -> "all" | "T1+T2"


def parse_selection(spec: str | Sequence[str] | Mapping[str, str] | None,
                    known_datasets: Collection[str]) -> dict[str, str]:
  """`--templates` as {dataset: choice}: a comma-separated string or a list of entries `all`,
  `DATASET=all`, `DATASET=T1+T2`, or a mapping {DATASET: choice} (an audit config's old form).
  Refuses malformed entries, a dataset named twice and datasets not in `known_datasets` (the
  registry's names), naming the entry."""
  if isinstance(spec, Mapping):
    entries = [f"{dataset}={choice}" for dataset, choice in spec.items()]
  else:
    entries = [piece.strip() for value in ([spec] if isinstance(spec, str) else spec or [])
               for piece in value.split(",")]
  selection: dict[str, str] = {}
  for entry in filter(None, entries):
    dataset, sep, choice = (ALL, "=", ALL) if entry == ALL else entry.partition("=")
    if not sep or not dataset or not choice:
      raise InputError(f"{FLAG}: {entry!r} is not '{ALL}', DATASET={ALL} or "
                       f"DATASET=TEMPLATE[{SEPARATOR}TEMPLATE...]")
    if dataset in selection:
      raise InputError(f"{FLAG}: {dataset!r} is given templates twice")
    if dataset != ALL and dataset not in known_datasets:
      raise InputError(f"{FLAG}: {entry!r} names no known dataset; known: "
                       f"{', '.join(known_datasets)}")
    selection[dataset] = choice
  return selection


def chosen(dataset: str, templates: Sequence[PromptTemplate], selection: Selection) -> list[str]:
  """The names of the templates `selection` picks for the sources of `dataset`, whose adapter
  declares `templates`, in conversion order: the default first under `all`, else as listed."""
  choice = selection.get(dataset, selection.get(ALL))
  if choice is None:
    return [default_template(dataset)]
  known = [t.name for t in templates]
  if choice == ALL:
    return sorted(known, key=lambda name: not is_default(name))
  names = [name if name in known else f"{dataset}.{name}" for name in choice.split(SEPARATOR)]
  unknown = [given for given, name in zip(choice.split(SEPARATOR), names) if name not in known]
  if unknown or len(set(names)) != len(names):
    problem = f"unknown template {unknown[0]!r}" if unknown else "a template is listed twice"
    raise InputError(f"{FLAG}: {dataset}={choice}: {problem}; {dataset} has "
                     f"{', '.join(known)} (or {ALL})")
  return names
