"""socialrm-train's stage: the converter's pairs in, the training loop (`training/trainer.py`) run
with its hooks (`training/loop_hooks.py`), the model exported (`run(TrainConfig(...))` -> OUT;
`export_checkpoint`). Its settings are `training.config.TrainConfig`'s, each field a flag and a
config key. What a run writes, resumes, extends and refuses: docs/training.md; its setup:
`training/training_run.py`."""

from __future__ import annotations

import pathlib
from typing import Sequence

from socialrm_jax.base.errors import InputError
from socialrm_jax.base.writer_lock import WriterLock
from socialrm_jax.orchestrators import convert
from socialrm_jax.runtime import distributed
from socialrm_jax.training import loop_hooks, pair_batches, trainer, training_run
from socialrm_jax.training.config import TrainConfig
from socialrm_jax.training.training_run import (  # pylint: disable=unused-import
    LOCK_FILE, MANIFEST_FILE, METRICS_FILE, MODEL_DIR, SPLIT_FILE, check, export_checkpoint,
    total_steps, training_mesh)


def run(config: TrainConfig) -> str:
  """Trains (or resumes, or extends) the run `config` describes; returns its output folder. One
  run writes a folder at a time: a second, while the first lives, is refused naming it."""
  check(config)
  out = pathlib.Path(config.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  if not distributed.is_coordinator():  # the job's lock is its coordinator's
    return _train(config, out)
  with WriterLock(out, LOCK_FILE, "training run"):
    return _train(config, out)


def load_pairs(specs: Sequence[str], data_dir: str | None, flag: str) -> list[pair_batches.Pair]:
  """The gold pairs of the converter's dataset `specs` (`--flag`'s)."""
  try:
    conversion = convert.convert_all(data_dir, list(specs))
  except InputError as e:
    raise InputError(f"--{flag}: {e}") from None
  pairs = pair_batches.gold_pairs(conversion.items, conversion.pairs)
  if not pairs:
    raise InputError(f"--{flag}: the data gave no preference pair")
  return pairs


def _train(config: TrainConfig, out: pathlib.Path) -> str:
  training = training_run.TrainingRun(config, out, training_mesh(config), load_pairs)
  setup, log, loop_config = training.setup, training.metrics_log(), config.loop
  loop = trainer.Trainer(setup.step_fn, setup.frozen, training.micro_batch,
                         total_steps=training.total_steps, accumulation=training.accumulation)
  loop.add_hook(loop_hooks.LogMetrics(log, setup.schedule, training.per_epoch,
                                      training.accumulation),
                every=loop_config.log_every, at_end=True)
  evaluate = loop_hooks.Evaluate(log, setup.step_fn, setup.frozen, training.eval_pairs,
                                 training.layout)
  loop.add_hook(evaluate, every=loop_config.eval_every)
  loop.add_hook(training.saver, every=loop_config.checkpoint_every,
                steps=loop_config.checkpoint_steps, at_end=True)
  training.finish(loop.run(training.state), evaluate.final)
  return str(out)
