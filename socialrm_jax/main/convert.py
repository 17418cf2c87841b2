"""Converts social evaluation datasets into items and preference pairs (docs/spec.md sec. 3, 6).

  python -m socialrm_jax.main.convert --data_dir=DIR --datasets=all --output_dir=OUT [--format=jsonl]

`--datasets` takes the dataset spec `socialrm_jax.datasets.registry` describes; it may be repeated.
`--templates` the template selection `socialrm_jax.base.templates` describes (`--templates=all`: every
prompt template of every dataset, into the same tables).
"""

from __future__ import annotations

import dataclasses
import json
import time

from absl import logging

from socialrm_jax.base import errors, settings, tables
from socialrm_jax.datasets import registry
from socialrm_jax.main import command
from socialrm_jax.orchestrators import convert
from socialrm_jax.sources.reading import ON_ERROR


@dataclasses.dataclass(frozen=True)
class ConvertSettings:
  """socialrm-convert's settings (each a flag of the same name)."""
  data_dir: str | None = settings.field(None, "Folder with one sub-folder per dataset (needed "
                                        "when a folder dataset is named).")
  datasets: list[str] = settings.field(
      default_factory=lambda: ["all"], repeatable=True,
      help=f"'all', or a comma-separated list of: {', '.join(registry.folder_names())}; and path "
      "sources, <adapter>:PATH[:name=...,key=value,...] (preference:my.jsonl). Repeatable.")
  output_dir: str = settings.field(None, "Where items, pairs and the report go.", required=True)
  format: str = settings.field("parquet", "Output tables: items.parquet, items.jsonl, or hf: "
                               "items/ and pairs/ saved with datasets.Dataset.save_to_disk (pairs "
                               "in TRL's columns).", choices=tables.FORMATS)
  on_error: str = settings.field("raise", "'raise' stops at the first malformed row; 'skip' "
                                 "counts it.", choices=ON_ERROR)
  templates: list[str] = settings.field(
      default_factory=list, help="Prompt templates (default: each dataset's own default): 'all' "
      "for every template of every dataset, or DATASET=all, or DATASET=T1+T2 "
      "(bbq=default+instructed); several templates' items share the tables.")
  columns: str = settings.field(
      "", "Path sources' columns by role, as ROLE=COLUMN,... (preference: prompt, chosen, "
      "rejected, subset, domain, label, id; 'prompt=' for none). Default: by name.")


def main(config: ConvertSettings) -> None:
  errors.check_output_folder(config.output_dir, "output_dir")
  start = time.perf_counter()
  report = convert.convert_to(config.output_dir, config.data_dir, config.datasets,
                                  config.format, on_error=config.on_error,
                                  templates=config.templates,
                                  path_options={"columns": config.columns})
  seconds = time.perf_counter() - start
  logging.info("converted in %.1f s", seconds)
  print(json.dumps({"output_dir": config.output_dir, "seconds": round(seconds, 1),
                    **report["totals"]}, indent=2))


COMMAND = command.Command("socialrm-convert", ConvertSettings, main)


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
