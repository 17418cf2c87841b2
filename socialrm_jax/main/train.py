"""Trains a Bradley-Terry reward model from a decoder base on preference data, in JAX.

  python -m socialrm_jax.main.train --model=BASE --data=preference:pairs.jsonl --output_dir=OUT \
      --max_steps=200 --batch_size=8 --learning_rate=1e-4 --seed=0 --checkpoint_every=50 \
      [--lora_rank=32 --lora_alpha=64] [--config=configs/FILE.py]

Every flag is a field of `training.config.TrainConfig` (declared once, with its help; the flags
derive from it through `base/settings.py`); a `--config` file (ml_collections, `get_config()`)
sets any of them by the flag's name, a key of no setting is refused, and a flag given on the
command line wins over the file. The same command again
resumes from the last checkpoint; with a larger --max_steps or --epochs it extends the run. A
second training into a folder a live one is writing is refused (exit 2); a run whose loss or
gradient norm goes NaN or infinite stops there, exports nothing and exits 3. What a run writes:
socialrm_jax/orchestrators/train.py.
"""

from __future__ import annotations

import dataclasses

from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import train
from socialrm_jax.runtime import distributed
from socialrm_jax.training import divergence

DIVERGED_EXIT_CODE = 3  # as socialrm-score's for a reward that is not finite


@dataclasses.dataclass(frozen=True)
class TrainCommandSettings:
  """socialrm-train's settings: the run's (`train.TrainConfig`) and the job's, each a flag and a key
  of the --config file by its name."""
  run: train.TrainConfig = settings.group(train.TrainConfig)
  job: distributed.DistributedSettings = settings.group(distributed.DistributedSettings)


def main(config: TrainCommandSettings) -> None:
  train.check(config.run)
  errors.check_output_folder(config.run.output_dir, "output_dir")
  distributed.initialize(config.job)
  output = train.run(config.run)
  print(f"Model: {output}/{train.MODEL_DIR}\nMetrics: {output}/{train.METRICS_FILE}")


COMMAND = command.Command(
    "socialrm-train", TrainCommandSettings, main,
    exit_codes={divergence.TrainingDivergedError: DIVERGED_EXIT_CODE})


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
