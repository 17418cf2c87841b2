"""Hidden states of hand-packed rows, as `scoring/packing.py` lays them out: each part (tokens,
first position, segment, branch) after the last, then padding."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx

from socialrm_jax.models import attention


@nnx.jit
def hidden(module, input_ids, positions, layout):
  """The family model's forward pass, compiled (eager op-by-op dispatch is slow on CPU)."""
  return module(input_ids, positions, layout)  # [B, T, D]


def run_rows(module, rows: list[list[tuple]], length: int, is_causal: bool,
             pad_id: int) -> np.ndarray:
  """[R, T, D] hidden states of packed rows of `length` tokens, one compilation."""
  shape = (len(rows), length)
  ids = np.full(shape, pad_id, np.int32)
  positions, segments, branches = (np.zeros(shape, np.int32) for _ in range(3))
  for r, parts in enumerate(rows):
    start = 0
    for tokens, first_position, segment, branch in parts:
      span = slice(start, start + len(tokens))
      ids[r, span], positions[r, span] = tokens, first_position + np.arange(len(tokens))
      segments[r, span], branches[r, span] = segment, branch
      start += len(tokens)
  layout = attention.Layout(jnp.asarray(segments), jnp.asarray(branches), is_causal)
  return np.asarray(hidden(module, jnp.asarray(ids), jnp.asarray(positions), layout))


def shared_prefix(prefix: np.ndarray, continuations: list[np.ndarray]) -> list[tuple]:
  """A causal item as the packer lays it out: the candidates' common prefix once (branch 0), then
  each continuation in its own branch, positions continuing the prefix's; one segment."""
  return [(prefix, 0, 1, 0)] + [(tail, len(prefix), 1, branch)
                                for branch, tail in enumerate(continuations, start=1)]
