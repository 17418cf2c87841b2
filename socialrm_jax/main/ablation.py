"""The value-bias ablation grid in one command: train every (base, data source, quantity, seed),
probe each run's checkpoints (agency vs communion), write one table, one plot and the test of the
base family's effect.

  python -m socialrm_jax.main.ablation --config=configs/value_bias_ablation.py:preset=tiny
  python -m socialrm_jax.main.ablation --config=configs/value_bias_ablation.py:preset=study,llama=PATH,gemma2=PATH \
      --config.sources.skywork_80k.spec=preference:PATH --config.sources.unified_feedback.spec=preference:PATH

The settings are `orchestrators.ablation.AblationSettings`: `--output_dir`, `--data_dir` and
`--seeds` are flags (a flag wins over the file), the groups (`bases.<name>`, `sources.<name>`,
`train`: socialrm-train's settings by their flag names, `audit`) keys of the config file,
overridden as `--config.<group>.<field>=...`; a key of no setting is refused, naming it.

The same command again skips what is done and resumes a run killed mid-training. What is run and
written: socialrm_jax/orchestrators/ablation.py; the statistics: socialrm_jax/analysis/ablation.py.
"""

from __future__ import annotations

import dataclasses
import pathlib

from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import ablation
from socialrm_jax.runtime import distributed


@dataclasses.dataclass(frozen=True)
class AblationCommandSettings:
  """socialrm-ablation's settings: the grid's (`ablation.AblationSettings`) and the job's."""
  grid: ablation.AblationSettings = settings.group(ablation.AblationSettings)
  job: distributed.DistributedSettings = settings.group(distributed.DistributedSettings)


def main(command_settings: AblationCommandSettings) -> None:
  config = ablation.check_config(command_settings.grid)
  errors.check_output_folder(config.output_dir, "output_dir")
  distributed.initialize(command_settings.job)
  ablation.run(config)
  if not distributed.is_coordinator():  # process 0 wrote the grid and the table
    return
  out = pathlib.Path(config.output_dir)
  print((out / ablation.REPORT_FILE).read_text(encoding="utf-8"))
  print(f"Grid: {out / ablation.GRID_FILE}\nPlot: {out / ablation.FIGURE_FILE}")


COMMAND = command.Command(
    "socialrm-ablation", AblationCommandSettings, main,
    config_example="configs/value_bias_ablation.py")


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
