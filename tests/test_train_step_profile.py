"""benchmarks/train_step_profile.py's attention variants compute the gradients the code computes,
so that an A/B of them (docs/training.md) times the same mathematics."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from socialrm_jax.models import attention

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("logit_cap", [None, 5.0])
@pytest.mark.parametrize("row_sums_as_product", [False, True])
def test_variants_have_softmax_attentions_gradients(monkeypatch, logit_cap,
                                                    row_sums_as_product):
  monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
  import train_step_profile
  batch, kv_heads, groups, length, width = 1, 2, 2, 16, 8
  keys = jax.random.split(jax.random.key(0), 4)
  q = jax.random.normal(keys[0], (batch, kv_heads, groups * length, width))
  k = jax.random.normal(keys[1], (batch, kv_heads, length, width))
  v = jax.random.normal(keys[2], (batch, kv_heads, length, width))
  weights = jax.random.normal(keys[3], (batch, length, kv_heads, groups, width))
  # Causal, and the first query of the second row seeing no key (padding): a uniform softmax.
  mask = jnp.tril(jnp.ones((length, length), bool))[None].at[0, 0, 0].set(False)

  def gradients(softmax):
    def loss(q, k, v):
      return jnp.sum(softmax(q, k, v, mask, 0.3, logit_cap) * weights)
    return jax.grad(loss, (0, 1, 2))(q, k, v)

  want = gradients(attention.softmax_attention)
  kept = train_step_profile._probabilities_kept_softmax_attention(row_sums_as_product)
  for got, wanted in zip(gradients(kept), want):
    np.testing.assert_allclose(got, wanted, atol=1e-5, rtol=0)
  # The variant before attention's output was token-major returns it heads-major.
  heads_major = train_step_profile._heads_major_softmax_attention()
  for got, wanted in zip(gradients(lambda *operands: attention._token_major(
      heads_major(*operands), length)), want):
    np.testing.assert_allclose(got, wanted, atol=1e-5, rtol=0)
