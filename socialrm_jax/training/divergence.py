"""A training run that goes non-finite stops, loudly, and exports nothing.

The loop reads each step's metrics on the host anyway (to log them), so the loss and the gradient
norm of every step are checked there (`non_finite`) at no extra round trip: the first step with a
NaN or an infinity ends the run with `TrainingDivergedError`, one line naming the step and the last
checkpoint saved before it. The trained parameters and the optimizer state are checked on the
device (`all_finite`: one boolean comes back) before every checkpoint and before the export, so a
step whose update overflowed with a finite loss is caught too, and no saved checkpoint or exported
model holds a NaN.

Metric rows are strict JSON (`json_row`): a value that is not finite is written as `null`, and the
row names such values in `"non_finite"` (e.g. `{"step": 3, "loss": null, "grad_norm": null,
"non_finite": ["grad_norm", "loss"]}`), so jq, browsers and `json.loads(..., parse_constant=...)`
that refuses NaN read every row.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp

# The metrics of a step that say whether it diverged.
CHECKED = ("loss", "grad_norm")
NON_FINITE_KEY = "non_finite"


class TrainingDivergedError(RuntimeError):
  """A step's loss or gradient norm, or the trained state, is NaN or infinite: the run stops
  before it saves or exports it."""


def non_finite(metrics: Mapping[str, Any], names: tuple[str, ...] = CHECKED) -> list[str]:
  """Which of `names` in `metrics` are floats that are not finite."""
  return [n for n in names if isinstance(metrics.get(n), float) and not math.isfinite(metrics[n])]


@jax.jit
def all_finite(tree) -> jax.Array:
  """Whether every floating-point entry of `tree` is finite: [] bool, computed where the arrays
  live."""
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.floating)]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def json_row(row: Mapping[str, Any]) -> dict[str, Any]:
  """`row` as strict JSON allows: each non-finite float is None, and their names (sorted) go into
  `"non_finite"`."""
  bad = sorted(k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v))
  out = {k: (None if k in bad else v) for k, v in row.items()}
  if bad:
    out[NON_FINITE_KEY] = bad
  return out


def diverged(step: int, metrics: Mapping[str, float], last_checkpoint: str | None
             ) -> TrainingDivergedError:
  """The error of a run whose step `step` (1-based, as the metric rows count) gave a non-finite
  loss or gradient norm."""
  values = ", ".join(f"{n} {metrics[n]}" for n in CHECKED if n in metrics)
  return TrainingDivergedError(
      f"step {step}: the training diverged ({values}); stopped before saving or exporting it, "
      f"nothing exported. {_last(last_checkpoint)}. A lower --learning_rate or --max_grad_norm "
      "clipping may keep it finite")


def not_finite_state(step: int, last_checkpoint: str | None) -> TrainingDivergedError:
  """The error of a run whose parameters or optimizer state hold a NaN or an infinity after step
  `step`, although its loss and gradient norm were finite (an update that overflowed)."""
  return TrainingDivergedError(
      f"step {step}: the trained parameters or the optimizer state are not finite (an update "
      f"overflowed); stopped before saving or exporting them, nothing exported. "
      f"{_last(last_checkpoint)}. A lower --learning_rate or --max_grad_norm clipping may keep "
      "it finite")


def _last(checkpoint: str | None) -> str:
  if checkpoint is None:
    return "No checkpoint was saved before it"
  return f"The last checkpoint, every step before it finite: {checkpoint}"
