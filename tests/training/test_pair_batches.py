"""A step's pairs packed into blocks of rows (`pair_batches.pack_pairs`), on a hand-laid case:
first-fit with the longest pairs first, a row's pair slots, a long pair in a longer row of its
own, blocks of a few fixed shapes, and the readouts where each response ends."""

import numpy as np
import pytest

from socialrm_jax.base.errors import InputError
from socialrm_jax.scoring.item_tokens import EncodedItem
from socialrm_jax.training import pair_batches


def pair(name: str, prompt: int, chosen: int, rejected: int) -> EncodedItem:
  """A pair of `prompt` shared tokens, then responses of the given lengths that differ from
  their first token."""
  shared = list(range(10, 10 + prompt))
  sequences = (np.array(shared + [100] * chosen, np.int32),
               np.array(shared + [200] * rejected, np.int32))
  return EncodedItem(0, name, sequences, (prompt, prompt), None, 0)


# Packed lengths 10, 6, 5, 14, 40.
PAIRS = [pair("a", 4, 3, 3), pair("b", 2, 2, 2), pair("c", 3, 1, 1), pair("e", 8, 3, 3),
         pair("d", 10, 20, 10)]
MARGINS = [0.1, 0.2, 0.3, 0.4, 0.5]


def test_pairs_fill_rows_longest_first_and_a_long_pair_gets_a_longer_row():
  assert [pair_batches.pair_length(p) for p in PAIRS] == [10, 6, 5, 14, 40]
  assert pair_batches.pair_slots(32) == 2
  blocks = pair_batches.pack_pairs(PAIRS, MARGINS, buckets=(32, 64), row_length=32,
                                   rows_per_block=1)
  # Rows of 32: e (14) then a (10) fill the first row's two slots; b and c the second. d (40)
  # needs a row of 64, alone.
  assert [b.input_ids.shape for b in blocks] == [(1, 32), (1, 32), (1, 64)]
  first = blocks[0]
  np.testing.assert_array_equal(first.segment_ids[0], [1] * 14 + [2] * 10 + [0] * 8)
  # e: prompt 0..7, chosen 8..10, rejected 11..13; a after it from 14: prompt 14..17, chosen
  # 18..20, rejected 21..23. Each reward is read at its response's last token.
  np.testing.assert_array_equal(first.readout_index[0], [[10, 13], [20, 23]])
  np.testing.assert_array_equal(first.positions[0, :14], list(range(11)) + [8, 9, 10])
  np.testing.assert_array_equal(first.branch_ids[0, :14], [0] * 8 + [1] * 3 + [2] * 3)
  np.testing.assert_allclose(first.margin[0], [0.4, 0.1])
  np.testing.assert_array_equal(first.weight[0], [1, 1])
  np.testing.assert_allclose(blocks[1].margin[0], [0.2, 0.3])
  last = blocks[2]
  assert last.readout_index.shape == (1, 4, 2)
  np.testing.assert_array_equal(last.readout_index[0, 0], [29, 39])
  np.testing.assert_array_equal(last.weight[0], [1, 0, 0, 0])
  assert sum(b.packed_tokens for b in blocks) == 75
  assert sum(b.sequence_tokens for b in blocks) == sum(len(s) for p in PAIRS
                                                       for s in p.sequences)


def test_blocks_take_several_rows_in_a_few_fixed_shapes():
  blocks = pair_batches.pack_pairs(PAIRS, MARGINS, buckets=(32, 64), row_length=32,
                                   rows_per_block=4)
  assert [b.input_ids.shape for b in blocks] == [(2, 32), (1, 64)]
  assert [pair_batches.block_rows(n, 8, 1) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
  # On a data axis of 2, every block's rows split evenly over it; empty rows weigh nothing.
  assert [pair_batches.block_rows(n, 4, 2) for n in (1, 3, 4)] == [2, 4, 4]
  blocks = pair_batches.pack_pairs(PAIRS, MARGINS, buckets=(32, 64), row_length=32,
                                   rows_per_block=4, row_multiple=2)
  assert [b.input_ids.shape for b in blocks] == [(2, 32), (2, 64)]
  assert blocks[1].weight[1].sum() == 0 and blocks[1].segment_ids[1].sum() == 0


def test_a_pair_longer_than_the_longest_row_is_refused_by_name():
  with pytest.raises(InputError, match="pair 'd': 40 packed tokens"):
    pair_batches.pack_pairs(PAIRS, MARGINS, buckets=(32,), row_length=32, rows_per_block=1)


def test_tokens_per_block_gives_a_blocks_rows_a_multiple_of_the_data_axis():
  # Twenty pairs of 10 packed tokens, two to a row of 32 (its two pair slots): ten rows.
  pairs = [pair(f"p{i}", 4, 3, 3) for i in range(20)]
  layout = pair_batches.pair_packing(32, 32, "cpu", 2, tokens_per_block=256)  # 8 rows of 32
  assert layout["rows_per_block"] == 8
  blocks = pair_batches.pack_pairs(pairs, [0.0] * 20, **layout)
  assert [b.input_ids.shape for b in blocks] == [(8, 32), (2, 32)]
  # 7 rows' worth rounds down to 6, a multiple of the data axis of 2; 2 rows' worth is one a device.
  assert pair_batches.pair_packing(32, 32, "cpu", 2, tokens_per_block=224)["rows_per_block"] == 6
  assert pair_batches.rows_per_block("tpu", 32, 2, tokens_per_block=64) == 2
  # 0: the default rule, one row a device on a CPU, the scorer's default batch elsewhere.
  assert pair_batches.rows_per_block("cpu", 32, 2) == 2
  assert pair_batches.rows_per_block("gpu", 512, 8) == 32


@pytest.mark.parametrize("tokens", [63, -1])
def test_a_block_of_less_than_a_row_a_device_is_refused_naming_the_flag(tokens):
  with pytest.raises(InputError, match=rf"^--tokens_per_block={tokens}: a block holds at least "
                     r"one row of --row_length=32 for each of the 2 devices of the data axis, 64 "):
    pair_batches.pair_packing(32, 32, "cpu", 2, tokens_per_block=tokens)
