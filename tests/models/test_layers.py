"""`layers.RMSNorm` works over [rows, features]: the reductions of its backward pass are the forms
YNNPACK runs fast on a CPU (its outputs against PyTorch are in test_family_parity.py)."""

from __future__ import annotations

import os
import re

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

from socialrm_jax.models import layers  # noqa: E402


@pytest.mark.parametrize("dim", [16, (4, 4)])
def test_rms_norm_gradients_reduce_over_rows_and_features(dim):
  """Over [B, T, D], the scale's gradient summed the middle axis T of [B, T, D], which XLA:CPU's
  YNNPACK ran about 35 times slower than the same sum over [B x T, D] (benchmarks/
  train_step_profile.py --ops, `layers.RMSNorm`)."""
  norm = layers.RMSNorm(dim, 1e-6, unit_offset=False, dtype=jnp.float32,
                        param_dtype=jnp.float32)
  graphdef, params = nnx.split(norm)
  x = jnp.ones((2, 8, 16) if dim == 16 else (2, 8, 4, 4))

  def loss(params, x):
    return jnp.square(nnx.merge(graphdef, params)(x)).sum()

  program = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(params, x).as_text()
  operands = re.findall(r"stablehlo\.reduce\(.*\(tensor<([\dx]+)xf32>, tensor<f32>\)", program)
  assert operands, program
  assert all(shape.count("x") == 1 for shape in operands), operands
