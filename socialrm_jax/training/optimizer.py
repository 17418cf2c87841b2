"""The optimizer as transformers' Trainer builds it for TRL's RewardTrainer, in optax: AdamW
with weight decay on every parameter but biases and norm scales, the learning rate warmed up
linearly from 0, then decayed linearly or by a cosine to 0 at the last step (or held), the
gradient clipped to a global norm, and accumulated over micro-batches (`optax.MultiSteps`)."""

from __future__ import annotations

import dataclasses

import optax

from socialrm_jax.base import settings
from socialrm_jax.base.errors import InputError

SCHEDULES = ("linear", "cosine", "constant")


def learning_rate_schedule(peak: float, total_steps: int, warmup_steps: int, kind: str):
  """The learning rate at each optimizer step (as transformers' `get_scheduler`)."""
  if kind not in SCHEDULES:
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {kind!r}")
  warmup_steps = min(warmup_steps, total_steps)
  decay_steps = max(total_steps - warmup_steps, 1)
  if kind == "linear":
    after = optax.linear_schedule(peak, 0.0, decay_steps)
  elif kind == "cosine":
    after = optax.cosine_decay_schedule(peak, decay_steps)
  else:
    after = optax.constant_schedule(peak)
  if not warmup_steps:
    return after
  return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup_steps), after],
                              [warmup_steps])


def decays(path: str) -> bool:
  """Whether weight decay applies: not to biases and norm scales (transformers'
  `get_decay_parameter_names` leaves out biases and LayerNorm weights)."""
  return not (path.endswith("bias") or "norm" in path.rsplit("/", 2)[0].rsplit("/", 1)[-1])


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """The optimizer's settings (transformers' TrainingArguments' names and defaults, TRL's
  RewardConfig's learning rate), each a flag of socialrm-train by its name (a `settings.group` of
  `training.config.TrainConfig`)."""
  learning_rate: float = settings.field(
      1e-4, "Peak learning rate (TRL's RewardConfig default).")
  lr_schedule: str = settings.field(
      "linear", "Decay after warmup: linear (to 0 at the last step), cosine, or constant.",
      choices=SCHEDULES)
  warmup_steps: int = settings.field(
      0, "Optimizer steps of linear warmup from 0.")
  weight_decay: float = settings.field(
      0.0, "AdamW's decoupled weight decay (not on biases and norm scales).")
  max_grad_norm: float = settings.field(
      1.0, "Global gradient norm clipped to (0: no clipping).")
  adam_beta1: float = settings.field(
      0.9, "AdamW's first-moment decay.")
  adam_beta2: float = settings.field(
      0.999, "AdamW's second-moment decay.")
  adam_epsilon: float = settings.field(
      1e-8, "AdamW's epsilon.")
  gradient_accumulation_steps: int = settings.field(
      1, "Micro-batches whose gradients one optimizer step sums (optax.MultiSteps).")

  def check(self) -> None:
    """Refuses settings no optimizer can take, one line naming the flag."""
    if self.gradient_accumulation_steps < 1:
      raise InputError("--gradient_accumulation_steps must be at least 1, got "
                       f"{self.gradient_accumulation_steps}")
    if self.warmup_steps < 0:
      raise InputError(f"--warmup_steps must be 0 or more, got {self.warmup_steps}")
    if self.learning_rate <= 0:
      raise InputError(f"--learning_rate must be positive, got {self.learning_rate}")
    if self.lr_schedule not in SCHEDULES:
      raise InputError(f"--lr_schedule must be one of {', '.join(SCHEDULES)}")

  def build(self, total_steps: int):
    """(optax transformation over flat {path: array} parameters, its learning-rate schedule) for
    a run of `total_steps` optimizer steps."""
    lr = learning_rate_schedule(self.learning_rate, total_steps, self.warmup_steps,
                                self.lr_schedule)
    chain = []
    if self.max_grad_norm > 0:
      chain.append(optax.clip_by_global_norm(self.max_grad_norm))
    chain.append(optax.adamw(lr, b1=self.adam_beta1, b2=self.adam_beta2, eps=self.adam_epsilon,
                             weight_decay=self.weight_decay,
                             mask=lambda params: {p: decays(p) for p in params}))
    tx = optax.chain(*chain)
    if self.gradient_accumulation_steps > 1:
      tx = optax.MultiSteps(tx, every_k_schedule=self.gradient_accumulation_steps)
    return tx, lr
