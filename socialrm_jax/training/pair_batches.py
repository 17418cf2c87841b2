"""Preference pairs as packed training batches: chosen and rejected share their prompt in one row.

Each pair is one item of two candidates (chosen, rejected) encoded by the scorer's own `Templater`
(`scoring/item_tokens.py`), then laid out by the scorer's `packing.RowWriter` as one prefix-shared
group: the templated prompt once, then the chosen branch, then the rejected branch. The reward of
each candidate is read where the scorer reads it, at its sequence's last token, so the prompt's
tokens are computed once a pair (TRL computes both full sequences).

A step's `batch_size` pairs are packed into blocks of rows (`pack_pairs`): several pairs a row,
each in its own segment, rows of one length (`row_length`; a longer pair gets a row of the shortest
`packing.length_buckets` bucket that holds it), so the train step runs on a few fixed shapes,
compiled once each, and computes few padding tokens. The loss and gradients of a step are sums
over its blocks, divided by its pair count (`training.loss`): the same as one batch's mean.

A pair whose chosen or rejected conversation is over `--max_length` is dropped (TRL's
RewardTrainer filters such pairs out), or has its prompt cut from the left with both responses
whole (the scorer's truncation; OpenRLHF's), or refuses the run, by `--truncation`
(`fit_pairs`); either way what was dropped or cut is counted (`LongPairs`), never silent.

`check_reading_token` refuses, with one line, data whose reward would be read inside the prompt:
a template that drops the response (the read token lies before the response), or a pad token that
is also the last token of a conversation (transformers' sequence classifiers read the last token
that is not the pad token: with pad == eos, Llama 3's `<|eot_id|>` after every turn, TRL's reward
models read the prompt and their loss stayed at ln 2).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from typing import Any, Mapping, Sequence

import numpy as np

from socialrm_jax.base.errors import InputError
from socialrm_jax.scoring import engine, packing
from socialrm_jax.models.tokenizer import Tokenizer
from socialrm_jax.scoring.item_tokens import EncodedItem, Templater

# Token fields of a block, each [R, T] int32.
TOKEN_FIELDS = ("input_ids", "positions", "segment_ids", "branch_ids")
# A row of T tokens has T / TOKENS_PER_PAIR_SLOT pair slots (a fixed count per row length, so per
# compiled shape); a row whose slots are full takes no more pairs, however short.
TOKENS_PER_PAIR_SLOT = 16
# What becomes of a pair with a conversation over --max_length (socialrm-train's --truncation;
# "left" and "error" as the scorer's truncation names them).
TRUNCATION_MODES = ("drop", "left", "error")


@dataclasses.dataclass(frozen=True)
class Pair:
  """One preference pair to train on: its id, conversation and optional TRL `margin`."""
  pair_id: str
  prompt: list[dict]
  chosen: str
  rejected: str
  margin: float = 0.0


def gold_pairs(items: Sequence[Mapping[str, Any]], pairs: Sequence[Mapping[str, Any]]
               ) -> list[Pair]:
  """A conversion's gold pairs to train on (the converter's item and pair rows); a `margin`
  attribute of an item is TRL's margin."""
  margins = {}
  for item in items:
    attributes = item.get("attributes") or {}
    if isinstance(attributes, str):
      attributes = json.loads(attributes)
    if attributes.get("margin") is not None:
      margins[item["item_id"]] = float(attributes["margin"])
  return [Pair(p["pair_id"], list(p["prompt"]), p["chosen"], p["rejected"],
               margins.get(p["item_id"], 0.0)) for p in pairs]


def data_sha256(pairs: Sequence[Pair]) -> str:
  """sha256 of the pairs as trained on (ids, conversations, margins), in their order."""
  digest = hashlib.sha256()
  for p in pairs:
    digest.update(json.dumps(dataclasses.asdict(p), sort_keys=True).encode("utf-8"))
    digest.update(b"\n")
  return digest.hexdigest()


def encode_pairs(templater: Templater, pairs: Sequence[Pair],
                 chunk: int = 256) -> list[EncodedItem]:
  """Each pair as an item of two candidates (chosen, rejected), through the scorer's templater."""
  encoded = []
  for start in range(0, len(pairs), chunk):
    items = [{"item_id": p.pair_id, "prompt": p.prompt, "candidates": [p.chosen, p.rejected]}
             for p in pairs[start:start + chunk]]
    encoded.extend(templater.encode_many(start, items))
  return encoded


@dataclasses.dataclass(frozen=True)
class LongPairs:
  """The pairs of one set over --max_length: those left out, those whose prompt was cut."""
  dropped: tuple[str, ...] = ()
  prompt_cut: tuple[str, ...] = ()

  def record(self) -> dict[str, Any]:
    """As the manifest and the grid record it: the counts, and the first pair of each."""
    return {"dropped": len(self.dropped), "prompt_cut": len(self.prompt_cut),
            "first_dropped": self.dropped[0] if self.dropped else None,
            "first_prompt_cut": self.prompt_cut[0] if self.prompt_cut else None}


def fit_pairs(tokenizer: Tokenizer, pairs: Sequence[Pair], *, max_length: int, truncation: str,
              flag: str = "data") -> tuple[list[Pair], EncodedPairs, LongPairs]:
  """(the pairs kept, them encoded, what became of the long ones) under `truncation`: a pair whose
  chosen or rejected templated conversation is over `max_length` tokens is dropped ("drop"), has
  its prompt cut from the left ("left": the scorer's truncation, both responses whole; a pair
  whose responses alone are over is dropped), or refuses the run naming it and `--flag`'s data
  ("error")."""
  if truncation not in TRUNCATION_MODES:  # the flag's choices; `training_run.check` names it
    raise ValueError(f"truncation must be one of {TRUNCATION_MODES}, got {truncation!r}")
  whole = encode_pairs(Templater(tokenizer, is_causal=True, max_length=sys.maxsize), pairs)
  cutter = Templater(tokenizer, is_causal=True, max_length=max_length, truncation="left")
  kept, items, dropped, cut = [], [], [], []
  for pair, item in zip(pairs, whole):
    lengths = [len(s) for s in item.sequences]
    if max(lengths) > max_length:
      role = ("chosen", "rejected")[int(np.argmax(lengths))]
      if truncation == "error":
        raise InputError(
            f"--{flag}: pair {pair.pair_id!r}: its {role} conversation is {max(lengths)} tokens, "
            f"over --max_length={max_length} (--truncation=error); --truncation=drop leaves such "
            "pairs out, --truncation=left cuts their prompts from the left")
      if truncation == "drop":
        dropped.append(pair.pair_id)
        continue
      try:
        item = encode_pairs(cutter, [pair])[0]
      except InputError:
        # The one refusal the cutter adds to the whole encoding's: the responses alone are over
        # max_length, and a response is never cut.
        dropped.append(pair.pair_id)
        continue
      cut.append(pair.pair_id)
    kept.append(pair)
    items.append(item)
  return kept, EncodedPairs(items, [p.margin for p in kept]), LongPairs(tuple(dropped), tuple(cut))


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


def pair_slots(row_length: int) -> int:
  """Pairs a `row_length`-long row can hold (its readout slots: two a pair)."""
  return max(1, row_length // TOKENS_PER_PAIR_SLOT)


@dataclasses.dataclass
class PairBlock:
  """Host arrays for one call of the train step: [R, T] tokens, [R, K, 2] readouts (chosen,
  rejected) of the K pair slots of each row, [R, K] margins and weights (1 a pair, 0 an empty
  slot), and the real tokens: packed, and counted as TRL counts them (both full sequences, the
  prompt twice)."""
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


def row_length_for(length: int, buckets: Sequence[int], pair_id: str) -> int:
  """The shortest bucket that holds a pair of `length` packed tokens."""
  for bucket in buckets:
    if bucket >= length:
      return bucket
  raise InputError(f"pair {pair_id!r}: {length} packed tokens, over --max_length rows of "
                   f"{buckets[-1]}")


def block_rows(rows: int, rows_per_block: int, row_multiple: int) -> int:
  """Rows of a block holding `rows` rows (at most `rows_per_block`): a power of two times
  `row_multiple` (the mesh's data axis), so a run compiles a few shapes, once each."""
  size = row_multiple
  while size < min(rows, rows_per_block):
    size *= 2
  return min(size, max(rows_per_block, row_multiple))


def pack_pairs(items: Sequence[EncodedItem], margins: Sequence[float], *,
               buckets: Sequence[int], row_length: int, rows_per_block: int,
               row_multiple: int = 1) -> list[PairBlock]:
  """`items` (pairs) packed into blocks of rows, every pair whole in one row.

  A pair goes into a row of `row_length` tokens, or of the shortest bucket that holds it when it
  is longer; rows of one length are filled first-fit with the pairs longest first (so shorter
  pairs fill the room the long ones leave), and cut into blocks of `rows_per_block` rows (the last
  one `block_rows` long, its spare rows empty). A step's loss and gradients are the sums over
  its blocks (`training.loss`), so how pairs are laid out changes no result beyond rounding; the
  layout depends on the pairs alone, so a run's steps are the same each time it runs.
  """
  lengths = [pair_length(item) for item in items]
  rows_by_length: dict[int, list[list[int]]] = {}
  used: dict[int, list[int]] = {}
  for i in sorted(range(len(items)), key=lambda i: (-lengths[i], i)):
    length = row_length_for(max(lengths[i], row_length), buckets, items[i].item_id)
    rows, room = rows_by_length.setdefault(length, []), used.setdefault(length, [])
    for r, row in enumerate(rows):
      if room[r] + lengths[i] <= length and len(row) < pair_slots(length):
        row.append(i)
        room[r] += lengths[i]
        break
    else:
      rows.append([i])
      room.append(lengths[i])
  blocks = []
  for length in sorted(rows_by_length):
    rows = rows_by_length[length]
    for start in range(0, len(rows), rows_per_block):
      chunk = rows[start:start + rows_per_block]
      size = block_rows(len(chunk), rows_per_block, row_multiple)
      blocks.append(_block([[items[i] for i in row] for row in chunk],
                           [[margins[i] for i in row] for row in chunk], size, length))
  return blocks


def empty_block(rows: int, length: int) -> PairBlock:
  """A block of `rows` empty rows of `length` tokens: the arrays of a block of that shape."""
  return _block([], [], rows, length)


def _block(rows: Sequence[Sequence[EncodedItem]], margins: Sequence[Sequence[float]],
           size: int, length: int) -> PairBlock:
  """`rows` of pairs laid out as a block of `size` rows of `length` tokens."""
  slots = pair_slots(length)
  fields = {name: np.zeros((size, length), np.int32) for name in TOKEN_FIELDS}
  readout_index = np.zeros((size, slots, 2), np.int32)
  margin = np.zeros((size, slots), np.float32)
  weight = np.zeros((size, slots), np.float32)
  offsets = np.array([0, 2], np.int64)  # one item at a time: owners are not read here
  packed = sequence_tokens = 0
  for r, (row, row_margins) in enumerate(zip(rows, margins)):
    writer = packing.RowWriter(length, "score", offsets)
    for item in row:
      writer.add(packing.Group(item, 0, (0, 1), packing.shared_prefix_length(item, True)))
      sequence_tokens += sum(len(s) for s in item.sequences)
    for name, array in fields.items():
      array[r] = getattr(writer, name)
    # Each pair's two readouts in turn: chosen, then rejected.
    readout_index[r, :len(row)] = np.array([index for index, _, _ in writer.readouts],
                                           np.int32).reshape(len(row), 2)
    margin[r, :len(row)] = row_margins
    weight[r, :len(row)] = 1.0
    packed += writer.used
  return PairBlock(**fields, readout_index=readout_index, margin=margin, weight=weight,
                   packed_tokens=packed, sequence_tokens=sequence_tokens)


def packed_row_length(row_length: int, max_length: int) -> int:
  """The length of a run's rows: `row_length`, at most twice `max_length` (the longest pair: the
  prompt once, both responses)."""
  return min(row_length, 2 * max_length)


def pair_packing(row_length: int, max_length: int, platform: str, data_size: int,
                 tokens_per_block: int = 0) -> dict:
  """`pack_pairs`' layout arguments for a run: rows of `packed_row_length`, longer buckets up to
  twice `max_length`, blocks of `rows_per_block` rows."""
  row_length = packed_row_length(row_length, max_length)
  return dict(buckets=packing.length_buckets(2 * max_length, row_length),
              row_length=row_length, row_multiple=data_size,
              rows_per_block=rows_per_block(platform, row_length, data_size, tokens_per_block))


def rows_per_block(platform: str, row_length: int, data_size: int,
                   tokens_per_block: int = 0) -> int:
  """Rows of one block (one call of the jitted train step; a block of longer rows has as many):
  `tokens_per_block` token slots of rows of `row_length`, rounded down to a multiple of the data
  axis, at least one row a device of it (fewer is refused, naming --tokens_per_block). 0: on a
  CPU one row a device (there a padding row costs as much as a real one, and rows run no faster
  together); on accelerators as many as the scorer's default batch holds, a multiple of the data
  axis."""
  if tokens_per_block < 0 or 0 < tokens_per_block < row_length * data_size:
    raise InputError(f"--tokens_per_block={tokens_per_block}: a block holds at least one row of "
                     f"--row_length={row_length} for each of the {data_size} devices of the data "
                     f"axis, {row_length * data_size} tokens (0: the default size)")
  if tokens_per_block:
    return tokens_per_block // row_length // data_size * data_size
  if platform == "cpu":
    return data_size
  return packing.rows_per_batch(row_length, engine.DEFAULT_TOKENS_PER_BATCH, data_size)


@dataclasses.dataclass(frozen=True)
class EncodedPairs:
  """Pairs as the train step reads them: encoded by the scorer's templater, with their margins."""
  items: list[EncodedItem]
  margins: list[float]

  @classmethod
  def encode(cls, templater: Templater, pairs: Sequence[Pair]) -> EncodedPairs:
    return cls(encode_pairs(templater, pairs), [p.margin for p in pairs])

  def micro_batch(self, micro: int, *, batch_size: int, seed: int, layout: dict
                  ) -> list[PairBlock]:
    """Micro-batch `micro` (the data position) packed: `batch_size` pairs of its epoch's seeded
    order (`epoch_order`); the pairs an epoch leaves over a whole micro-batch wait."""
    epoch, position = divmod(micro, len(self.items) // batch_size)
    order = epoch_order(len(self.items), seed, epoch)
    chosen = order[position * batch_size:(position + 1) * batch_size]
    return pack_pairs([self.items[i] for i in chosen], [self.margins[i] for i in chosen],
                      **layout)

  def blocks(self, layout: dict) -> list[PairBlock]:
    """Every pair packed (an evaluation's blocks)."""
    return pack_pairs(self.items, self.margins, **layout)


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
