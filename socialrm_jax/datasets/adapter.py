"""A dataset adapter: what reads one dataset's source into items, and its prompt templates.

Each dataset module registers its adapter by decorating the function that reads a source
(`@registry.register("<name>", templates=TEMPLATES)`), and the registry (`datasets.registry`)
finds it by the dataset's name. What the later stages do with a dataset's items beyond the
generic work (its metric hook, report rows, findings and figures) is its analysis, registered
under the same name in `socialrm_jax.analysis.datasets`: input and analysis meet by name, and
neither imports the other.

Sources come in two kinds. A `FOLDER` dataset reads its original files under
`<data_dir>/<name>/` (`--datasets=bbq`). A `PATH` dataset reads a file or folder named in the
spec `<adapter>:PATH[:key=value,...]` (`--datasets=preference:my.jsonl:name=mine`); one adapter
then serves any number of sources, each under its own name.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

from socialrm_jax.base.records import Item
from socialrm_jax.base.templates import PromptTemplate
from socialrm_jax.sources.reading import SourceReader

FOLDER, PATH = "folder", "path"


@dataclasses.dataclass(frozen=True, eq=False)  # one object per adapter: compared by identity
class DatasetAdapter:
  name: str
  # Reads one source into items (see `reading.SourceReader` for the accounting it offers).
  convert: Callable[[SourceReader], Iterator[Item]]
  # Its prompt templates, `<name>.default` first, then at least one documented paraphrase
  # (`socialrm_jax.base.templates`; `--templates` picks others, or `all`).
  templates: tuple[PromptTemplate, ...] = ()
  source: str = FOLDER
  # Spec options a PATH source accepts besides `name` (e.g. `domain`).
  options: tuple[str, ...] = ()
  # False where item ids are unique by construction (row numbers): checking them would hold every
  # id in memory, which a 10M-row source should not need.
  check_ids: bool = True

  def __repr__(self) -> str:
    return f"DatasetAdapter({self.name!r}, source={self.source!r})"

  def __post_init__(self):
    if self.source not in (FOLDER, PATH):
      raise ValueError(f"adapter {self.name}: source must be {FOLDER!r} or {PATH!r}")
