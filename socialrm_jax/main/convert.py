"""Converts social evaluation datasets into items and preference pairs (SPEC sec. 3, 6).

  python -m socialrm_jax.main.convert --data_dir=DIR --datasets=all --output_dir=OUT [--format=jsonl]

`--datasets` takes the dataset spec `socialrm_jax.datasets.registry` describes; it may be repeated.
`--templates` the template selection `socialrm_jax.base.templates` describes (`--templates=all`: every
prompt template of every dataset, into the same tables).
"""

from __future__ import annotations

import json
import time

from absl import flags, logging

from socialrm_jax.datasets import registry
from socialrm_jax.base import errors, tables
from socialrm_jax.orchestrators import item_tables
from socialrm_jax.sources.reading import ON_ERROR

_DATA_DIR = flags.DEFINE_string("data_dir", None, "Folder with one sub-folder per dataset "
                                "(needed when a folder dataset is named).")
_DATASETS = flags.DEFINE_multi_string(
    "datasets", ["all"], f"'all', or a comma-separated list of: {', '.join(registry.folder_names())}; "
    "and path sources, <adapter>:PATH[:name=...,key=value,...] (preference:my.jsonl). Repeatable.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where items, pairs and the report go.",
                                  required=True)
_FORMAT = flags.DEFINE_enum("format", "parquet", tables.FORMATS,
                            "Output tables: items.parquet, items.jsonl, or hf: items/ and pairs/ "
                            "saved with datasets.Dataset.save_to_disk (pairs in TRL's columns).")
_ON_ERROR = flags.DEFINE_enum("on_error", "raise", ON_ERROR,
                              "'raise' stops at the first malformed row; 'skip' counts it.")
_TEMPLATES = flags.DEFINE_list(
    "templates", [], "Prompt templates (default: each dataset's own default): 'all' for every "
    "template of every dataset, or DATASET=all, or DATASET=T1+T2 (bbq=default+instructed); "
    "several templates' items share the tables.")
_COLUMNS = flags.DEFINE_string(
    "columns", "", "Path sources' columns by role, as ROLE=COLUMN,... (preference: prompt, "
    "chosen, rejected, subset, domain, label, id; 'prompt=' for none). Default: by name.")


def main(argv):
  del argv
  errors.check_output_folder(_OUTPUT_DIR.value, "output_dir")
  start = time.perf_counter()
  report = item_tables.convert_to(_OUTPUT_DIR.value, _DATA_DIR.value, _DATASETS.value,
                                  _FORMAT.value, on_error=_ON_ERROR.value,
                                  templates=_TEMPLATES.value,
                                  path_options={"columns": _COLUMNS.value})
  seconds = time.perf_counter() - start
  logging.info("converted in %.1f s", seconds)
  print(json.dumps({"output_dir": _OUTPUT_DIR.value, "seconds": round(seconds, 1),
                    **report["totals"]}, indent=2))


def run():
  errors.run_command("socialrm-convert", main)


if __name__ == "__main__":
  run()
