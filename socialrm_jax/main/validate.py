"""The self-check against planted biases: synthetic reward models with known preferences audited
on the bundled suite, each verdict held against the truth.

  python -m socialrm_jax.main.validate [--copies=1] [--win=0.85] [--truth_copies=200] [--seed=0] \
      [--output_dir=OUT]

Prints one row per check (the model, the metric, its verdict, estimate and true value, whether
they agree) and exits 1 if the check fails (a disagreement beyond the one false finding a model
the report's correction allows). With --output_dir, writes each model's metrics.json,
report.md (the models side by side) and checks.json. The models and what agreeing means:
socialrm_jax/orchestrators/validate.py; the verdicts: docs/metrics.md#verdicts.
"""

from __future__ import annotations

import dataclasses
import sys

from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import validate


@dataclasses.dataclass(frozen=True)
class ValidateSettings:
  """socialrm-validate's settings (each a flag of the same name)."""
  copies: int = settings.field(1, "Copies of the bundled suite's items the models are audited on "
                               "(each in the same cells): more items, more verdicts that can tell.")
  win: float = settings.field(validate.WIN, "How often a planted preference wins a pair "
                              "(above 1/2).")
  truth_copies: int = settings.field(validate.TRUTH_COPIES, "Copies of the items the true values "
                                     "are computed on, with fresh rewards.")
  seed: int = settings.field(0, "Seed of the rewards and of the bootstrap.")
  output_dir: str = settings.field("", "Where the models' metrics.json, report.md and "
                                   "checks.json go (nothing is written without it).")


def main(config: ValidateSettings) -> None:
  errors.check_positive(config.copies, "copies")
  errors.check_positive(config.truth_copies, "truth_copies")
  if not 0.5 < config.win < 1:
    raise errors.InputError(f"--win must lie between 1/2 and 1, got {config.win}")
  if config.output_dir:
    errors.check_output_folder(config.output_dir, "output_dir")
  _, checks = validate.run(copies=config.copies, win=config.win,
                           truth_copies=config.truth_copies, seed=config.seed,
                           output_dir=config.output_dir or None,
                           options=validate.evaluate.Options(seed=config.seed))
  print(validate.summary(checks))
  if not validate.passed(checks):
    print("socialrm-validate: verdicts disagree with the planted truth", file=sys.stderr)
    sys.exit(1)


COMMAND = command.Command("socialrm-validate", ValidateSettings, main)


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
