"""Packing encoded items into fixed-shape batches: shared prefixes, several items per row.

For a causal model an item's candidates share the tokens before their first difference (the
templated prompt, usually). One *group* holds that prefix once, followed by every candidate's
continuation (its *branch*):

    row:      [ prefix of item 1 | branch 1 | branch 2 | branch 3 | prefix of item 2 | ... | pad ]
    segment:    1 1 1 1 1 1 1 1 1  1 1 1 1   1 1 1 1 1  1 1 1 1 1   2 2 2 2 2 2 2 2    0 0 0
    branch:     0 0 0 0 0 0 0 0 0  1 1 1 1   2 2 2 2 2  3 3 3 3 3   0 0 0 0 0 0 0 0    0 0 0
    position:   0 1 2 3 4 5 6 7 8  9 ...     9 ...      9 ...       0 1 2 ...          0 0 0

A token may attend to earlier tokens of its own segment that are in the prefix (branch 0) or in its
own branch; positions in a branch continue after the prefix. So every branch token sees exactly
what it would see in its full sequence alone, and gets the same hidden state. The mask itself is
built inside the jit (`attention_mask` below) from these small [B, T] arrays.

Encoders are not causal, so nothing is shared: each candidate's whole sequence is its own segment
(bidirectional within it). Several segments still share a row.

Rows come in a few fixed lengths (`length_buckets`), each with a fixed number of rows per batch
(from the token budget), so the scoring function compiles a bounded number of times.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import jax.numpy as jnp
import numpy as np

from socialrm_jax.scoring.templating import EncodedItem, common_prefix_length

SMALLEST_BUCKET = 128
# Readout slots per row are padded to a power of two at least this large (bounds recompiles).
SMALLEST_READOUT_SLOTS = 8
READOUTS = ("score", "loglik")
# Rows are sized to hold about this many groups of similar length (see `row_length_for`).
GROUPS_PER_ROW = 4


def length_buckets(max_length: int, smallest: int = SMALLEST_BUCKET) -> tuple[int, ...]:
  """Row lengths: powers of two from `smallest` below `max_length`, then `max_length` itself."""
  buckets = []
  length = smallest
  while length < max_length:
    buckets.append(length)
    length *= 2
  buckets.append(max_length)
  return tuple(buckets)


def rows_per_batch(bucket: int, tokens_per_batch: int, row_multiple: int) -> int:
  """Rows in a batch of `bucket`-long rows: as many as the token budget allows, a multiple of
  `row_multiple` (the data-parallel size, so each device gets whole rows), at least one each."""
  rows = max(1, tokens_per_batch // bucket)
  return max(row_multiple, rows // row_multiple * row_multiple)


def batch_rows(rows: int, per_batch: int, row_multiple: int) -> int:
  """Rows of a batch holding `rows` real ones: the full `per_batch`, or for a bucket's last,
  partial batch the smallest `row_multiple * 2**k` that holds them, so a nearly empty batch does
  not run a full batch of padding (at most log2(per_batch) extra shapes per bucket)."""
  size = row_multiple
  while size < rows:
    size *= 2
  return min(size, per_batch)


@dataclasses.dataclass(frozen=True)
class Group:
  """One item's shared prefix and the branches of some of its candidates, contiguous in a row."""
  item: EncodedItem
  item_slot: int                  # Index of the item within its chunk.
  candidates: tuple[int, ...]
  prefix_length: int

  @property
  def length(self) -> int:
    return self.prefix_length + sum(
        len(self.item.sequences[c]) - self.prefix_length for c in self.candidates)


def shared_prefix_length(item: EncodedItem, is_causal: bool) -> int:
  """Tokens all candidates share, leaving each at least its last token in its own branch."""
  if not is_causal:
    return 0
  sequences = item.sequences
  shared = min(len(s) for s in sequences) - 1
  for s in sequences[1:]:
    shared = min(shared, common_prefix_length(sequences[0], s))
  return max(shared, 0)


def item_groups(item: EncodedItem, item_slot: int, capacity: int, is_causal: bool) -> list[Group]:
  """The item's groups: one holding every candidate when it fits in `capacity` tokens, else the
  candidates split greedily over several groups (each repeating the prefix)."""
  if not is_causal:
    return [Group(item, item_slot, (c,), 0) for c in range(item.num_candidates)]
  prefix = shared_prefix_length(item, is_causal)
  groups, current, used = [], [], prefix
  for c, seq in enumerate(item.sequences):
    branch = len(seq) - prefix
    if current and used + branch > capacity:
      groups.append(Group(item, item_slot, tuple(current), prefix))
      current, used = [], prefix
    current.append(c)
    used += branch
  groups.append(Group(item, item_slot, tuple(current), prefix))
  return groups


def pack_rows(groups: Sequence[Group], capacity: int) -> list[list[Group]]:
  """First-fit decreasing: the longest groups first, each into the first row with room."""
  rows: list[list[Group]] = []
  free: list[int] = []
  for group in sorted(groups, key=lambda g: (-g.length, g.item_slot, g.candidates)):
    for r, room in enumerate(free):
      if group.length <= room:
        rows[r].append(group)
        free[r] -= group.length
        break
    else:
      if group.length > capacity:
        raise ValueError(f"group of {group.length} tokens does not fit rows of {capacity}")
      rows.append([group])
      free.append(capacity - group.length)
  return rows


@dataclasses.dataclass
class Batch:
  """Host arrays for one call of the scoring function ([B, T] and [B, S] int32)."""
  input_ids: np.ndarray        # [B, T]
  positions: np.ndarray        # [B, T]
  segment_ids: np.ndarray      # [B, T] 0 = padding, else the group's number within its row.
  branch_ids: np.ndarray       # [B, T] 0 = shared prefix, c + 1 = candidate c's branch.
  token_type_ids: np.ndarray   # [B, T]
  readout_index: np.ndarray    # [B, S] where to read the hidden state (a row index).
  readout_target: np.ndarray   # [B, S] loglik: the token predicted from there; else 0.
  readout_owner: np.ndarray    # [B, S] chunk-wide candidate number the readout belongs to; -1 = none.
  real_tokens: int             # Tokens that are not padding.


class RowWriter:
  """Lays groups out in one row and lists the row's readouts."""

  def __init__(self, length: int, readout: str, candidate_offsets: np.ndarray):
    self.input_ids = np.zeros(length, np.int32)
    self.positions = np.zeros(length, np.int32)
    self.segment_ids = np.zeros(length, np.int32)
    self.branch_ids = np.zeros(length, np.int32)
    self.token_type_ids = np.zeros(length, np.int32)
    self.readouts: list[tuple[int, int, int]] = []  # (row index, target token, owner)
    self.readout = readout
    self.candidate_offsets = candidate_offsets
    self.used = 0
    self.segments = 0

  def add(self, group: Group) -> None:
    item, prefix = group.item, group.prefix_length
    self.segments += 1
    start = self.used
    first = item.sequences[group.candidates[0]]
    self._place(start, first[:prefix], np.arange(prefix), 0, group, group.candidates[0], 0)
    branch_starts = {}
    offset = start + prefix
    for c in group.candidates:
      seq = item.sequences[c]
      branch_starts[c] = offset
      self._place(offset, seq[prefix:], np.arange(prefix, len(seq)), c + 1, group, c, prefix)
      offset += len(seq) - prefix
    self.used = offset
    for c in group.candidates:
      self._add_readouts(group, c, start, branch_starts[c])

  def _place(self, at, ids, positions, branch, group, candidate, from_position):
    end = at + len(ids)
    self.input_ids[at:end] = ids
    self.positions[at:end] = positions
    self.segment_ids[at:end] = self.segments
    self.branch_ids[at:end] = branch
    if group.item.token_type_ids is not None:
      types = group.item.token_type_ids[candidate]
      self.token_type_ids[at:end] = types[from_position:from_position + len(ids)]

  def _add_readouts(self, group: Group, c: int, group_start: int, branch_start: int) -> None:
    item, prefix = group.item, group.prefix_length
    seq = item.sequences[c]
    owner = int(self.candidate_offsets[group.item_slot]) + c

    def row_index(p: int) -> int:  # Sequence position p of candidate c -> index in the row.
      return group_start + p if p < prefix else branch_start + p - prefix

    if self.readout == "score":
      # Causal: the last real token; encoders: the first ([CLS]).
      p = len(seq) - 1 if item.token_type_ids is None else 0
      self.readouts.append((row_index(p), 0, owner))
    else:
      # Token p is predicted from the hidden state at p - 1; the first token has no predictor.
      for p in range(max(item.response_starts[c], 1), len(seq)):
        self.readouts.append((row_index(p - 1), int(seq[p]), owner))


def attention_mask(segment_ids, branch_ids, is_causal: bool):
  """[B, T, T] bool (query, key) from the packed layout; runs inside the jit.

  Same non-padding segment; for causal models also key not after query, and key in the shared
  prefix or in the query's own branch. Every token may attend to itself, so a padding row's
  softmax has a real key rather than relying on the masked logit being finite.
  """
  seg_q, seg_k = segment_ids[:, :, None], segment_ids[:, None, :]  # [B, T, 1], [B, 1, T]
  mask = (seg_q == seg_k) & (seg_q > 0)
  if is_causal:
    index = jnp.arange(segment_ids.shape[1])
    not_after = index[:, None] >= index[None, :]  # [T, T]
    br_q, br_k = branch_ids[:, :, None], branch_ids[:, None, :]
    mask = mask & not_after[None] & ((br_k == 0) | (br_k == br_q))
  return mask | jnp.eye(segment_ids.shape[1], dtype=bool)[None]


def candidate_offsets(items: Sequence[EncodedItem]) -> np.ndarray:
  """Chunk-wide number of each item's first candidate ([num_items + 1], last = total)."""
  return np.concatenate([[0], np.cumsum([it.num_candidates for it in items])]).astype(np.int64)


def _pad_to_power_of_two(n: int, smallest: int) -> int:
  size = smallest
  while size < n:
    size *= 2
  return size


def row_length_for(group_length: int, buckets: Sequence[int]) -> int:
  """The length of the rows a group is packed into: the shortest bucket that holds
  `GROUPS_PER_ROW` groups of its length, else the longest. Attention costs each token work in
  proportion to its row's length, so short items go into short rows rather than all into rows of
  `max_length` (which would fill as well, but spend most of the attention on masked pairs)."""
  return next((b for b in buckets if b >= GROUPS_PER_ROW * group_length), buckets[-1])


def make_batches(items: Sequence[EncodedItem], *, is_causal: bool, readout: str,
                 buckets: Sequence[int], tokens_per_batch: int,
                 row_multiple: int = 1) -> Iterator[Batch]:
  """Packs `items` (one chunk) into batches, shortest bucket first."""
  if readout not in READOUTS:
    raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
  capacity = buckets[-1]
  offsets = candidate_offsets(items)
  groups = [g for slot, item in enumerate(items) for g in item_groups(item, slot, capacity, is_causal)]
  by_row_length: dict[int, list[Group]] = {}
  for group in groups:
    by_row_length.setdefault(row_length_for(group.length, buckets), []).append(group)
  rows = [row for length in sorted(by_row_length)
          for row in pack_rows(by_row_length[length], length)]
  by_bucket: dict[int, list[RowWriter]] = {}
  for row in rows:
    used = sum(g.length for g in row)
    bucket = next(b for b in buckets if b >= used)
    writer = RowWriter(bucket, readout, offsets)
    for group in row:
      writer.add(group)
    by_bucket.setdefault(bucket, []).append(writer)
  for bucket in sorted(by_bucket):
    writers = by_bucket[bucket]
    per_batch = rows_per_batch(bucket, tokens_per_batch, row_multiple)
    for start in range(0, len(writers), per_batch):
      batch_writers = writers[start:start + per_batch]
      yield _stack(batch_writers, batch_rows(len(batch_writers), per_batch, row_multiple), bucket)


def _stack(writers: Sequence[RowWriter], num_rows: int, length: int) -> Batch:
  slots = _pad_to_power_of_two(max(len(w.readouts) for w in writers), SMALLEST_READOUT_SLOTS)
  fields = {name: np.zeros((num_rows, length), np.int32)
            for name in ("input_ids", "positions", "segment_ids", "branch_ids", "token_type_ids")}
  readout_index = np.zeros((num_rows, slots), np.int32)
  readout_target = np.zeros((num_rows, slots), np.int32)
  readout_owner = np.full((num_rows, slots), -1, np.int64)
  for r, w in enumerate(writers):
    for name, array in fields.items():
      array[r] = getattr(w, name)
    if w.readouts:
      index, target, owner = zip(*w.readouts)
      n = len(index)
      readout_index[r, :n], readout_target[r, :n], readout_owner[r, :n] = index, target, owner
  real = int(sum(w.used for w in writers))
  return Batch(**fields, readout_index=readout_index, readout_target=readout_target,
               readout_owner=readout_owner, real_tokens=real)
