"""Attention masks and positions built from a [B, T] padding mask.

Every model takes an explicit 3-D mask [B, T(query), T(key)] (True = may attend) and explicit
positions, so left padding, right padding and packed rows all go through the same model code.
Families add only what depends on positions (sliding windows). The masks for padded batches are
built here; those for packed rows (shared prefixes, several sequences a row) in
`socialrm_jax.scoring.packing.attention_mask`.
"""

from __future__ import annotations

import jax.numpy as jnp


def causal_mask(attention_mask: jnp.ndarray) -> jnp.ndarray:
  """[B, T] padding mask (1 = real token) -> [B, T, T]: real queries see real keys at or before them."""
  real = attention_mask.astype(bool)  # [B, T]
  seq_len = real.shape[-1]
  lower = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))  # [T, T]
  return real[:, :, None] & real[:, None, :] & lower[None]


def bidirectional_mask(attention_mask: jnp.ndarray) -> jnp.ndarray:
  """[B, T] padding mask -> [B, T, T]: every real query sees every real key."""
  real = attention_mask.astype(bool)  # [B, T]
  return real[:, :, None] & real[:, None, :]


def positions_from_mask(attention_mask: jnp.ndarray) -> jnp.ndarray:
  """[B, T] padding mask -> [B, T] int32 positions: 0 at the first real token, whatever the padding side."""
  positions = jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1
  return jnp.maximum(positions, 0).astype(jnp.int32)


def last_real_index(attention_mask: jnp.ndarray) -> jnp.ndarray:
  """[B, T] padding mask -> [B] index of the rightmost real token (left or right padding)."""
  seq_len = attention_mask.shape[-1]
  reversed_first = jnp.argmax(attention_mask[:, ::-1].astype(bool), axis=-1)
  return (seq_len - 1 - reversed_first).astype(jnp.int32)


def first_real_index(attention_mask: jnp.ndarray) -> jnp.ndarray:
  """[B, T] padding mask -> [B] index of the leftmost real token (where BERT's [CLS] sits)."""
  return jnp.argmax(attention_mask.astype(bool), axis=-1).astype(jnp.int32)
