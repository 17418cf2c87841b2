"""Preference pairs as packed training batches: chosen and rejected share their prompt in one row.

Each pair is one item of two candidates (chosen, rejected) encoded by the scorer's own `Templater`
(`scoring/item_tokens.py`), then laid out by the scorer's `packing.RowWriter` as one prefix-shared
group: the templated prompt once, then the chosen branch, then the rejected branch. The reward of
each candidate is read where the scorer reads it, at its sequence's last token, so the prompt's
tokens are computed once a pair (TRL computes both full sequences).

A batch holds `batch_size` pairs, one a row, in rows of one of at most `packing.MAX_BUCKETS`
lengths (`packing.length_buckets`), so the train step compiles a few programs, once each. A batch
short of pairs (the end of an epoch is never one: epochs are cut to whole batches) does not occur;
the evaluation's last batch is padded with empty rows, weighted 0.

`check_reading_token` refuses, with one line, data whose reward would be read inside the prompt:
a template that drops the response (the read token lies before the response), or a pad token that
is also the last token of a conversation (transformers' sequence classifiers read the last token
that is not the pad token: with pad == eos, Llama 3's `<|eot_id|>` after every turn, TRL's reward
models read the prompt and their loss stayed at ln 2).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from socialrm_jax.base.errors import InputError
from socialrm_jax.scoring import packing
from socialrm_jax.scoring.item_tokens import EncodedItem, Templater

# Fields of a batch, all [B, T] int32 but the readouts [B, 2] and the per-pair [B] arrays.
TOKEN_FIELDS = ("input_ids", "positions", "segment_ids", "branch_ids")


@dataclasses.dataclass(frozen=True)
class Pair:
  """One preference pair to train on: its id, conversation and optional TRL `margin`."""
  pair_id: str
  prompt: list[dict]
  chosen: str
  rejected: str
  margin: float = 0.0


def encode_pairs(templater: Templater, pairs: Sequence[Pair],
                 chunk: int = 256) -> list[EncodedItem]:
  """Each pair as an item of two candidates (chosen, rejected), through the scorer's templater."""
  encoded = []
  for start in range(0, len(pairs), chunk):
    items = [{"item_id": p.pair_id, "prompt": p.prompt, "candidates": [p.chosen, p.rejected]}
             for p in pairs[start:start + chunk]]
    encoded.extend(templater.encode_many(start, items))
  return encoded


def check_reading_token(encoded: Sequence[EncodedItem], pad_token_id: int | None,
                        pad_token: str | None) -> None:
  """Refuses pairs whose reward would be read inside the prompt (see the module docstring)."""
  for item in encoded:
    for c, (seq, start) in enumerate(zip(item.sequences, item.response_starts)):
      role = ("chosen", "rejected")[c]
      if start >= len(seq):
        raise InputError(f"pair {item.item_id!r}: the chat template renders the {role} "
                         "conversation with no response token after the prompt, so its reward "
                         "would be read inside the prompt; use a template that keeps the response")
      if pad_token_id is not None and int(seq[-1]) == pad_token_id:
        non_pad = np.flatnonzero(np.asarray(seq) != pad_token_id)
        where = "inside the prompt" if not len(non_pad) or non_pad[-1] < start else (
            "before the response's end")
        raise InputError(
            f"pair {item.item_id!r}: the templated {role} conversation ends with the pad token "
            f"{pad_token!r} (id {pad_token_id}), so a sequence classifier reading the last "
            f"non-pad token would read {where}, not where the scorer reads (the pad == eos "
            "failure that kept TRL's Llama 3 reward models at loss ln 2); set --pad_token_id to "
            "a token that no conversation ends with")


def pair_length(item: EncodedItem) -> int:
  """Tokens of the pair's packed group: the shared prefix once, then both branches."""
  prefix = packing.shared_prefix_length(item, True)
  return prefix + sum(len(s) - prefix for s in item.sequences)


@dataclasses.dataclass
class PairBatch:
  """Host arrays for one step: [B, T] tokens, [B, 2] readouts (chosen, rejected), [B] margins
  and weights (1 a real pair, 0 a padding row), and the real tokens counted as TRL counts them
  (both full sequences, the prompt twice)."""
  input_ids: np.ndarray
  positions: np.ndarray
  segment_ids: np.ndarray
  branch_ids: np.ndarray
  readout_index: np.ndarray
  margin: np.ndarray
  weight: np.ndarray
  packed_tokens: int
  sequence_tokens: int

  def arrays(self) -> dict[str, np.ndarray]:
    return {name: getattr(self, name) for name in (*TOKEN_FIELDS, "readout_index", "margin",
                                                   "weight")}


def row_length(items: Sequence[EncodedItem], buckets: Sequence[int]) -> int:
  longest = max(pair_length(it) for it in items)
  for bucket in buckets:
    if bucket >= longest:
      return bucket
  raise InputError(f"pair {items[0].item_id!r}: {longest} packed tokens, over --max_length "
                   f"rows of {buckets[-1]}")


def make_batch(items: Sequence[EncodedItem], margins: Sequence[float], rows: int,
               buckets: Sequence[int]) -> PairBatch:
  """`items` (at most `rows` pairs) packed one pair a row, in the shortest bucket that holds them;
  rows beyond them are padding (weight 0)."""
  length = row_length(items, buckets)
  fields = {name: np.zeros((rows, length), np.int32) for name in TOKEN_FIELDS}
  readout_index = np.zeros((rows, 2), np.int32)
  margin = np.zeros((rows,), np.float32)
  weight = np.zeros((rows,), np.float32)
  offsets = packing.candidate_offsets(items[:1])
  packed = sequence_tokens = 0
  for r, item in enumerate(items):
    group = packing.Group(item, 0, (0, 1), packing.shared_prefix_length(item, True))
    writer = packing.RowWriter(length, "score", offsets)
    writer.add(group)
    for name, array in fields.items():
      array[r] = getattr(writer, name)
    readout_index[r] = [index for index, _, _ in writer.readouts]  # chosen, then rejected
    margin[r], weight[r] = margins[r], 1.0
    packed += writer.used
    sequence_tokens += sum(len(s) for s in item.sequences)
  return PairBatch(**fields, readout_index=readout_index, margin=margin, weight=weight,
                   packed_tokens=packed, sequence_tokens=sequence_tokens)


def split_indices(num_pairs: int, eval_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """(train, held-out) pair indices: a seeded shuffle, the held-out share taken from its front
  (at least one pair when the share is positive), both sorted."""
  order = np.random.default_rng(seed).permutation(num_pairs)
  held = int(round(num_pairs * eval_fraction))
  if eval_fraction > 0:
    held = max(held, 1)
  if held >= num_pairs:
    raise InputError(f"--eval_fraction={eval_fraction} leaves no pair of {num_pairs} to train on")
  return np.sort(order[held:]), np.sort(order[:held])


def epoch_order(num_pairs: int, seed: int, epoch: int) -> np.ndarray:
  """The pairs' order in `epoch`: its own seeded shuffle, the same in every run."""
  return np.random.default_rng([seed, epoch]).permutation(num_pairs)
