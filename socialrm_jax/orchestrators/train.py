"""socialrm-train's stage: the converter's pairs in, the training loop (`training/trainer.py`) run
with its hooks, the model exported (`run(Settings(...))` -> OUT; `export_checkpoint`). What a run
writes, resumes, extends and refuses: docs/training.md; its setup: `training/training_run.py`."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Sequence

from socialrm_jax.base import settings as settings_lib
from socialrm_jax.base.errors import InputError
from socialrm_jax.base.writer_lock import WriterLock
from socialrm_jax.orchestrators import convert
from socialrm_jax.runtime import distributed
from socialrm_jax.scoring import engine
from socialrm_jax.training import hooks, optimizer, pair_batches, trainer, training_run
from socialrm_jax.training.trainable import DEFAULT_LORA_TARGETS
from socialrm_jax.training.training_run import (  # pylint: disable=unused-import
    LOCK_FILE, MANIFEST_FILE, METRICS_FILE, MODEL_DIR, SPLIT_FILE, check, export_checkpoint,
    training_mesh)


@dataclasses.dataclass(frozen=True)
class Settings:
  """Everything a training run reads; each field is a flag of `socialrm-train` (its name, its
  help) and a key of its `--config` file (base/settings.py derives both)."""
  model: str = settings_lib.field(
      "", "The base: a causal-LM checkpoint folder (a score head is added) or a one-output reward "
      "model.")
  data: tuple[str, ...] = settings_lib.field(
      (), "The converter's dataset specs (`socialrm-convert --datasets`): folder datasets' gold "
      "pairs under `data_dir`, `preference:PATH[:...]`, saved HF datasets.", repeatable=True)
  data_dir: str | None = settings_lib.field(
      None, "Where folder datasets named in `data` / `eval_data` are.")
  eval_data: tuple[str, ...] = settings_lib.field(
      (), "Held-out pairs given apart; empty: a seeded `eval_fraction` of `data` is held out.",
      repeatable=True)
  eval_fraction: float = settings_lib.field(
      0.05, "Share of `data` held out for evaluation when `eval_data` is empty (0: none).")
  output_dir: str = settings_lib.field(
      "", "Where metrics, checkpoints, the exported model and the manifest go.")
  max_steps: int = settings_lib.field(
      0, "Optimizer steps; 0: `epochs` passes over the training pairs.")
  epochs: int = settings_lib.field(
      1, "Passes over the training pairs when `max_steps` is 0.")
  batch_size: int = settings_lib.field(
      8, "Pairs per micro-batch (a multiple of the mesh's data axis).")
  gradient_accumulation_steps: int = settings_lib.field(
      1, "Micro-batches whose gradients one optimizer step sums (optax.MultiSteps).")
  learning_rate: float = settings_lib.field(
      1e-4, "Peak learning rate (TRL's RewardConfig default).")
  lr_schedule: str = settings_lib.field(
      "linear", "Decay after warmup: linear (to 0 at the last step), cosine, or constant.",
      choices=optimizer.SCHEDULES)
  warmup_steps: int = settings_lib.field(
      0, "Optimizer steps of linear warmup from 0.")
  weight_decay: float = settings_lib.field(
      0.0, "AdamW's decoupled weight decay (not on biases and norm scales).")
  max_grad_norm: float = settings_lib.field(
      1.0, "Global gradient norm clipped to (0: no clipping).")
  adam_beta1: float = settings_lib.field(
      0.9, "AdamW's first-moment decay.")
  adam_beta2: float = settings_lib.field(
      0.999, "AdamW's second-moment decay.")
  adam_epsilon: float = settings_lib.field(
      1e-8, "AdamW's epsilon.")
  seed: int = settings_lib.field(
      0, "Seed of the held-out split, the data order, the new score head and LoRA's A.")
  # A pair's templated conversation; beyond it prompt tokens are dropped from the left.
  max_length: int = settings_lib.field_of(engine.ScoringOptions, "max_length", default=1024)
  row_length: int = settings_lib.field(
      512, "Tokens of a packed row: a step's pairs are packed several to a row this long (a longer "
      "pair gets a row of its own; rows are at most twice max_length), so few shapes compile.")
  dtype: str = settings_lib.field_of(engine.ScoringOptions, "dtype")
  lora_rank: int = settings_lib.field(
      0, "LoRA rank; 0: full fine-tuning.")
  lora_alpha: float = settings_lib.field(
      16.0, "LoRA's alpha: the update is (alpha / rank) A B.")
  lora_targets: tuple[str, ...] = settings_lib.field(
      DEFAULT_LORA_TARGETS, "The projections LoRA adapts.")
  center_rewards_coefficient: float | None = settings_lib.field(
      None, "TRL's center_rewards_coefficient: adds coef * mean((r_c + r_r)^2); None: off.")
  eval_every: int = settings_lib.field(
      0, "Evaluate the held-out pairs every this many steps (0: at the end only).")
  report_to: tuple[str, ...] = settings_lib.field(
      ("none",), "Where train_metrics.jsonl's rows go too, as TRL's report_to: tensorboard "
      "(event files under OUTPUT/logs/), wandb (when installed), all, or none.")
  run_name: str = settings_lib.field(
      "", "The run's name in Weights & Biases (TRL's run_name; the ablation grid's run key).")
  log_every: int = settings_lib.field(
      10, "Write a metrics row (the mean over the steps since the last) every this many steps.")
  checkpoint_every: int = settings_lib.field(
      500, "Save a checkpoint every this many steps (and at the end; 0: at the end only).")
  checkpoint_steps: tuple[int, ...] = settings_lib.field(
      (), "Further steps to save a checkpoint at (0: the initial weights), e.g. log-spaced ones "
      "for an audit of training (`export_checkpoint`).")
  keep_checkpoints: int = settings_lib.field(
      0, "Checkpoints kept (the newest); 0: all.")
  mesh: str | None = settings_lib.field_of(engine.ScoringOptions, "mesh")
  pad_token_id: int = settings_lib.field(
      -1, "The exported config's pad_token_id; -1: the base's (else the tokenizer's pad, else "
      "eos).")
  # Default xla: the kernel whose gradients under the packed masks the tests check (auto picks
  # cuDNN on GPU in bfloat16, splash on TPU; their gradients are not checked here).
  attention: str = settings_lib.field_of(engine.ScoringOptions, "attention", default="xla")

  def to_json(self) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def run(settings: Settings) -> str:
  """Trains (or resumes, or extends) the run `settings` describe; returns its output folder. One
  run writes a folder at a time: a second, while the first lives, is refused naming it."""
  check(settings)
  out = pathlib.Path(settings.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  if not distributed.is_coordinator():  # the job's lock is its coordinator's
    return _train(settings, out)
  with WriterLock(out, LOCK_FILE, "training run"):
    return _train(settings, out)


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


def _train(settings: Settings, out: pathlib.Path) -> str:
  training = training_run.TrainingRun(settings, out, training_mesh(settings), load_pairs)
  setup, log = training.setup, training.metrics_log()
  loop = trainer.Trainer(setup.step_fn, setup.frozen, training.micro_batch,
                         total_steps=training.total_steps, accumulation=training.accumulation)
  loop.add_hook(hooks.LogMetrics(log, setup.schedule, training.per_epoch, training.accumulation),
                every=settings.log_every, at_end=True)
  evaluate = hooks.Evaluate(log, setup.step_fn, setup.frozen, training.eval_pairs, training.layout)
  loop.add_hook(evaluate, every=settings.eval_every)
  loop.add_hook(training.saver, every=settings.checkpoint_every, steps=settings.checkpoint_steps,
                at_end=True)
  training.finish(loop.run(training.state), evaluate.final)
  return str(out)
