"""The Bradley-Terry pairwise loss as TRL's RewardTrainer computes it, and its metrics.

  loss = mean over pairs of -log sigmoid(r_chosen - r_rejected - margin)
         + center_rewards_coefficient * mean((r_chosen + r_rejected) ** 2)

(trl/trainer/reward_trainer.py, `RewardTrainer.compute_loss`: the margin term only where the data
has a `margin` column, which is 0 elsewhere here; the centering term of Eisenstein et al. 2023.)
Padding rows carry weight 0 and count in no mean.

Metric names are TRL's: `accuracy` (chosen scored above rejected), `margin` (mean r_c - r_r),
`rewards/chosen`, `rewards/rejected` (means), `min_reward`, `mean_reward`, `max_reward`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def pairwise_loss(chosen: jax.Array, rejected: jax.Array, margin: jax.Array, weight: jax.Array,
                  center_rewards_coefficient: float | None = None):
  """[B] rewards of chosen and rejected, [B] margins and weights -> (loss, metrics dict)."""
  count = jnp.maximum(weight.sum(), 1.0)

  def mean(x):
    return (x * weight).sum() / count

  diff = chosen - rejected
  loss = mean(-jax.nn.log_sigmoid(diff - margin))
  if center_rewards_coefficient:
    loss = loss + center_rewards_coefficient * mean((chosen + rejected) ** 2)
  real = weight > 0
  both = jnp.concatenate([jnp.where(real, chosen, jnp.inf), jnp.where(real, rejected, jnp.inf)])
  metrics = {
      "loss": loss,
      "accuracy": mean((diff > 0).astype(jnp.float32)),
      "margin": mean(diff),
      "rewards/chosen": mean(chosen),
      "rewards/rejected": mean(rejected),
      "min_reward": both.min(),
      "mean_reward": (mean(chosen) + mean(rejected)) / 2,
      "max_reward": jnp.where(jnp.isinf(both), -jnp.inf, both).max(),
      "pairs": weight.sum(),
  }
  return loss, metrics
