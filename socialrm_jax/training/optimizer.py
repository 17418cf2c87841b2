"""The optimizer as transformers' Trainer builds it for TRL's RewardTrainer, in optax: AdamW
with weight decay on every parameter but biases and norm scales, the learning rate warmed up
linearly from 0, then decayed linearly or by a cosine to 0 at the last step (or held), the
gradient clipped to a global norm, and accumulated over micro-batches (`optax.MultiSteps`)."""

from __future__ import annotations

import optax

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


def make_optimizer(*, learning_rate: float, total_steps: int, warmup_steps: int, schedule: str,
                   weight_decay: float, max_grad_norm: float, adam_beta1: float,
                   adam_beta2: float, adam_epsilon: float, accumulation_steps: int):
  """(optax transformation over flat {path: array} parameters, its schedule)."""
  lr = learning_rate_schedule(learning_rate, total_steps, warmup_steps, schedule)
  chain = []
  if max_grad_norm > 0:
    chain.append(optax.clip_by_global_norm(max_grad_norm))
  chain.append(optax.adamw(lr, b1=adam_beta1, b2=adam_beta2, eps=adam_epsilon,
                           weight_decay=weight_decay,
                           mask=lambda params: {p: decays(p) for p in params}))
  tx = optax.chain(*chain)
  if accumulation_steps > 1:
    tx = optax.MultiSteps(tx, every_k_schedule=accumulation_steps)
  return tx, lr
