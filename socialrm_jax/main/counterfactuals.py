"""Derives the counterfactual identity-swap set of a converted items table
(`socialrm_jax.sources.identity_swaps`).

  python -m socialrm_jax.main.counterfactuals --items=CONVERTED --output_dir=SWAPS [--format=jsonl]
"""

from __future__ import annotations

import json

from socialrm_jax.base import errors, tables
from socialrm_jax.sources import identity_swaps


def _define_flags():
  from absl import flags
  return {
      "items": flags.DEFINE_string("items", None, "A converted items table or its folder.",
                                   required=True),
      "output_dir": flags.DEFINE_string("output_dir", None, "Where the swap set goes.",
                                        required=True),
      "format": flags.DEFINE_enum("format", "parquet", tables.FORMATS, "Output tables' format."),
      "allow_empty": flags.DEFINE_bool("allow_empty", False, "Write the swap set even when no "
                                       "item has a counterfactual (default: an error)."),
  }


def run() -> None:
  """The command line: flags are defined here, not at import, so importing this module (as the
  audit does) adds no flags that could clash with another command's."""
  flag = _define_flags()

  def main(argv: list[str]) -> None:
    del argv
    report = identity_swaps.derive_to(flag["items"].value, flag["output_dir"].value,
                                      flag["format"].value,
                       allow_empty=flag["allow_empty"].value)
    summary = {k: report[k] for k in ("items_read", "records", "generated_items", "pairs")}
    print(json.dumps({"output_dir": flag["output_dir"].value, **summary}, indent=2))

  errors.run_command("socialrm-counterfactuals", main)


if __name__ == "__main__":
  run()
