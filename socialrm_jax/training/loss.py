"""The Bradley-Terry pairwise loss as TRL's RewardTrainer computes it, and its metrics.

  loss = mean over pairs of -log sigmoid(r_chosen - r_rejected - margin)
         + center_rewards_coefficient * mean((r_chosen + r_rejected) ** 2)

(trl/trainer/reward_trainer.py, `RewardTrainer.compute_loss`: the margin term only where the data
has a `margin` column, which is 0 elsewhere here; the centering term of Eisenstein et al. 2023.)

A step's pairs may be laid out in several blocks of rows (`training.pair_batches`), so the loss is
computed as sums over each block's pairs (`pair_sums`), added up over the blocks (`add_sums`) and
divided by the step's pair count once (`means`): the gradient of the summed loss, divided so, is
the gradient of TRL's mean. Empty pair slots carry weight 0 and count in no sum.

Metric names are TRL's: `accuracy` (chosen scored above rejected), `margin` (mean r_c - r_r),
`rewards/chosen`, `rewards/rejected` (means), `min_reward`, `mean_reward`, `max_reward`.
"""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp

# Sums over pairs; the other keys of a sums dict are the extremes.
SUMMED = ("loss", "accuracy", "margin", "rewards/chosen", "rewards/rejected", "pairs")


def pair_sums(chosen: jax.Array, rejected: jax.Array, margin: jax.Array, weight: jax.Array,
              center_rewards_coefficient: float | None = None) -> dict[str, jax.Array]:
  """[P] rewards of chosen and rejected, [P] margins and weights (1 a pair, 0 an empty slot) ->
  the sums over the pairs of each per-pair term (the loss's included), and the extreme rewards."""

  def total(x):
    return (x * weight).sum()

  diff = chosen - rejected
  per_pair = -jax.nn.log_sigmoid(diff - margin)
  if center_rewards_coefficient:
    per_pair = per_pair + center_rewards_coefficient * (chosen + rejected) ** 2
  real = weight > 0
  both = jnp.concatenate([chosen, rejected])
  both_real = jnp.concatenate([real, real])
  return {
      "loss": total(per_pair),
      "accuracy": total((diff > 0).astype(jnp.float32)),
      "margin": total(diff),
      "rewards/chosen": total(chosen),
      "rewards/rejected": total(rejected),
      "pairs": weight.sum(),
      "min_reward": jnp.where(both_real, both, jnp.inf).min(),
      "max_reward": jnp.where(both_real, both, -jnp.inf).max(),
  }


def no_sums() -> dict[str, jax.Array]:
  """The sums over no pair (what `add_sums` starts from)."""
  out = {key: jnp.zeros((), jnp.float32) for key in SUMMED}
  out.update(min_reward=jnp.array(jnp.inf, jnp.float32),
             max_reward=jnp.array(-jnp.inf, jnp.float32))
  return out


def add_sums(a: Mapping[str, jax.Array], b: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
  """Two blocks' sums as one."""
  out = {key: a[key] + b[key] for key in SUMMED}
  out["min_reward"] = jnp.minimum(a["min_reward"], b["min_reward"])
  out["max_reward"] = jnp.maximum(a["max_reward"], b["max_reward"])
  return out


def means(sums: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
  """TRL's metrics (means over the pairs) from the sums of a step's or an evaluation's blocks."""
  count = jnp.maximum(sums["pairs"], 1.0)
  out = {key: sums[key] / count for key in SUMMED if key != "pairs"}
  out.update(mean_reward=(out["rewards/chosen"] + out["rewards/rejected"]) / 2,
             min_reward=sums["min_reward"], max_reward=sums["max_reward"], pairs=sums["pairs"])
  return out

