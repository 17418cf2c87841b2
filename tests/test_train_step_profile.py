"""benchmarks/training/train_step_profile.py's attention variants compute the gradients the code computes,
so that an A/B of them (docs/training.md) times the same mathematics."""

from __future__ import annotations

import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from socialrm_jax.models import attention

REPO = pathlib.Path(__file__).resolve().parents[1]


def gradients(softmax, logit_cap):
  """q, k and v's gradients of a weighted sum of `softmax`'s token-major output, on a causal mask
  whose first query sees no key (padding: a uniform softmax)."""
  batch, kv_heads, groups, length, width = 1, 2, 2, 16, 8
  keys = jax.random.split(jax.random.key(0), 4)
  q = jax.random.normal(keys[0], (batch, kv_heads, groups * length, width))
  k = jax.random.normal(keys[1], (batch, kv_heads, length, width))
  v = jax.random.normal(keys[2], (batch, kv_heads, length, width))
  weights = jax.random.normal(keys[3], (batch, length, kv_heads, groups, width))
  mask = jnp.tril(jnp.ones((length, length), bool))[None].at[0, 0, 0].set(False)

  def loss(q, k, v):
    return jnp.sum(softmax(q, k, v, mask, 0.3, logit_cap) * weights)
  return jax.grad(loss, (0, 1, 2))(q, k, v)


@pytest.fixture
def train_step_profile(monkeypatch):
  del monkeypatch
  from benchmarks.training import train_step_profile
  return train_step_profile


@pytest.mark.parametrize("logit_cap", [None, 5.0])
@pytest.mark.parametrize("row_sums_as_product", [False, True])
@pytest.mark.parametrize("variant", ["_probabilities_kept_softmax_attention",
                                     "_queries_major_softmax_attention"])
def test_probabilities_kept_and_queries_major(train_step_profile, variant, logit_cap,
                                              row_sums_as_product):
  softmax = getattr(train_step_profile, variant)(row_sums_as_product)
  for got, want in zip(gradients(softmax, logit_cap),
                       gradients(attention.softmax_attention, logit_cap)):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("logit_cap", [None, 5.0])
def test_heads_major_attention_output(train_step_profile, logit_cap):
  heads_major = train_step_profile._heads_major_softmax_attention()

  def token_major(q, k, v, mask, scale, logit_cap):  # the variant's output is heads-major
    return attention._token_major(heads_major(q, k, v, mask, scale, logit_cap), mask.shape[1])
  for got, want in zip(gradients(token_major, logit_cap),
                       gradients(attention.softmax_attention, logit_cap)):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)



def test_keys_major_mask_broadcast(train_step_profile):
  mask = jax.random.bernoulli(jax.random.key(1), 0.5, (2, 5, 7))
  np.testing.assert_array_equal(train_step_profile._keys_major_mask_broadcast(mask, 3),
                                attention._keys_major_mask(mask, 3))


@pytest.mark.parametrize("variant", ["_query_blocks_sliced", "_blocks_joined_heads_major"])
def test_query_block_variants(train_step_profile, variant):
  """The blocks of queries sliced one by one (and joined heads-major): the code's attention
  output and gradients, on blocks of 4 of 10 queries (the last one short)."""
  keys = jax.random.split(jax.random.key(0), 4)
  q = jax.random.normal(keys[0], (1, 10, 4, 8))  # [B, T, N, H], two key/value heads
  k = jax.random.normal(keys[1], (1, 10, 2, 8))
  v = jax.random.normal(keys[2], (1, 10, 2, 8))
  weights = jax.random.normal(keys[3], (1, 10, 4, 8))
  mask = jnp.tril(jnp.ones((10, 10), bool))[None]

  def loss(blocks, q, k, v):
    return jnp.sum(blocks(q, k, v, mask, scale=0.3, logit_cap=None, bias=None, block=4,
                          keys_end_with_block=True) * weights)
  for got, want in zip(jax.grad(functools.partial(loss, getattr(train_step_profile, variant)),
                                (0, 1, 2))(q, k, v),
                       jax.grad(functools.partial(loss, attention._attention_by_query_blocks),
                                (0, 1, 2))(q, k, v)):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
