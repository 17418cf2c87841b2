"""Progress lines through absl logging: items, pairs/s (items/s where no item has a pair),
tokens/s, ETA."""

from __future__ import annotations

import time

from absl import logging

LOG_EVERY_SECONDS = 10.0


class Progress:
  """Counts what is done and logs a line at most every `every` seconds (and at the end)."""

  def __init__(self, total_items: int, *, every: float = LOG_EVERY_SECONDS, prefix: str = ""):
    self.total_items = total_items
    self.every = every
    self.prefix = prefix
    self.start = time.monotonic()
    self.last_log = self.start
    self.items = self.pairs = self.tokens = 0
    self.skipped_items = 0

  def skip(self, items: int) -> None:
    """Items already scored by an earlier run (resume): done, but not timed."""
    self.skipped_items += items

  def update(self, items: float, pairs: float, tokens: int) -> None:
    """Adds finished work (items and pairs may be fractions: a share of a chunk's batches)."""
    self.items += items
    self.pairs += pairs
    self.tokens += tokens
    if time.monotonic() - self.last_log >= self.every:
      self.log()

  def log(self) -> None:
    now = time.monotonic()
    self.last_log = now
    logging.info("%s%s", self.prefix, self.line(now))

  def line(self, now: float | None = None) -> str:
    elapsed = max((now or time.monotonic()) - self.start, 1e-9)
    done = self.items + self.skipped_items
    left = self.total_items - done
    rate = self.items / elapsed
    eta = f"{left / rate:.0f}s" if rate > 0 else "?"
    # Items of one candidate (a vocabulary scan's tokens, a reward table's rows) form no pair.
    speed = f"{self.pairs / elapsed:.1f} pairs/s" if self.pairs else f"{rate:.1f} items/s"
    return (f"items {done:.0f}/{self.total_items} | {speed} | "
            f"{self.tokens / elapsed:.0f} tokens/s | ETA {eta}")
