"""What a training run reads (`TrainConfig`), declared once: each field is a flag of
`socialrm-train` (its name, its help) and a key of its `--config` file, `base/settings.py`
deriving both. Its parts are `settings.group`s, their fields flags and keys unprefixed (so
`--learning_rate` is `TrainConfig.optimizer.learning_rate`, `--lora_rank` is
`TrainConfig.lora.lora_rank`): the pairs and how they are cut (`PairsConfig`), the loop's length
and cadences (`LoopConfig`), the optimizer (`optimizer.OptimizerConfig`, which builds itself) and
LoRA (`LoraConfig`, which says its scale). `settings.flat(config)` / `to_json` give it by flag
name, as the run's manifest records it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from socialrm_jax.base import settings
from socialrm_jax.models import trunk
from socialrm_jax.scoring import engine
from socialrm_jax.training import pair_batches
from socialrm_jax.training.optimizer import OptimizerConfig
from socialrm_jax.training.trainable import DEFAULT_LORA_TARGETS


@dataclasses.dataclass(frozen=True)
class PairsConfig:
  """The preference pairs a run trains and evaluates on, and how long they may be."""
  data: tuple[str, ...] = settings.field(
      (), "The converter's dataset specs (`socialrm-convert --datasets`): folder datasets' gold "
      "pairs under `data_dir`, `preference:PATH[:...]`, saved HF datasets.", repeatable=True)
  data_dir: str | None = settings.field(
      None, "Where folder datasets named in `data` / `eval_data` are.")
  eval_data: tuple[str, ...] = settings.field(
      (), "Held-out pairs given apart; empty: a seeded `eval_fraction` of `data` is held out.",
      repeatable=True)
  eval_fraction: float = settings.field(
      0.05, "Share of `data` held out for evaluation when `eval_data` is empty (0: none).")
  # A pair's templated conversations (chosen and rejected), each; `truncation` says what becomes
  # of a pair with one over it.
  max_length: int = settings.field_of(engine.ScoringOptions, "max_length", default=1024)
  truncation: str = settings.field(
      "drop", "A pair whose chosen or rejected conversation is over --max_length: drop = left "
      "out, counted (TRL's RewardTrainer); left = its prompt cut from the left, the responses "
      "whole (OpenRLHF), counted (a pair whose responses alone are over is dropped, counted); "
      "error = the run refused, naming the first such pair.",
      choices=pair_batches.TRUNCATION_MODES)
  row_length: int = settings.field(
      512, "Tokens of a packed row: a step's pairs are packed several to a row this long (a longer "
      "pair gets a row of its own; rows are at most twice max_length), so few shapes compile.")
  tokens_per_block: int = settings.field(
      0, "Token slots of one call of the train step (a block; its gradients accumulate over the "
      "step's blocks) in rows of --row_length: its rows, a multiple of the mesh's data axis, at "
      "least one a device (a block of longer rows has as many rows). 0: one row a device on a "
      f"CPU, the scorer's default batch ({engine.DEFAULT_TOKENS_PER_BATCH} token slots) on "
      "accelerators.")


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """How long the loop runs, how many pairs a step takes, and when its hooks run."""
  max_steps: int = settings.field(
      0, "Optimizer steps; 0: `epochs` passes over the training pairs.")
  epochs: int = settings.field(
      1, "Passes over the training pairs when `max_steps` is 0.")
  batch_size: int = settings.field(
      8, "Pairs per micro-batch (a multiple of the mesh's data axis).")
  eval_every: int = settings.field(
      0, "Evaluate the held-out pairs every this many steps (0: at the end only).")
  log_every: int = settings.field(
      10, "Write a metrics row (the mean over the steps since the last) every this many steps.")
  checkpoint_every: int = settings.field(
      500, "Save a checkpoint every this many steps (and at the end; 0: at the end only).")
  checkpoint_steps: tuple[int, ...] = settings.field(
      (), "Further steps to save a checkpoint at (0: the initial weights), e.g. log-spaced ones "
      "for an audit of training (`export_checkpoint`).")
  keep_checkpoints: int = settings.field(
      0, "Checkpoints kept (the newest); 0: all.")


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """LoRA's adapters (PEFT's names: r, lora_alpha, target_modules); rank 0 trains in full."""
  lora_rank: int = settings.field(
      0, "LoRA rank; 0: full fine-tuning.")
  lora_alpha: float = settings.field(
      16.0, "LoRA's alpha: the update is (alpha / rank) A B.")
  lora_targets: tuple[str, ...] = settings.field(
      DEFAULT_LORA_TARGETS, "The projections LoRA adapts.")

  @property
  def enabled(self) -> bool:
    return self.lora_rank > 0

  @property
  def scale(self) -> float:
    """What the adapters' product is multiplied by (PEFT's `scaling`); 1 when none train."""
    return self.lora_alpha / self.lora_rank if self.enabled else 1.0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Everything a training run reads (socialrm-train's flags, the ablation grid's `train`, the
  fields of `socialrm-plan --train` that shape the step)."""
  model: str = settings.field(
      "", "The base: a causal-LM checkpoint folder (a score head is added) or a one-output reward "
      "model.")
  output_dir: str = settings.field(
      "", "Where metrics, checkpoints, the exported model and the manifest go.")
  pairs: PairsConfig = settings.group(PairsConfig)
  loop: LoopConfig = settings.group(LoopConfig)
  optimizer: OptimizerConfig = settings.group(OptimizerConfig)
  lora: LoraConfig = settings.group(LoraConfig)
  seed: int = settings.field(
      0, "Seed of the held-out split, the data order, the new score head and LoRA's A.")
  dtype: str = settings.field_of(engine.ScoringOptions, "dtype")
  center_rewards_coefficient: float | None = settings.field(
      None, "TRL's center_rewards_coefficient: adds coef * mean((r_c + r_r)^2); None: off.")
  report_to: tuple[str, ...] = settings.field(
      ("none",), "Where train_metrics.jsonl's rows go too, as TRL's report_to: tensorboard "
      "(event files under OUTPUT/logs/), wandb (when installed), all, or none.")
  run_name: str = settings.field(
      "", "The run's name in Weights & Biases (TRL's run_name; the ablation grid's run key).")
  mesh: str | None = settings.field_of(engine.ScoringOptions, "mesh")
  pad_token_id: int = settings.field(
      -1, "The exported config's pad_token_id; -1: the base's (else the tokenizer's pad, else "
      "eos).")
  # Default xla: the kernel whose gradients under the packed masks the tests check (auto picks
  # cuDNN on GPU in bfloat16, splash on TPU; their gradients are not checked here).
  attention: str = settings.field_of(engine.ScoringOptions, "attention", default="xla")
  remat_policy: str = settings.field(
      "auto", "What the layers' backward pass keeps, the rest recomputed (MaxText's remat_policy; "
      "models/trunk.py): auto, save_projections_and_attention, save_dots, full (nothing: least "
      "memory) or none (everything).", choices=trunk.REMAT_POLICY_NAMES)

  def to_json(self) -> dict[str, Any]:
    """The settings by flag name (the manifest's `settings`, which a resume compares)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in settings.flat(self).items()}
