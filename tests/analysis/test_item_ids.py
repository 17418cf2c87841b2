"""Item ids in compact arrays (`IdArray`) and found by hash (`IdIndex`): exact whatever the
hashes, and repeated ids named by their second row."""

import numpy as np
import pytest

from socialrm_jax.analysis.tables import item_ids
from socialrm_jax.analysis.tables.item_ids import IdArray, IdIndex

IDS = ["bbq/Religion/1", "", "é/ü ٱلعربية", "x" * 40, "b"]


def test_an_id_array_reads_like_an_array_of_strings():
  ids = IdArray.of(IDS)
  assert (ids.size, len(ids), list(ids), ids[2], ids[-1]) == (5, 5, IDS, IDS[2], "b")
  assert ids[1:3].tolist() == IDS[1:3] and ids[1:3][1] == IDS[2]
  assert ids[np.array([4, 0])].tolist() == ["b", IDS[0]]
  assert ids[np.array([True, False, True, False, False])].tolist() == [IDS[0], IDS[2]]
  both = IdArray.concatenate([ids, ids[3:]])
  assert both.tolist() == IDS + IDS[3:]
  assert ids.matches(np.array([0, 1, 3, 3]), [IDS[0], "", "x" * 39 + "y", "x" * 40]).tolist() == [
      True, True, False, True]
  assert IdArray.of([]).tolist() == [] and IdArray.concatenate([]).size == 0


def test_positions_are_exact_when_every_id_shares_a_hash(monkeypatch):
  # One hash for all: every look-up walks the run of equal hashes and compares the strings.
  monkeypatch.setattr(item_ids, "_hashes", lambda ids: np.zeros(len(ids), np.int64))
  index = IdIndex.of(IdArray.of(IDS))
  assert index.positions(["b", IDS[2], "", "nope", "x" * 40, IDS[0]]).tolist() == [
      4, 2, 1, -1, 3, 0]
  assert index.first_repeat() is None


@pytest.mark.parametrize("same_hash", [False, True])
def test_the_first_repeated_id_is_its_second_row(monkeypatch, same_hash):
  if same_hash:
    monkeypatch.setattr(item_ids, "_hashes", lambda ids: np.zeros(len(ids), np.int64))
  ids = IdArray.of(["a", "b", "c", "b", "a"])
  assert IdIndex.of(ids).first_repeat() == 3  # "b" again at row 4, before "a" at row 5
