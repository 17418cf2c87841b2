"""Packed rows show each readout exactly the tokens of its own full sequence."""

import numpy as np
import pytest

from socialrm_jax.models import attention
from socialrm_jax.scoring import item_tokens, packing
from tests.helpers import scoring_fixtures as fx


@pytest.fixture(scope="module")
def encoded_items(tmp_path_factory):
  folder = tmp_path_factory.mktemp("chat_tok")
  fx.train_chat_tokenizer(folder)
  templater = item_tokens.Templater(item_tokens.load_tokenizer(folder), is_causal=True,
                                    max_length=128)
  return [templater.encode(i, item) for i, item in enumerate(fx.all_items())]


def _visible(batch, row, index, is_causal):
  layout = attention.Layout(batch.segment_ids, batch.branch_ids, is_causal)
  mask = np.asarray(attention.dense_mask(layout))
  keys = np.nonzero(mask[row, index])[0]
  return batch.input_ids[row, keys], batch.positions[row, keys]


def _owners(items):
  offsets = packing.candidate_offsets(items)
  return {int(offsets[s]) + c: (item, c) for s, item in enumerate(items)
          for c in range(item.num_candidates)}


@pytest.mark.parametrize("buckets", [(64, 128), (128,)])
def test_score_readouts_see_exactly_their_full_sequence(encoded_items, buckets):
  owners = _owners(encoded_items)
  seen = set()
  for batch in packing.make_batches(encoded_items, is_causal=True, readout="score",
                                    buckets=buckets, batch_tokens=256):
    for row, slot in zip(*np.nonzero(batch.readout_owner >= 0)):
      item, c = owners[int(batch.readout_owner[row, slot])]
      ids, positions = _visible(batch, row, batch.readout_index[row, slot], True)
      np.testing.assert_array_equal(ids, item.sequences[c])
      np.testing.assert_array_equal(positions, np.arange(len(item.sequences[c])))
      seen.add(int(batch.readout_owner[row, slot]))
  assert seen == set(owners)


def test_loglik_readouts_cover_each_response_token_once(encoded_items):
  owners = _owners(encoded_items)
  targets = {o: [] for o in owners}
  for batch in packing.make_batches(encoded_items, is_causal=True, readout="loglik",
                                    buckets=(128,), batch_tokens=512):
    for row, slot in zip(*np.nonzero(batch.readout_owner >= 0)):
      owner = int(batch.readout_owner[row, slot])
      item, c = owners[owner]
      ids, positions = _visible(batch, row, batch.readout_index[row, slot], True)
      p = len(ids)  # The readout sees tokens 0..p-1 and predicts token p.
      np.testing.assert_array_equal(ids, item.sequences[c][:p])
      assert batch.readout_target[row, slot] == item.sequences[c][p]
      targets[owner].append(p)
  for owner, (item, c) in owners.items():
    assert sorted(targets[owner]) == list(range(item.response_starts[c], len(item.sequences[c])))


def test_prefix_is_shared_and_rows_are_packed(encoded_items):
  batches = list(packing.make_batches(encoded_items, is_causal=True, readout="score",
                                      buckets=(256,), batch_tokens=256 * 2))
  naive = sum(len(s) for item in encoded_items for s in item.sequences)
  computed = sum(b.real_tokens for b in batches)
  prefixes = sum(packing.shared_prefix_length(item, True) * (item.num_candidates - 1)
                 for item in encoded_items)
  assert computed == naive - prefixes
  assert computed < 0.6 * naive
  rows_used = sum(int((b.segment_ids.max(axis=1) > 0).sum()) for b in batches)
  assert rows_used < len(encoded_items)  # Several items share a row.


def test_long_items_split_over_groups_that_repeat_the_prefix(encoded_items):
  item = max(encoded_items, key=lambda it: sum(len(s) for s in it.sequences))
  longest = max(len(s) for s in item.sequences)
  groups = packing.item_groups(item, 0, capacity=longest + 2, readout_capacity=64,
                               is_causal=True, readout="score")
  assert len(groups) > 1
  assert sorted(c for g in groups for c in g.candidates) == list(range(item.num_candidates))
  assert all(g.length <= longest + 2 for g in groups)


def test_encoder_segments_are_whole_and_bidirectional(tmp_path):
  fx.train_encoder_tokenizer(tmp_path)
  templater = item_tokens.Templater(item_tokens.load_tokenizer(tmp_path), is_causal=False,
                                    max_length=128)
  items = [templater.encode(i, item) for i, item in enumerate(fx.bbq_items())]
  owners = _owners(items)
  for batch in packing.make_batches(items, is_causal=False, readout="score", buckets=(128,),
                                    batch_tokens=256):
    for row, slot in zip(*np.nonzero(batch.readout_owner >= 0)):
      item, c = owners[int(batch.readout_owner[row, slot])]
      index = batch.readout_index[row, slot]
      ids, positions = _visible(batch, row, index, False)
      np.testing.assert_array_equal(ids, item.sequences[c])
      assert positions[0] == 0 and batch.input_ids[row, index] == item.sequences[c][0]
      keys = batch.segment_ids[row] == batch.segment_ids[row, index]
      np.testing.assert_array_equal(batch.token_type_ids[row, keys], item.token_type_ids[c])


def test_bucket_shapes_are_few_and_fixed():
  assert packing.length_buckets(1024) == (128, 256, 512, 1024)
  assert packing.length_buckets(600) == (128, 256, 512, 600)
  assert packing.length_buckets(4096) == (512, 1024, 2048, 4096)  # At most MAX_BUCKETS.
  assert packing.length_buckets(64) == (64,)
  assert packing.rows_per_batch(128, 4096, 8) == 32
  assert packing.rows_per_batch(2048, 4096, 8) == 8
  buckets = (128, 256)
  assert packing.readout_slots(128, "score", buckets) == 16
  assert packing.readout_slots(128, "loglik", buckets) == 64
  assert packing.readout_slots(256, "loglik", buckets) == 256  # The longest: a slot a token.
  mask = np.asarray(attention.dense_mask(attention.Layout(np.zeros((1, 4), np.int32),
                                                          np.zeros((1, 4), np.int32), True)))
  np.testing.assert_array_equal(mask[0], np.eye(4, dtype=bool))


def _items(n, first=0, length=40):
  """Items of two candidates: `length - 2` shared tokens, branches of 1 and 2 tokens."""
  return [item_tokens.EncodedItem(i, f"it{i}", (np.arange(1, length), np.arange(1, length + 1)),
                                  (5, 5), None, 0) for i in range(first, first + n)]


def test_partial_batches_are_padded_to_the_bucket_shape():
  buckets = (128, 256)
  batcher = packing.Batcher(buckets, "score", batch_tokens=1024, row_multiple=2)
  writers = packing.pack_chunk(_items(9, length=25), is_causal=True, readout="score",
                               buckets=buckets)
  assert {len(w.input_ids) for w in writers} == {128}
  batches = list(batcher.add(writers)) + list(batcher.flush())
  shapes = {(*batcher.shape(b)[:2],) for b in buckets}
  assert batches and all(b.input_ids.shape in shapes for b in batches)
  assert all(b.readout_index.shape[1] == batcher.shape(b.input_ids.shape[1])[2] for b in batches)
  last = batches[-1]
  assert (last.row_chunk == -1).any() and (last.segment_ids[last.row_chunk == -1] == 0).all()
  assert sum(b.real_tokens for b in batches) == sum(w.used for w in writers)


def test_leftover_short_rows_are_repacked_whole_into_longer_rows():
  """At a flush, rows of a short bucket that would fill a padded batch of their own move, whole,
  into the next bucket's padded batch (each keeping its own segments and readouts)."""
  buckets = (128, 256)
  batcher = packing.Batcher(buckets, "score", batch_tokens=128 * 8)
  # Groups of 27 tokens (four to a 128-long row) and of 122 (two fill a 256-long row, leaving no
  # room for a group of 27).
  items = _items(9, length=25) + _items(2, first=9, length=120)
  writers = packing.pack_chunk(items, is_causal=True, readout="score", buckets=buckets)
  assert sorted(len(w.input_ids) for w in writers) == [128, 128, 128, 256]
  real = sum(w.used for w in writers)
  assert not list(batcher.add(writers))
  (batch,) = list(batcher.flush())
  assert batch.input_ids.shape == (4, 256)  # One padded batch, not one of each length.
  assert int((batch.row_chunk >= 0).sum()) == 2
  assert batch.real_tokens == real
  owners = sorted(batch.readout_owner[batch.readout_owner >= 0].tolist())
  assert owners == list(range(2 * len(items)))
  for row in range(2):
    segments = batch.segment_ids[row][batch.segment_ids[row] > 0]
    assert list(np.unique(segments)) == list(range(1, segments.max() + 1))
    index = batch.readout_index[row][batch.readout_owner[row] >= 0]
    assert (batch.segment_ids[row, index] > 0).all()


def test_short_groups_fill_the_room_long_rows_leave_before_rows_of_their_own():
  """A group of 160 tokens takes a 256-long row; two of 27 fill its room (computed anyway)
  instead of a 128-long row of their own."""
  items = _items(1, length=159) + _items(2, first=1, length=26)
  writers = packing.pack_chunk(items, is_causal=True, readout="score", buckets=(128, 256))
  assert [(len(w.input_ids), w.used) for w in writers] == [(256, 160 + 2 * 27)]


def test_pack_keeps_the_row_sizing_that_costs_least():
  """Of rows sized for 1, 2 and 4 groups, the cheapest under the CPU's cost model (a slot of a
  T-long row costs 1 + T / 1024): 70-token groups all alike go 7 to a 512-long row and the last
  into a 128-long one (cost 768 + 144), rather than one to a 128-long row (8 x 144) or three to a
  256-long row (3 x 320)."""
  buckets = (128, 256, 512)
  batcher = packing.Batcher(buckets, "score", 4096, groups_per_row=(1, 2, 4),
                            attention_length=1024)
  assert batcher.row_cost(512) == 512 * 1.5
  alike = _items(8, length=69)
  cost = {g: sum(batcher.row_cost(len(w.input_ids)) for w in packing.pack_chunk(
      alike, is_causal=True, readout="score", buckets=buckets, groups_per_row=g)) for g in (1, 2, 4)}
  assert cost == {1: 8 * 144, 2: 3 * 320, 4: 768 + 144}
  assert [len(w.input_ids) for w in batcher.pack(alike, is_causal=True)] == [128, 512]
  # Lengths that vary: one group a row, the short groups in the long rows' room.
  varied = _items(2, length=300) + _items(6, first=2, length=60)
  assert [len(w.input_ids) for w in batcher.pack(varied, is_causal=True)] == [512, 512]


def test_rows_of_consecutive_chunks_share_batches():
  buckets = (128,)
  batcher = packing.Batcher(buckets, "score", batch_tokens=128 * 4)
  first = packing.pack_chunk(_items(3), is_causal=True, readout="score", buckets=buckets, chunk=0)
  second = packing.pack_chunk(_items(9, 3), is_causal=True, readout="score", buckets=buckets,
                              chunk=1)
  assert len(first) < 4  # Chunk 0 alone does not fill a batch ...
  assert not list(batcher.add(first))
  assert not list(batcher.flush(before_chunk=0))
  mixed = list(batcher.add(second))  # ... chunk 1's rows complete it.
  assert len(mixed) == 1 and set(mixed[0].row_chunk.tolist()) == {0, 1}
  assert mixed[0].chunk_tokens()[0] == sum(w.used for w in first)
  rest = list(batcher.flush(before_chunk=2)) + list(batcher.flush())
  assert sum(len(b.row_chunk[b.row_chunk >= 0]) for b in mixed + rest) == len(first) + len(second)


def test_readout_slots_bound_the_rows_groups():
  """A row never holds more readouts than its bucket's slots: loglik rows fill up on response
  tokens, and a group with more than a short row's slots goes to a longer row."""
  items = [item_tokens.EncodedItem(i, f"it{i}", (np.arange(1, 90), np.arange(1, 91)), (10, 10),
                                   None, 0) for i in range(6)]
  buckets = (128, 256, 512)
  for batch in packing.make_batches(items, is_causal=True, readout="loglik", buckets=buckets,
                                    batch_tokens=1024):
    length, slots = batch.input_ids.shape[1], batch.readout_index.shape[1]
    assert slots == packing.readout_slots(length, "loglik", buckets)
    assert ((batch.readout_owner >= 0).sum(axis=1) <= slots).all()


def test_short_items_go_into_short_rows():
  """Attention work per token grows with the row's length: groups are packed into the shortest
  bucket that holds GROUPS_PER_ROW of them, and only long ones into rows of max_length."""
  buckets = packing.length_buckets(1024)  # 128, 256, 512, 1024
  per_row = packing.GROUPS_PER_ROW

  def group(length):
    item = item_tokens.EncodedItem(0, "x", (np.arange(1, length + 1),), (length - 1,), None, 0)
    return packing.Group(item, 0, (0,), length - 1)

  assert packing.row_length_for(group(100), buckets, "score") == next(
      b for b in buckets if b >= per_row * 100)
  assert packing.row_length_for(group(30), buckets, "score") == 128
  assert packing.row_length_for(group(900), buckets, "score") == 1024
  # Sized for one group a row, a 300-token group gets a 512-long row, not 1024.
  assert packing.row_length_for(group(300), buckets, "score") == 1024
  assert packing.row_length_for(group(300), buckets, "score", groups_per_row=1) == 512
  items = _items(8)
  batches = list(packing.make_batches(items, is_causal=True, readout="score", buckets=buckets,
                                      batch_tokens=4096))
  assert {b.input_ids.shape[1] for b in batches} <= {128, 256}
  # Each item: a 38-token shared prefix (each candidate keeps its last token), branches of 1 and 2.
  assert sum(b.real_tokens for b in batches) == 8 * (38 + 1 + 2)


def test_last_batch_shrinks_only_within_the_shape_budget():
  buckets = (128, 256)
  items = _items(9, length=25) + _items(2, first=9, length=80)
  padded = packing.Batcher(buckets, "score", batch_tokens=128 * 8, shrink_last=False)
  shrunk = packing.Batcher(buckets, "score", batch_tokens=128 * 8, shrink_last=True)
  out = {}
  for name, batcher in (("padded", padded), ("shrunk", shrunk)):
    writers = packing.pack_chunk(items, is_causal=True, readout="score", buckets=buckets)
    out[name] = list(batcher.add(writers)) + list(batcher.flush())
  assert out["padded"][-1].input_ids.shape == (4, 256)
  assert out["shrunk"][-1].input_ids.shape == (2, 256)  # Its two real rows, no padding rows.
  # With MAX_BUCKETS shapes already handed out, the last batch takes a known one.
  full = packing.Batcher(buckets, "score", batch_tokens=128 * 8, shrink_last=True)
  full.shapes = {(r, 999, 1) for r in range(packing.MAX_BUCKETS)}
  writers = packing.pack_chunk(items, is_causal=True, readout="score", buckets=buckets)
  batches = list(full.add(writers)) + list(full.flush())
  assert batches[-1].input_ids.shape == (4, 256)
