"""Derives the counterfactual identity-swap set of a converted items table
(`socialrm_jax.sources.identity_swaps`).

  python -m socialrm_jax.main.counterfactuals --items=CONVERTED --output_dir=SWAPS [--format=jsonl]
"""

from __future__ import annotations

import dataclasses
import json

from socialrm_jax.base import settings, tables
from socialrm_jax.main import command
from socialrm_jax.sources import identity_swaps


@dataclasses.dataclass(frozen=True)
class CounterfactualsSettings:
  """socialrm-counterfactuals' settings (each a flag of the same name)."""
  items: str = settings.field(None, "A converted items table or its folder.", required=True)
  output_dir: str = settings.field(None, "Where the swap set goes.", required=True)
  format: str = settings.field("parquet", "Output tables' format.", choices=tables.FORMATS)
  allow_empty: bool = settings.field(False, "Write the swap set even when no item has a "
                                     "counterfactual (default: an error).")


def main(config: CounterfactualsSettings) -> None:
  report = identity_swaps.derive_to(config.items, config.output_dir, config.format,
                                    allow_empty=config.allow_empty)
  summary = {k: report[k] for k in ("items_read", "records", "generated_items", "pairs")}
  print(json.dumps({"output_dir": config.output_dir, **summary}, indent=2))


COMMAND = command.Command("socialrm-counterfactuals", CounterfactualsSettings, main)


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
