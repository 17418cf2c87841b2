"""The validation of the intervals: how often the metrics' 95% intervals hold the value they
estimate, on the bundled suite's own items under synthetic reward models.

  JAX_PLATFORMS=cpu python -m socialrm_jax.main.interval_coverage [--replications=1000] \
      [--sizes=1,10,100] [--effects=0,0.05,0.15] [--resampling=before,after] [--seed=0] \
      [--datasets=bbq,xstest] [--output=FILE.json] [--tables_from=A.json,B.json]

Prints the coverage tables (markdown) and, with --output, writes the results as JSON; with
--tables_from it prints the tables of earlier --output files (their cells together) instead of
measuring. The models, the replications and what a cell counts:
socialrm_jax/orchestrators/interval_coverage.py; the figures: docs/interval_coverage.md.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from socialrm_jax.analysis.resampling import bootstrap
from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import interval_coverage

RESAMPLINGS = ("before", "after")


@dataclasses.dataclass(frozen=True)
class CoverageSettings:
  """The interval coverage validation's settings (each a flag of the same name)."""
  replications: int = settings.field(1000, "Replications per cell.")
  sizes: list[int] = settings.field(default_factory=lambda: [1, 10, 100],
                                    help="Copies of the bundled items.")
  effects: list[float] = settings.field(
      default_factory=lambda: [0.0, 0.05, 0.15],
      help="Planted effects: a gold pair is won with probability 1/2 + effect.")
  resampling: list[str] = settings.field(
      default_factory=lambda: list(RESAMPLINGS),
      help="before: every cell by items; after: bootstrap.design.")
  truth_copies: int = settings.field(0, "Copies of the items the true values are computed on "
                                     "(0: 1,000 times the largest size).")
  block: int = settings.field(50, "Replications drawn at once.")
  min_stratum_items: int = settings.field(
      bootstrap.MIN_STRATUM_ITEMS,
      "The smallest stratum of the 'after' resampling (the metrics' own by default).")
  seed: int = settings.field(0, "Seed of the rewards and the resamples.")
  datasets: list[str] = settings.field(
      default_factory=list, help="Only these datasets' items (a domain's metrics then rest on "
      "them alone): to measure some rows again, fewer minutes. All by default.")
  output: str = settings.field("", "Where the results go as JSON.")
  tables_from: list[str] = settings.field(
      default_factory=list, help="Print the tables of these --output files (their cells "
      "together) instead of measuring.")


def main(config: CoverageSettings) -> None:
  if config.tables_from:
    runs = []
    for path in config.tables_from:
      try:
        runs.append(json.loads(pathlib.Path(path).read_text(encoding="utf-8")))
      except (OSError, ValueError) as e:
        raise errors.InputError(f"--tables_from: {path}: not a results file ({e})") from e
    interval_coverage.print_table(interval_coverage.joined(runs))
    return
  for name in ("replications", "block"):
    errors.check_positive(getattr(config, name), name)
  if not config.sizes or min(config.sizes) < 1:
    raise errors.InputError(f"--sizes must be positive copy counts, got {config.sizes}")
  if not config.effects or not all(0 <= e < 0.5 for e in config.effects):
    raise errors.InputError(f"--effects must lie in [0, 1/2), got {config.effects}")
  unknown = sorted(set(config.resampling) - set(RESAMPLINGS))
  if unknown or not config.resampling:
    raise errors.InputError(f"--resampling: {', '.join(unknown) or 'none given'}: not one of "
                            f"{', '.join(RESAMPLINGS)}")
  if config.output:
    errors.check_output_folder(str(pathlib.Path(config.output).parent), "output")
  results = interval_coverage.run(
      sizes=config.sizes, effects=config.effects, resampling=config.resampling,
      replications=config.replications, truth_copies=config.truth_copies, block=config.block,
      min_stratum_items=config.min_stratum_items, seed=config.seed, datasets=config.datasets)
  interval_coverage.print_table(results)
  if config.output:
    pathlib.Path(config.output).write_text(json.dumps(results, indent=1), encoding="utf-8")


COMMAND = command.Command("socialrm_jax.main.interval_coverage", CoverageSettings, main)


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
