"""The learning-rate schedules against transformers' own (`get_scheduler`, what TRL's
RewardTrainer steps), and a run extended to more steps against transformers' Trainer resumed with
a larger max_steps (its scheduler built for the new length, then its saved state loaded)."""

import numpy as np
import pytest
import torch
import transformers

from socialrm_jax.training import optimizer
from tests.helpers.tolerances import float32_tolerance

# Ours -> transformers' name (our `constant` warms up first).
TRANSFORMERS_NAMES = {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}
PEAK = 1e-3


def _transformers_rates(kind: str, total: int, warmup: int, steps: int, resumed=None) -> list:
  """The rate each optimizer step uses, 1 to `steps`, under transformers' scheduler; `resumed`:
  (the state dicts saved at the end of an earlier run) loaded as Trainer loads them."""
  param = torch.nn.Parameter(torch.zeros(1))
  opt = torch.optim.AdamW([param], lr=PEAK)
  sched = transformers.get_scheduler(TRANSFORMERS_NAMES[kind], opt, num_warmup_steps=warmup,
                                     num_training_steps=total)
  if resumed is not None:
    opt.load_state_dict(resumed[0])
    sched.load_state_dict(resumed[1])
  rates = []
  for _ in range(steps):
    rates.append(opt.param_groups[0]["lr"])
    opt.step()
    sched.step()
  return rates, (opt.state_dict(), sched.state_dict())


@pytest.mark.parametrize("kind", optimizer.SCHEDULES)
def test_schedules_are_transformers_get_scheduler(kind):
  ours = optimizer.learning_rate_schedule(PEAK, 20, 4, kind)
  theirs, _ = _transformers_rates(kind, 20, 4, 20)
  # optax computes in float32, transformers in Python's float64: a few roundings of the peak times
  # a fraction, so a few eps of the peak.
  np.testing.assert_allclose([float(ours(k)) for k in range(20)], theirs, rtol=0,
                             atol=float32_tolerance(4, PEAK))


def test_an_extended_run_continues_the_recomputed_schedule_as_the_trainer_does():
  """24 steps of linear decay (0 at the end), extended to 32: from the second resumed step on,
  transformers' Trainer uses the schedule recomputed for 32 steps at the step reached, as ours
  does; its first resumed step still uses the rate saved with the optimizer (the old schedule's,
  0), where ours already reads the recomputed schedule."""
  _, saved = _transformers_rates("linear", 24, 0, 24)
  theirs, _ = _transformers_rates("linear", 32, 0, 8, resumed=saved)
  longer = optimizer.learning_rate_schedule(PEAK, 32, 0, "linear")
  ours = [float(longer(k)) for k in range(24, 32)]
  # optax's float32 against Python's float64: a few roundings of one product, so a few eps.
  np.testing.assert_allclose(ours[1:], theirs[1:], rtol=float32_tolerance(4))
  assert theirs[0] == 0.0 and ours[0] == pytest.approx(PEAK * (1 - 24 / 32))
