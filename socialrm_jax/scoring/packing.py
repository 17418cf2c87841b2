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
built inside the jit (`models.attention.Layout`) from these small [B, T] arrays.

Encoders are not causal, so nothing is shared: each candidate's whole sequence is its own segment
(bidirectional within it). Several segments still share a row.

Shapes are fixed so the scoring function compiles at most `MAX_BUCKETS` times in a run: rows come
in a few lengths (`length_buckets`); a batch of one length always has the same rows (from the
token budget) and readout slots per row (`readout_slots`), and a partial batch is padded with
empty rows, never given its own shape. `Batcher` fills batches from the rows of consecutive chunks,
so only the end of the run (and a bucket that stays nearly empty for a whole chunk) pads.

The vocabulary scan (`vocab_rows.py`) packs through `pack_one_group_per_row`: items whose
candidates are one-token answers after one prompt, in rows of one length, each row one group (the
prompt once, then as many branches as fit) with a readout slot for every token. Its language-model
rows read "vocab_loglik" (`models/readout.py`): every branch's first token is looked up in the one
log-softmax at the prompt's last position (`Batch.first_token_index`), and only the tokens after
it are readouts of their own.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import numpy as np

from socialrm_jax.models.readout import EMPTY_TARGET, FROM_FIRST_TOKEN_DISTRIBUTION
from socialrm_jax.scoring.item_tokens import EncodedItem, common_prefix_length

SMALLEST_BUCKET = 128
# Row lengths in a run, so compiled programs: the longest ones up to `max_length`.
MAX_BUCKETS = 4
READOUTS = ("score", "loglik")
# Readout slots per row, as a fraction of the row length: a score readout is one per candidate (a
# candidate's branch is rarely under 8 tokens); a loglik readout one per response token. The
# longest rows have a slot for every token, so any group fits somewhere.
TOKENS_PER_READOUT = {"score": 8, "loglik": 2}
# Rows are sized to hold about this many groups of similar length (see `row_length_for`) on
# accelerators, where fused attention makes a longer row cheap and a padded slot is the waste.
GROUPS_PER_ROW = 4
# On a CPU, with no fused attention, a token slot of a T-long row costs about
# 1 + T / CPU_ATTENTION_LENGTH slots of the step's other work (a fit to the per-slot times that
# `benchmarks/scoring/cpu_profile.py` prints for the 35M Llama by row length), so the packer sizes
# rows for 1, 2 and 4 groups in turn and keeps the cheapest (`Batcher.pack`): one group a row when
# lengths vary (shorter groups fill the room), more when they are alike (else the room is padding).
CPU_GROUPS_PER_ROW = (1, 2, 4)
CPU_ATTENTION_LENGTH = 1024


def length_buckets(max_length: int, smallest: int = SMALLEST_BUCKET) -> tuple[int, ...]:
  """Row lengths: `max_length` and the powers of two from `smallest` below it, the longest
  `MAX_BUCKETS` of them."""
  buckets = []
  length = smallest
  while length < max_length:
    buckets.append(length)
    length *= 2
  buckets.append(max_length)
  return tuple(buckets[-MAX_BUCKETS:])


def readout_slots(bucket: int, readout: str, buckets: Sequence[int]) -> int:
  """Readout slots of a `bucket`-long row (fixed per bucket, so per compiled shape)."""
  if readout == "loglik" and bucket == buckets[-1]:
    return bucket
  return max(1, bucket // TOKENS_PER_READOUT[readout])


def rows_per_batch(bucket: int, batch_tokens: int, row_multiple: int) -> int:
  """Rows in a batch of `bucket`-long rows: as many as the token budget allows, a multiple of
  `row_multiple` (the data-parallel size, so each device gets whole rows), at least one each."""
  rows = max(1, batch_tokens // bucket)
  return max(row_multiple, rows // row_multiple * row_multiple)


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

  def readouts(self, readout: str) -> int:
    return sum(candidate_readouts(self.item, c, readout) for c in self.candidates)


def candidate_readouts(item: EncodedItem, c: int, readout: str) -> int:
  """Readouts candidate c needs: its reward, or one per response token (the first token of a
  sequence has no predictor)."""
  if readout == "score":
    return 1
  return len(item.sequences[c]) - max(item.response_starts[c], 1)


def shared_prefix_length(item: EncodedItem, is_causal: bool) -> int:
  """Tokens all candidates share, leaving each at least its last token in its own branch."""
  if not is_causal:
    return 0
  sequences = item.sequences
  shared = min(len(s) for s in sequences) - 1
  for s in sequences[1:]:
    shared = min(shared, common_prefix_length(sequences[0], s))
  return max(shared, 0)


def item_groups(item: EncodedItem, item_slot: int, capacity: int, readout_capacity: int,
                is_causal: bool, readout: str) -> list[Group]:
  """The item's groups: one holding every candidate when it fits in `capacity` tokens and
  `readout_capacity` readouts, else the candidates split greedily over several groups (each
  repeating the prefix)."""
  if not is_causal:
    return [Group(item, item_slot, (c,), 0) for c in range(item.num_candidates)]
  prefix = shared_prefix_length(item, is_causal)
  groups, current, used, reads = [], [], prefix, 0
  for c, seq in enumerate(item.sequences):
    branch, needs = len(seq) - prefix, candidate_readouts(item, c, readout)
    if current and (used + branch > capacity or reads + needs > readout_capacity):
      groups.append(Group(item, item_slot, tuple(current), prefix))
      current, used, reads = [], prefix, 0
    current.append(c)
    used += branch
    reads += needs
  groups.append(Group(item, item_slot, tuple(current), prefix))
  return groups


def pack_rows(groups: Sequence[Group], capacity: int, readout_capacity: int, readout: str,
              rows: list[list[Group]] | None = None,
              free: list[list[int]] | None = None) -> list[list[Group]]:
  """First-fit decreasing: the longest groups first, each into the first row with room for its
  tokens and its readouts, else a new row of `capacity` tokens and `readout_capacity` readouts.
  `rows` and their `free` room ([tokens, readouts] a row) may hold rows already packed (of
  longer groups): they are filled first, and extended in place."""
  rows = [] if rows is None else rows
  free = [] if free is None else free
  for group in sorted(groups, key=lambda g: (-g.length, g.item_slot, g.candidates)):
    length, reads = group.length, group.readouts(readout)
    for r, (room, read_room) in enumerate(free):
      if length <= room and reads <= read_room:
        rows[r].append(group)
        free[r][0] -= length
        free[r][1] -= reads
        break
    else:
      if length > capacity or reads > readout_capacity:
        raise ValueError(f"group of {length} tokens and {reads} readouts does not fit rows of "
                         f"{capacity} tokens and {readout_capacity} readouts")
      rows.append([group])
      free.append([capacity - length, readout_capacity - reads])
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
  readout_target: np.ndarray   # [B, S] loglik: the token predicted from there; else 0;
                               # EMPTY_TARGET in an empty slot.
  readout_owner: np.ndarray    # [B, S] chunk-wide candidate number the readout belongs to; -1 = none.
  row_chunk: np.ndarray        # [B] the chunk a row's readouts belong to; -1 = padding row.
  real_tokens: int             # Tokens that are not padding.
  first_token_index: np.ndarray | None = None  # [B] "vocab_loglik": the row's prompt end.
  gate_index: np.ndarray | None = None  # [B, S] a gated head's gate position per readout.

  def chunk_tokens(self) -> dict[int, int]:
    """Real tokens of the batch per chunk."""
    used = (self.segment_ids > 0).sum(axis=1)
    out: dict[int, int] = {}
    for chunk, tokens in zip(self.row_chunk.tolist(), used.tolist()):
      if chunk >= 0:
        out[chunk] = out.get(chunk, 0) + tokens
    return out


class RowWriter:
  """Lays groups out in one row of chunk `chunk` and lists the row's readouts."""

  def __init__(self, length: int, readout: str, candidate_offsets: np.ndarray, chunk: int = 0):
    self.input_ids = np.zeros(length, np.int32)
    self.positions = np.zeros(length, np.int32)
    self.segment_ids = np.zeros(length, np.int32)
    self.branch_ids = np.zeros(length, np.int32)
    self.token_type_ids = np.zeros(length, np.int32)
    self.readouts: list[tuple[int, int, int]] = []  # (row index, target token, owner)
    self.gates: list[int] = []  # a gated head's gate row index, one per readout ("score" only)
    self.readout = readout
    self.candidate_offsets = candidate_offsets
    self.chunk = chunk
    self.used = 0
    self.segments = 0
    self.first_token_index = 0  # "vocab_loglik": where the row's branches' first token is read.

  def append_row(self, other: "RowWriter") -> None:
    """Lays a whole row of the same chunk after this row's tokens (its segments renumbered)."""
    if self.readout == "vocab_loglik":
      raise ValueError("a vocab_loglik row holds one group (its one first-token distribution)")
    at, n = self.used, other.used
    for name in ("input_ids", "positions", "branch_ids", "token_type_ids"):
      getattr(self, name)[at:at + n] = getattr(other, name)[:n]
    self.segment_ids[at:at + n] = other.segment_ids[:n] + self.segments
    self.readouts += [(index + at, target, owner) for index, target, owner in other.readouts]
    self.gates += [index + at for index in other.gates]
    self.segments += other.segments
    self.used += n

  def add(self, group: Group) -> None:
    item, prefix = group.item, group.prefix_length
    if self.readout == "vocab_loglik":
      self._check_first_token_group(group)
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
    if self.readout == "vocab_loglik":
      # The shared slots last: the LM head's blocks of slots holding only them are skipped.
      self.first_token_index = start + item.response_starts[group.candidates[0]] - 1
      self.readouts.sort(key=lambda r: r[0] == FROM_FIRST_TOKEN_DISTRIBUTION)

  def _check_first_token_group(self, group: Group) -> None:
    """A vocab_loglik row: one group, whose candidates' first response tokens all follow the
    shared prefix at the same position (so one distribution predicts them all)."""
    starts = {group.item.response_starts[c] for c in group.candidates}
    if self.segments or len(starts) != 1 or not 1 <= min(starts) <= group.prefix_length:
      raise ValueError(f"item {group.item.item_id!r}: a vocab_loglik row holds one group whose "
                       "responses all start right after its shared prefix")

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
      if item.gate_positions is not None:  # a prompt position: in the prefix when shared
        self.gates.append(row_index(item.gate_positions[c]))
    else:
      # Token p is predicted from the hidden state at p - 1; the first token has no predictor.
      first = max(item.response_starts[c], 1)
      for p in range(first, len(seq)):
        shared = self.readout == "vocab_loglik" and p == first
        self.readouts.append((FROM_FIRST_TOKEN_DISTRIBUTION if shared else row_index(p - 1),
                              int(seq[p]), owner))


def candidate_offsets(items: Sequence[EncodedItem]) -> np.ndarray:
  """Chunk-wide number of each item's first candidate ([num_items + 1], last = total)."""
  return np.concatenate([[0], np.cumsum([it.num_candidates for it in items])]).astype(np.int64)


def row_length_for(group: Group, buckets: Sequence[int], readout: str,
                   groups_per_row: int = GROUPS_PER_ROW) -> int:
  """The length of the rows a group is packed into: the shortest bucket that holds
  `groups_per_row` groups of its length (and has slots for its readouts), else the longest.
  Attention costs each token work in proportion to its row's length, so short items go into short
  rows rather than all into rows of `max_length` (which would fill as well, but spend most of the
  attention on masked pairs)."""
  reads = group.readouts(readout)
  return next((b for b in buckets if b >= groups_per_row * group.length
               and readout_slots(b, readout, buckets) >= reads), buckets[-1])


def pack_one_group_per_row(items: Sequence[EncodedItem], *, readout: str, row_length: int,
                           chunk: int = 0) -> list[RowWriter]:
  """Rows of `row_length` tokens, one group each: every (causal) item's candidates split into
  groups that fill a row, each repeating the item's shared prefix. A row has a readout slot for
  every token (`Batcher(..., slots=row_length)`). The vocabulary scan's rows."""
  offsets = candidate_offsets(items)
  writers = []
  for slot, item in enumerate(items):
    for group in item_groups(item, slot, row_length, row_length, True, readout):
      writer = RowWriter(row_length, readout, offsets, chunk)
      writer.add(group)
      writers.append(writer)
  return writers


def pack_chunk(items: Sequence[EncodedItem], *, is_causal: bool, readout: str,
               buckets: Sequence[int], chunk: int = 0,
               groups_per_row: int = GROUPS_PER_ROW) -> list[RowWriter]:
  """The rows of one chunk of items, shortest bucket first."""
  if readout not in READOUTS:
    raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
  capacity = buckets[-1]
  offsets = candidate_offsets(items)
  groups = [g for slot, item in enumerate(items)
            for g in item_groups(item, slot, capacity, readout_slots(capacity, readout, buckets),
                                 is_causal, readout)]
  by_row_length: dict[int, list[Group]] = {}
  for group in groups:
    by_row_length.setdefault(row_length_for(group, buckets, readout, groups_per_row),
                             []).append(group)
  # Longest rows first; a shorter group goes into the room a longer row has left before it gets
  # a row of its own length: that room is computed whether it holds tokens or padding.
  rows: list[list[Group]] = []
  free: list[list[int]] = []
  for length in sorted(by_row_length, reverse=True):
    pack_rows(by_row_length[length], length, readout_slots(length, readout, buckets), readout,
              rows, free)
  writers = []
  for row in rows:
    used = sum(g.length for g in row)
    bucket = next(b for b in buckets if b >= used
                  and readout_slots(b, readout, buckets) >= sum(g.readouts(readout) for g in row))
    writer = RowWriter(bucket, readout, offsets, chunk)
    for group in row:
      writer.add(group)
    writers.append(writer)
  return sorted(writers, key=lambda w: len(w.input_ids))  # stable: packing order within a length


class Batcher:
  """Collects rows per bucket and hands out full batches of a fixed shape per bucket.

  Rows of consecutive chunks share batches; `flush(before_chunk)` pads out the batches still
  holding rows of earlier chunks (so no chunk waits for more than the next one), `flush()` all.

  `shrink_last`: the run's last batch of a bucket may have fewer rows (the smallest
  `row_multiple` times a power of two that holds them), while the run's shapes stay within
  `MAX_BUCKETS`. On a CPU a padding row costs as much as a real one and a compilation little; on
  accelerators the opposite, so there the last batch is padded.

  `batch_tokens`: token slots per batch, the run's (`ScoringOptions.batch_tokens`: the
  requested `--tokens_per_batch` as capped on the platform, run.json's `batch_tokens`).
  `slots`: readout slots of every row, whatever its length (default: `readout_slots`).
  `groups_per_row`: the row sizings `pack` tries (`row_length_for`); `attention_length`: its
  cost model (`row_cost`).
  """

  def __init__(self, buckets: Sequence[int], readout: str, batch_tokens: int,
               row_multiple: int = 1, shrink_last: bool = False, slots: int | None = None,
               groups_per_row: Sequence[int] = (GROUPS_PER_ROW,),
               attention_length: int | None = None):
    self.buckets = tuple(buckets)
    self.groups_per_row = tuple(groups_per_row)
    self.attention_length = attention_length
    self.readout = readout
    self.row_multiple = row_multiple
    self.batch_tokens = batch_tokens
    self.rows = {b: rows_per_batch(b, batch_tokens, row_multiple) for b in self.buckets}
    self.pending: dict[int, list[RowWriter]] = {b: [] for b in self.buckets}
    self.shrink_last = shrink_last
    self.slots = slots
    self.shapes: set[tuple[int, int, int]] = set()  # Shapes handed out so far.

  def shape(self, bucket: int) -> tuple[int, int, int]:
    """(rows, row length, readout slots) of every batch of `bucket`."""
    slots = self.slots or readout_slots(bucket, self.readout, self.buckets)
    return self.rows[bucket], bucket, slots

  def row_cost(self, length: int) -> float:
    """A row's cost in token slots of the step's work other than attention: its slots, each also
    attending over the row (`attention_length`: the row length at which that doubles a slot's
    cost; None: not counted)."""
    return length * (1 + length / self.attention_length) if self.attention_length else length

  def pack(self, items: Sequence[EncodedItem], *, is_causal: bool,
           chunk: int = 0) -> list[RowWriter]:
    """One chunk's items as rows of this batcher's lengths (`pack_chunk`), sized for each of
    `groups_per_row` in turn: the packing whose rows cost least (`row_cost`; the first of a tie)."""
    packings = [pack_chunk(items, is_causal=is_causal, readout=self.readout, buckets=self.buckets,
                           chunk=chunk, groups_per_row=g) for g in self.groups_per_row]
    return min(packings, key=lambda rows: sum(self.row_cost(len(w.input_ids)) for w in rows))

  def add(self, writers: Sequence[RowWriter]) -> Iterator[Batch]:
    for writer in writers:
      bucket = len(writer.input_ids)
      self.pending[bucket].append(writer)
      if len(self.pending[bucket]) == self.rows[bucket]:
        yield self._emit(bucket)

  def flush(self, before_chunk: int | None = None) -> Iterator[Batch]:
    """Pads out the batches holding rows of chunks before `before_chunk` (None: every batch).

    A short bucket's rows that would go out in a padded batch are first repacked, whole, into
    rows of the next bucket when those rows still fit its batches without one more: the rows
    left over share fewer padded batches, and no row grows longer for nothing.
    """
    for bucket, longer in zip(self.buckets, self.buckets[1:]):
      pending = self.pending[bucket]
      if not pending or (before_chunk is not None and pending[0].chunk >= before_chunk):
        continue
      full = len(pending) // self.rows[bucket] * self.rows[bucket]
      leftover = pending[full:]
      plan = self._first_fit(leftover, self.pending[longer], longer)
      rows_after = len(self.pending[longer]) + sum(target is None for _, target in plan)
      if leftover and -(-rows_after // self.rows[longer]) == -(-len(self.pending[longer])
                                                            // self.rows[longer]):
        self.pending[bucket] = pending[:full]
        self._apply(plan, longer)
    for bucket in self.buckets:
      while len(self.pending[bucket]) >= self.rows[bucket]:
        yield self._emit(bucket)
      pending = self.pending[bucket]
      if pending and (before_chunk is None or pending[0].chunk < before_chunk):
        yield self._emit(bucket, last=before_chunk is None)

  def _first_fit(self, rows: Sequence[RowWriter], into: Sequence[RowWriter], length: int):
    """Where each of `rows` goes, whole, among rows of `length` of its chunk (first-fit
    decreasing; `into` are that length's pending rows): [(row, index into the result rows or
    None for a new row)]. Nothing is changed."""
    slots = self.shape(length)[2]
    space = [(t.chunk, length - t.used, slots - len(t.readouts)) for t in into]
    plan = []
    for row in sorted(rows, key=lambda r: -r.used):
      fits = next((i for i, (chunk, room, read_room) in enumerate(space) if chunk == row.chunk
                   and row.used <= room and len(row.readouts) <= read_room), None)
      if fits is None:
        space.append((row.chunk, length, slots))
        fits = len(space) - 1
        plan.append((row, None))
      else:
        plan.append((row, fits))
      chunk, room, read_room = space[fits]
      space[fits] = (chunk, room - row.used, read_room - len(row.readouts))
    return plan

  def _apply(self, plan, length: int) -> None:
    targets = self.pending[length]
    for row, index in plan:
      if index is None:
        targets.append(RowWriter(length, self.readout, row.candidate_offsets, row.chunk))
        index = len(targets) - 1
      targets[index].append_row(row)

  def _emit(self, bucket: int, last: bool = False) -> Batch:
    rows, length, slots = self.shape(bucket)
    writers, self.pending[bucket] = self.pending[bucket][:rows], self.pending[bucket][rows:]
    if last and self.shrink_last:
      fewer = self.row_multiple
      while fewer < len(writers):
        fewer *= 2
      fewer = min(fewer, rows)
      if (fewer, length, slots) in self.shapes or len(self.shapes) < MAX_BUCKETS:
        rows = fewer
    self.shapes.add((rows, length, slots))
    return stack_rows(writers, rows, length, slots)



def make_batches(items: Sequence[EncodedItem], *, is_causal: bool, readout: str,
                 buckets: Sequence[int], batch_tokens: int,
                 row_multiple: int = 1) -> Iterator[Batch]:
  """Packs `items` (one chunk) into batches, shortest bucket first."""
  batcher = Batcher(buckets, readout, batch_tokens, row_multiple)
  yield from batcher.add(batcher.pack(items, is_causal=is_causal))
  yield from batcher.flush()


def stack_rows(writers: Sequence[RowWriter], num_rows: int, length: int, slots: int) -> Batch:
  """[num_rows, length] arrays from `writers`' rows, then empty (padding) rows."""
  fields = {name: np.zeros((num_rows, length), np.int32)
            for name in ("input_ids", "positions", "segment_ids", "branch_ids", "token_type_ids")}
  readout_index = np.zeros((num_rows, slots), np.int32)
  readout_target = np.full((num_rows, slots), EMPTY_TARGET, np.int32)
  readout_owner = np.full((num_rows, slots), -1, np.int64)
  row_chunk = np.full((num_rows,), -1, np.int32)
  first_token_index = np.zeros((num_rows,), np.int32)
  # Only a gated head's rows carry gates; other batches have no such array at all.
  gate_index = (np.zeros((num_rows, slots), np.int32) if any(w.gates for w in writers)
                else None)
  for r, w in enumerate(writers):
    for name, array in fields.items():
      array[r] = getattr(w, name)
    row_chunk[r] = w.chunk
    first_token_index[r] = w.first_token_index
    if w.readouts:
      index, target, owner = zip(*w.readouts)
      n = len(index)
      readout_index[r, :n], readout_target[r, :n], readout_owner[r, :n] = index, target, owner
    if gate_index is not None:
      gate_index[r, :len(w.gates)] = w.gates
  real = int(sum(w.used for w in writers))
  return Batch(**fields, readout_index=readout_index, readout_target=readout_target,
               readout_owner=readout_owner, row_chunk=row_chunk, real_tokens=real,
               first_token_index=first_token_index, gate_index=gate_index)
