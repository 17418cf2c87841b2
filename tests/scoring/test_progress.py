"""Progress lines: pairs/s where items have pairs, items/s where none has (a vocabulary scan)."""

from socialrm_jax.scoring import progress


def test_line_gives_pairs_per_second_for_pairs():
  tracker = progress.Progress(10, every=1e9)
  tracker.start = 0.0
  tracker.update(items=4, pairs=6, tokens=100)
  assert tracker.line(now=2.0) == "items 4/10 | 3.0 pairs/s | 50 tokens/s | ETA 3s"


def test_line_gives_items_per_second_without_pairs():
  tracker = progress.Progress(10, every=1e9)
  tracker.start = 0.0
  tracker.skip(2)
  tracker.update(items=4, pairs=0, tokens=100)
  assert tracker.line(now=2.0) == "items 6/10 | 2.0 items/s | 50 tokens/s | ETA 2s"
