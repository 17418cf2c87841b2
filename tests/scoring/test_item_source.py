"""The items a run reads, streamed: the same selection, identity and chunks as the list, read from
a table in batches, with unknown datasets and repeated ids refused before any work."""

from __future__ import annotations

import pytest

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.scoring import item_source, shards


def _items(n: int) -> list[dict]:
  return [{"item_id": f"i{k}", "dataset": "bbq" if k % 3 else "xstest",
           "prompt": [{"role": "user", "content": f"q{k}"}], "candidates": [f"a{k}", f"b{k}"]}
          for k in range(n)]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_table_streams_the_selection_the_list_gives(tmp_path, fmt, monkeypatch):
  rows = _items(50)
  tables.write_rows(tmp_path / f"items.{fmt}", rows, fmt)
  monkeypatch.setattr(tables, "BATCH_ROWS", 7)  # several read batches
  source = item_source.ItemSource.from_table(tmp_path, ["bbq"], 20)
  expected = [r for r in rows if r["dataset"] == "bbq"][:20]
  assert [it["item_id"] for it in source] == [r["item_id"] for r in expected]
  assert len(source) == 20 and source.first["item_id"] == expected[0]["item_id"]
  assert source.identity == shards.items_identity(expected)
  chunks = list(source.chunks(6, {0, 3}))
  assert [(n, [it["item_id"] for it in chunk]) for n, chunk in chunks] == [
      (0, [r["item_id"] for r in expected[:6]]), (3, [r["item_id"] for r in expected[18:]])]
  assert [it["item_id"] for it in source.take([19, 2])] == [expected[2]["item_id"],
                                                            expected[19]["item_id"]]


def test_unknown_datasets_and_repeated_ids_are_refused():
  with pytest.raises(InputError, match="--datasets names nope"):
    item_source.ItemSource.from_rows(_items(5), ["nope"])
  rows = _items(5) + [_items(5)[3]]
  with pytest.raises(InputError, match="duplicate item_id.*'i3'"):
    item_source.ItemSource.from_rows(rows)
  # The first 5 have no repeat: a limit that stops before it accepts them.
  assert len(item_source.ItemSource.from_rows(rows, limit=5)) == 5
