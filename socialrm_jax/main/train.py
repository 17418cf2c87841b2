"""Trains a Bradley-Terry reward model from a decoder base on preference data, in JAX.

  python -m socialrm_jax.main.train --model=BASE --data=preference:pairs.jsonl --output_dir=OUT \
      --max_steps=200 --batch_size=8 --learning_rate=1e-4 --seed=0 --checkpoint_every=50 \
      [--lora_rank=32 --lora_alpha=64] [--config=configs/FILE.py]

Every flag is a field of `orchestrators.train.Settings` (declared once, with its help; the flags
derive from it through `base/settings.py`); a `--config` file (ml_collections, `get_config()`)
sets any of them, and a flag given on the command line wins over it. The same command again
resumes from the last checkpoint; with a larger --max_steps or --epochs it extends the run. A
second training into a folder a live one is writing is refused (exit 2); a run whose loss or
gradient norm goes NaN or infinite stops there, exports nothing and exits 3. What a run writes:
socialrm_jax/orchestrators/train.py.
"""

from __future__ import annotations

from absl import flags
from ml_collections import config_flags

from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import train
from socialrm_jax.scoring import distributed
from socialrm_jax.training import divergence

_SETTINGS = settings.define_flags(train.Settings)
_JOB = settings.define_flags(distributed.DistributedSettings)
DIVERGED_EXIT_CODE = 3  # as socialrm-score's for a reward that is not finite
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A config file (ml_collections, get_config()) setting any of the flags; "
    "flags given on the command line win.", lock_config=False)


def settings_from_flags() -> train.Settings:
  """Settings from the flags, where a `--config` file's keys fill the flags not given."""
  parsed = _SETTINGS.value
  config = _CONFIG.value
  if config is None:
    return parsed
  try:
    given = dict(config.to_dict() if hasattr(config, "to_dict") else config)
  except OSError as e:
    reason = str(e.__cause__ or e).strip().splitlines()[-1].strip()
    raise errors.InputError(f"--config: cannot load the config file: {reason}") from None
  names = settings.flag_names(train.Settings)
  unknown = sorted(set(given) - set(names))
  if unknown:
    raise errors.InputError(f"--config sets {', '.join(unknown)}, which are not settings of "
                            "socialrm-train (see --help)")
  from_file = settings.from_config(train.Settings, {k: v for k, v in given.items()
                                                     if not flags.FLAGS[k].present})
  return settings.from_config(train.Settings, {
      name: getattr(from_file if name in given and not flags.FLAGS[name].present else parsed,
                    name) for name in names})


def main(argv):
  del argv
  config = settings_from_flags()
  train.check(config)
  errors.check_output_folder(config.output_dir, "output_dir")
  distributed.initialize(_JOB.value)
  output = train.run(config)
  print(f"Model: {output}/{train.MODEL_DIR}\nMetrics: {output}/{train.METRICS_FILE}")


def run():
  command.run_command("socialrm-train", main,
                      exit_codes={divergence.TrainingDivergedError: DIVERGED_EXIT_CODE})


if __name__ == "__main__":
  run()
