"""The value-bias ablation grid in one command: train every (base, data source, quantity, seed),
probe each run's checkpoints (agency vs communion), write one table, one plot and the test of the
base family's effect.

  python -m socialrm_jax.main.ablation --config=configs/value_bias_ablation.py:preset=tiny
  python -m socialrm_jax.main.ablation --config=configs/value_bias_ablation.py:preset=study,llama=PATH,gemma2=PATH \
      --config.sources.skywork_80k.spec=preference:PATH --config.sources.unified_feedback.spec=preference:PATH

The same command again skips what is done and resumes a run killed mid-training. What is run and
written: socialrm_jax/orchestrators/ablation.py; the statistics: socialrm_jax/analysis/ablation.py.
"""

from __future__ import annotations

import pathlib

from ml_collections import config_flags

from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import ablation
from socialrm_jax.scoring import distributed

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "The grid's config (configs/value_bias_ablation.py[:preset=tiny|study,...]).",
    lock_config=True)
_JOB = settings.define_flags(distributed.DistributedSettings)


def main(argv):
  del argv
  config = command.load_config(_CONFIG, "configs/value_bias_ablation.py")
  errors.check_output_folder(config.output_dir, "config.output_dir")
  distributed.initialize(_JOB.value)
  ablation.run(config)
  if not distributed.is_coordinator():  # process 0 wrote the grid and the table
    return
  out = pathlib.Path(config.output_dir)
  print((out / ablation.REPORT_FILE).read_text(encoding="utf-8"))
  print(f"Grid: {out / ablation.GRID_FILE}\nPlot: {out / ablation.FIGURE_FILE}")


def run():
  command.run_command("socialrm-ablation", main,
                      explain_flag_error=command.unknown_config_field)


if __name__ == "__main__":
  run()
