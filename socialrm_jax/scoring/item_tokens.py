"""Turning an item into token ids: chat templates, the plain fallback, text pairs, truncation.

Decoders (and GPT-2) see each candidate as the conversation `prompt + [assistant: candidate]`
rendered by the model's own chat template. The rendered text already carries the model's special
tokens (BOS, turn markers), so it is tokenized with `add_special_tokens=False`: nothing is doubled.

Templates that insert today's date (Llama 3.x) get `date_string=PINNED_DATE`, so a score never
depends on the day it was computed.

A tokenizer without a chat template gets the documented plain format:

    {bos_token}User: {content}\n\nAssistant: {content}\n\n...Assistant: {candidate}{eos_token}

(`bos_token`/`eos_token` only where the tokenizer has them; system turns read `System: `). The
generation prompt is the same text up to and including `Assistant: `.

Encoders (BERT) score (question, answer) text pairs through the tokenizer's own special tokens
(`[CLS] question [SEP] answer [SEP]`), the question being the prompt (one user turn: its text;
several turns: the plain format above without special tokens).

Truncation keeps every response whole: the item's prompt loses tokens from its left (just after a
leading BOS, which is kept) until the item's longest sequence fits `max_length`. All candidates of
an item lose the same prompt tokens, so they still share their prefix. Each truncated item is
counted; with `truncation="error"` the first one stops the run, naming the item.

`encode_many` renders a whole chunk of items first and tokenizes all their texts in one
`encode_batch` call: the Rust tokenizer runs on its own threads with the GIL released, and the host
makes one call per chunk instead of one per text. The tokenizer is our own (models/tokenizer.py:
tokenizer.json, the chat template, no transformers, no torch).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import tokenizers

from socialrm_jax.base.errors import InputError
from socialrm_jax.models.tokenizer import Tokenizer, load_tokenizer

__all__ = ["EncodedItem", "PINNED_DATE", "Templater", "TRUNCATION_MODES", "load_tokenizer",
           "plain_messages"]

# What a template that prints today's date prints instead, so scores are reproducible.
PINNED_DATE = "26 Jul 2024"
PLAIN_ROLE_NAMES = {"user": "User", "assistant": "Assistant", "system": "System"}
TRUNCATION_MODES = ("left", "error")


@dataclasses.dataclass(frozen=True)
class EncodedItem:
  """One item as token ids: each candidate's full sequence and where its scored tokens start.

  `sequences[c]` is the whole templated conversation for candidate c (after truncation);
  `response_starts[c]` the index of its first response token (the loglik proxy scores
  `sequences[c][response_starts[c]:]`); `token_type_ids[c]` only for encoders.
  """
  index: int                      # Position of the item in the scored item list.
  item_id: str
  sequences: tuple[np.ndarray, ...]          # K x [len_c] int32
  response_starts: tuple[int, ...]
  token_type_ids: tuple[np.ndarray, ...] | None
  truncated_tokens: int           # Prompt tokens dropped from each sequence (0 = untouched).
  # Gated reward heads (ArmoRM, QRM): where each candidate's sequence has its gate position.
  gate_positions: tuple[int, ...] | None = None

  @property
  def num_candidates(self) -> int:
    return len(self.sequences)


@dataclasses.dataclass(frozen=True)
class _ItemTexts:
  """An item's texts to tokenize: its prompt (or question) first, then one per candidate."""
  item_id: str
  texts: list[str]


def plain_messages(messages: Sequence[dict]) -> str:
  """Chat messages as plain text, `Role: content` each followed by a blank line (the plain format,
  encoder questions, and the conversation a judge is shown)."""
  return "".join(f"{PLAIN_ROLE_NAMES.get(m['role'], m['role'].capitalize())}: {m['content']}\n\n"
                 for m in messages)


def common_prefix_length(a: np.ndarray, b: np.ndarray) -> int:
  n = min(len(a), len(b))
  differ = np.nonzero(a[:n] != b[:n])[0]
  return int(differ[0]) if len(differ) else n


def _ids(encoding: tokenizers.Encoding) -> np.ndarray:
  return np.asarray(encoding.ids, np.int32)


class Templater:
  """Encodes items for one model: `encode_many(first_index, items)`, `encode(index, item)`.

  `tokenizer` is a `models.tokenizer.Tokenizer`; a transformers fast tokenizer is taken too (its
  backend copied), for code that holds one.
  """

  def __init__(self, tokenizer: Any, *, is_causal: bool, max_length: int,
               truncation: str = "left", appended_ids: Sequence[int] = ()):
    """`appended_ids`: tokens the model's own scorer appends after every templated conversation
    (the model config's `appended_token_ids`: InternLM2's reward token); the score is read at the
    last of them."""
    if truncation not in TRUNCATION_MODES:
      raise ValueError(f"truncation must be one of {TRUNCATION_MODES}, got {truncation!r}")
    if not isinstance(tokenizer, Tokenizer):
      tokenizer = Tokenizer.from_transformers(tokenizer)
    self.tokenizer = tokenizer
    self.is_causal = is_causal
    self.max_length = max_length
    self.truncation = truncation
    self.has_chat_template = bool(tokenizer.chat_template)
    self.appended_ids = np.asarray(appended_ids, np.int32)

  # Text.
  def render(self, messages: Sequence[dict], add_generation_prompt: bool) -> str:
    """The conversation as the model sees it (text with the template's special tokens)."""
    messages = [{"role": m["role"], "content": m["content"]} for m in messages]
    if self.has_chat_template:
      return self.tokenizer.apply_chat_template(
          messages, tokenize=False, add_generation_prompt=add_generation_prompt,
          date_string=PINNED_DATE)
    bos = self.tokenizer.bos_token or ""
    eos = self.tokenizer.eos_token or ""
    if add_generation_prompt:
      return bos + plain_messages(messages) + "Assistant: "
    *history, last = messages
    return bos + plain_messages(history) + f"Assistant: {last['content']}{eos}"

  def tokenize(self, text: str) -> np.ndarray:
    return _ids(self.tokenizer.encode_batch([text])[0])

  # Items.
  def encode(self, index: int, item: dict) -> EncodedItem:
    return self.encode_many(index, [item])[0]

  def encode_many(self, first_index: int, items: Sequence[dict]) -> list[EncodedItem]:
    """Items `first_index, first_index + 1, ...` encoded, their texts tokenized in one call."""
    item_texts = [self._texts(item) for item in items]
    encodings = self.tokenizer.encode_batch([t for it in item_texts for t in it.texts])
    encoded, start = [], 0
    for offset, it in enumerate(item_texts):
      own = encodings[start:start + len(it.texts)]
      start += len(it.texts)
      build = self._causal_item if self.is_causal else self._pair_item
      encoded.append(build(first_index + offset, it.item_id, own[0], own[1:]))
    return encoded

  def _texts(self, item: dict) -> _ItemTexts:
    item_id = str(item["item_id"])
    prompt, candidates = list(item["prompt"]), list(item["candidates"])
    if not prompt or not candidates:
      raise InputError(f"item {item_id!r} has an empty prompt or no candidates")
    if not self.is_causal:
      # The question: one user turn's text; several turns: the plain format, no special tokens.
      question = prompt[0]["content"] if len(prompt) == 1 else plain_messages(prompt).rstrip("\n")
      return _ItemTexts(item_id, [question, *candidates])
    try:
      return _ItemTexts(item_id, [self.render(prompt, add_generation_prompt=True)] + [
          self.render(prompt + [{"role": "assistant", "content": text}], False)
          for text in candidates])
    except Exception as e:  # A template that rejects the conversation (roles, alternation).
      raise InputError(f"item {item_id!r}: the tokenizer could not render it: {e}") from e

  def _causal_item(self, index, item_id, prompt_encoding, full_encodings) -> EncodedItem:
    prompt_ids = _ids(prompt_encoding)
    sequences = [np.concatenate([_ids(e), self.appended_ids]) for e in full_encodings]
    # The response starts after the templated prompt with its generation prompt; where a
    # template renders the two differently (e.g. Qwen3's empty think block), after their
    # longest common prefix instead.
    starts = [common_prefix_length(prompt_ids, full) for full in sequences]
    # The leading BOS (if any) is kept through truncation: the model was trained with it.
    bos_id = self.tokenizer.bos_token_id
    keep_head = 1 if bos_id is not None and all(len(s) and s[0] == bos_id for s in sequences) else 0
    drop = self._tokens_to_drop(item_id, sequences, starts, keep_head)
    if drop:
      sequences = [np.concatenate([s[:keep_head], s[keep_head + drop:]]) for s in sequences]
      starts = [st - drop for st in starts]
    return EncodedItem(index, item_id, tuple(sequences), tuple(starts), None, drop)

  def _pair_item(self, index, item_id, question, answers) -> EncodedItem:
    # The tokenizer's own post-processor adds the pair's special tokens ([CLS] q [SEP] a [SEP])
    # and token types, for any encoder's tokenizer.
    backend = self.tokenizer.backend_tokenizer
    specials = backend.num_special_tokens_to_add(is_pair=True)
    num_question = len(question.ids)
    lengths = [specials + num_question + len(a.ids) for a in answers]
    drop = self._tokens_to_drop(item_id, [np.zeros(n) for n in lengths], [0] * len(lengths), 0,
                                droppable=num_question)
    if drop:
      question.truncate(num_question - drop, direction="left")
    sequences, types, starts = [], [], []
    for answer in answers:
      pair = backend.post_process(question, answer, add_special_tokens=True)
      sequences.append(_ids(pair))
      types.append(np.asarray(pair.type_ids, np.int32))
      second = np.nonzero(types[-1] == 1)[0]  # The answer's tokens (and its closing [SEP]).
      starts.append(int(second[0]) if len(second) else len(pair.ids) - len(answer.ids))
    return EncodedItem(index, item_id, tuple(sequences), tuple(starts), tuple(types), drop)

  def _tokens_to_drop(self, item_id, sequences, starts, keep_head, droppable=None) -> int:
    """How many prompt tokens every sequence of the item must lose to fit `max_length`."""
    longest = max(len(s) for s in sequences)
    if longest <= self.max_length:
      return 0
    drop = longest - self.max_length
    if self.truncation == "error":
      raise InputError(
          f"item {item_id!r} is {longest} tokens long, over --max_length={self.max_length}; "
          "raise --max_length or pass --truncation=left to drop prompt tokens from the left")
    if droppable is None:
      droppable = min(starts) - keep_head
    if drop > droppable:
      raise InputError(
          f"item {item_id!r}: its responses alone need {longest - droppable} tokens, over "
          f"--max_length={self.max_length}; responses are never cut: raise --max_length")
    return drop
