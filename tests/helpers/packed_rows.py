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


def packed_rows(rng: np.random.Generator, rows: int, length: int, is_causal: bool):
  """-> (segment_ids, branch_ids, positions) [rows, length] int32, filled as the packer does.

  Causal: each segment a prefix of 0-12 tokens (the first segment's is empty) then 1-3 branches
  of 1-10 tokens, their positions continuing the prefix's. Encoders: each segment one sequence.
  Every row ends in padding; the last row is all padding.
  """
  segments, branches, positions = (np.zeros((rows, length), np.int32) for _ in range(3))
  for row in range(rows - 1):
    used, segment = 0, 0
    while True:
      prefix = 0 if (row, segment) == (0, 0) or not is_causal else int(rng.integers(0, 13))
      lengths = rng.integers(1, 11, size=int(rng.integers(1, 4)) if is_causal else 1)
      if used + prefix + lengths.sum() > length - 4:
        break
      segment += 1
      segments[row, used:used + prefix] = segment
      positions[row, used:used + prefix] = np.arange(prefix)
      used += prefix
      for branch, n in enumerate(lengths, start=1 if is_causal else 0):
        segments[row, used:used + n] = segment
        branches[row, used:used + n] = branch
        positions[row, used:used + n] = prefix + np.arange(n)
        used += n
  return segments, branches, positions
