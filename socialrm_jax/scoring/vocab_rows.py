"""The vocabulary scan's scoring side: every token of the vocabulary as a one-word answer.

A scan item is one (prompt, token) pair: `{"item_id": "<prompt_id>/<token_id>", "prompt":
[user turn], "candidates": [the token's text], "prompt_id", "token_id"}`, generated in order
(prompts, then token ids), never held all at once (`scan_items`). The engine scores them like any
items (chunks, shards, resume, run.json); only the encoding and the packing differ:

- **The answer is the token id itself**, never its text re-tokenized. A token's sequence is
  `prefix + [token_id] + suffix`: `prefix` what the chat template writes before an assistant
  answer's content, `suffix` what it writes after it (its end of turn).
- **Prefix and suffix** (`answer_suffix`): the conversation [user: prompt, assistant: SENTINEL]
  is rendered without a generation prompt; the text before the sentinel's only occurrence is the
  prefix and the text after it the suffix, each tokenized alone (`add_special_tokens=False`).
  Llama 3's suffix: `<|eot_id|>`; ChatML's (SmolLM2, Qwen): `<|im_end|>` and `\\n`. For most
  templates the prefix is the generation-prompt rendering, as `loglik` scores any response; a
  template without a generation-prompt branch, or one that writes a finished turn otherwise (a
  think block), still places the answer where it writes one.
- **Rows** (`packing.pack_one_group_per_row`): one prompt's prefix once, then as many branches
  (`[token_id] + suffix`, each seeing only the prefix and itself) as fit a row, a readout slot per
  token. Score heads read the branch's last token. Language models (`loglik`, `implicit`) read
  "vocab_loglik": the first token's log-probability over the whole vocabulary comes from the one
  log-softmax at the prompt's last position, so only the suffix tokens are readouts of their own
  (`models/readout.py`).
- **Row length** (`row_length_for`): every row has the same length, one of the run's buckets
  (`packing.length_buckets(--max_length)`), so the run compiles one program (two on a CPU, whose
  last batch may shrink). A longer row repeats the prompt less often but makes attention dearer:
  per branch token, the cost is about `L / (L - P) * (1 + L / (6 D))` (P: prompt tokens, D: the
  model's width; a layer's matmuls cost ~24 D^2 a token and attention over L keys ~4 L D), and the
  bucket with the lowest estimate is used.

Tokens scanned (`vocabulary`): every id of the tokenizer (with added tokens) except its special
tokens (named special tokens, and added tokens marked special: control tokens), which are listed,
and ids with no token. A model whose embedding has fewer rows than the vocabulary, or a tokenizer
without a chat template, is refused (`check_model`).
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from socialrm_jax.base.errors import InputError
from socialrm_jax.scoring import chunks, engine, item_tokens, packing, proxies
from socialrm_jax.scoring import step as step_lib

# The answer whose rendering shows where an answer's content goes (no whitespace: templates trim).
SENTINEL = "VOCABSCANSENTINEL7f3a"
DATASET = "vocab_scan"
# A decoder layer's matmuls cost ~24 D^2 per token, attention over L keys ~4 L D: so attention
# adds L / (ATTENTION_WIDTHS x D) to a token's cost.
ATTENTION_WIDTHS = 6


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """The token ids a scan scores (in id order) and what it leaves out, with why."""
  ids: np.ndarray                   # [N] int64
  texts: list[str]                  # [N] each id decoded alone
  excluded: list[dict]              # {"token_id", "token", "reason"}
  size: int                         # Ids in the tokenizer, added tokens included.


def check_model(tokenizer, vocab_size: int | None, where: str) -> None:
  """Refuses a model the scan cannot score: no chat template, or an embedding (`vocab_size`
  rows) smaller than the tokenizer's vocabulary."""
  if not tokenizer.chat_template:
    raise InputError("the tokenizer has no chat template: the scan places each token between "
                     "the template's answer prefix and its end of turn; use an instruction-tuned "
                     "model's tokenizer (with its chat template)", where)
  size = tokenizer.backend_tokenizer.get_vocab_size(with_added_tokens=True)
  if vocab_size is not None and vocab_size < size:
    raise InputError(f"the model's embedding has {vocab_size} rows but its tokenizer has "
                     f"{size} tokens: ids {vocab_size} and up have no embedding; the tokenizer "
                     "does not belong to these weights", where)


def vocabulary(tokenizer, max_tokens: int | None = None) -> Vocabulary:
  """Every id of the tokenizer but its special ones (`max_tokens`: the first N kept, by id)."""
  backend = tokenizer.backend_tokenizer
  size = backend.get_vocab_size(with_added_tokens=True)
  added = backend.get_added_tokens_decoder()
  named = {backend.token_to_id(t) for t in tokenizer.special_tokens_map.values()}
  ids, texts, excluded = [], [], []
  for token_id in range(size):
    token = backend.id_to_token(token_id)
    if token is None:
      excluded.append({"token_id": token_id, "token": None, "reason": "no token has this id"})
    elif token_id in named or (token_id in added and added[token_id].special):
      excluded.append({"token_id": token_id, "token": token, "reason": "special token"})
    elif max_tokens is None or len(ids) < max_tokens:
      ids.append(token_id)
      texts.append(tokenizer.decode([token_id]))
  return Vocabulary(np.asarray(ids, np.int64), texts, excluded, size)


def scan_items(prompts: Sequence[tuple[str, str]], vocab: Vocabulary) -> Iterator[dict]:
  """The scan's items, prompt by prompt, token ids in order. prompts: (prompt_id, text)."""
  for prompt_id, text in prompts:
    turn = [{"role": "user", "content": text}]
    for token_id, token in zip(vocab.ids.tolist(), vocab.texts):
      yield {"item_id": f"{prompt_id}/{token_id}", "dataset": DATASET, "prompt": turn,
             "candidates": [token], "prompt_id": prompt_id, "token_id": token_id}


def answer_suffix(templater: item_tokens.Templater, prompt: str) -> tuple[np.ndarray, np.ndarray]:
  """(prefix ids, suffix ids) of one-token answers to `prompt` (see the module docstring)."""
  turn = [{"role": "user", "content": prompt}]
  full = templater.render(turn + [{"role": "assistant", "content": SENTINEL}],
                          add_generation_prompt=False)
  if full.count(SENTINEL) != 1:
    raise InputError(f"the chat template does not write an answer's content as given (a "
                     f"sentinel answer appears {full.count(SENTINEL)} times in its rendering); "
                     "the scan cannot tell where the answer goes")
  before, after = full.split(SENTINEL)
  # Where the template's generation prompt is what it writes before an answer, the scan reads
  # the answer as `loglik` reads any response; where it has no generation-prompt branch (the
  # prompt rendering stops at the user's turn) or renders the turn otherwise, the answer goes
  # where the template puts a finished one: the rendering cut at the sentinel.
  return templater.tokenize(before), np.concatenate([templater.tokenize(after),
                                                     templater.appended_ids])


def row_length_for(prefix_lengths: Sequence[int], branch_length: int, buckets: Sequence[int],
                   hidden_size: int) -> int:
  """The run's row length: the bucket with the lowest estimated cost per branch token (see the
  module docstring) for the longest prompt, among those holding it and one branch."""
  prefix = max(prefix_lengths)
  fitting = [b for b in buckets if b >= prefix + branch_length]
  if not fitting:
    raise InputError(f"a prompt of {prefix} tokens and its answer ({branch_length} tokens) do "
                     f"not fit --max_length={buckets[-1]}; raise --max_length")

  def cost(length: int) -> float:
    branches = (length - prefix) // branch_length
    return length / (branches * branch_length) * (1 + length / (ATTENTION_WIDTHS * hidden_size))

  return min(fitting, key=cost)


class VocabAnswers(proxies.Proxy):
  """One-token answers: `base` (the model's proxy: score head, loglik or implicit) scores each
  (prompt, token) item; its sequence is built from ids (see the module docstring)."""

  def __init__(self, base: proxies.Proxy, prefixes: dict[str, np.ndarray], suffix: np.ndarray,
               row_length: int):
    if base.name == "judge":
      raise InputError("the vocabulary scan scores each token alone; --proxy=judge compares two "
                       "responses: use loglik, implicit or a score head")
    self.base, self.prefixes, self.suffix, self.row_length = base, prefixes, suffix, row_length
    self.name, self.models = base.name, base.models
    self.readout = "vocab_loglik" if base.readout == "loglik" else base.readout
    self.extra_fields = (*base.extra_fields, ("prompt_id", pa.string()), ("token_id", pa.int64()))

  def settings(self) -> dict:
    return {**self.base.settings(), "vocab_scan": {
        "answer": "token id between the generation prompt and the end-of-turn suffix",
        "suffix_ids": [int(i) for i in self.suffix]}}

  def encode(self, templater, first_index, items):
    """One encoded item per run of the chunk's items that share a prompt; its candidates are the
    run's tokens, in item order (so the chunk's k-th item is its k-th candidate)."""
    del templater
    encoded, start = [], 0
    while start < len(items):
      prompt_id = items[start]["prompt_id"]
      end = start
      while end < len(items) and items[end]["prompt_id"] == prompt_id:
        end += 1
      prefix = self.prefixes[prompt_id]
      sequences = tuple(np.concatenate([prefix, [item["token_id"]], self.suffix]).astype(np.int32)
                        for item in items[start:end])
      encoded.append(item_tokens.EncodedItem(first_index + start, prompt_id, sequences,
                                             (len(prefix),) * len(sequences), None, 0))
      start = end
    return encoded, None

  def locate_gates(self, encoded):
    return self.base.locate_gates(encoded)

  def summary(self, folder):
    return self.base.summary(folder)

  def pack(self, batcher, encoded, *, is_causal, chunk):
    """Rows of `row_length` tokens, one prompt each and as many answers as fit, a readout slot
    per token (`packing.pack_one_group_per_row`)."""
    del batcher, is_causal
    return packing.pack_one_group_per_row(encoded, readout=self.readout,
                                          row_length=self.row_length, chunk=chunk)

  def tokens_naive(self, encoded, plan, item_pairs):
    """Every (prompt, token) as its own full sequence."""
    del plan, item_pairs
    return proxies.every_sequence_tokens(encoded)

  def rows(self, items, encoded, plan, values, counts):
    del encoded, plan
    length = len(self.suffix) + 1
    return [{"item_id": str(item["item_id"]), "candidate": 0,
             **self.base.columns(values[k], int(counts[k])),
             "sequence_tokens": len(self.prefixes[item["prompt_id"]]) + length,
             "prompt_id": item["prompt_id"], "token_id": int(item["token_id"])}
            for k, item in enumerate(items)]

  def schema(self) -> pa.Schema:
    base = self.base.schema()
    return pa.schema([*base, *[pa.field(n, t) for n, t in self.extra_fields[-2:]]])


def scorer_factory(prompts: Sequence[tuple[str, str]]):
  """`engine.score_items(make=...)` for a scan of `prompts` ((prompt_id, text)): the engine's
  scorer with the scan's proxy, readout, one row length and a slot per token."""

  def make(model, mesh, options: engine.ScoringOptions, ref_model=None,
           ref_model_path=None) -> chunks.Scorer:
    base = engine.make_scorer(model, mesh, options, ref_model, ref_model_path)
    templater = base.templater
    suffix, prefixes = None, {}
    for prompt_id, text in prompts:
      prefixes[prompt_id], own_suffix = answer_suffix(templater, text)
      if suffix is not None and not np.array_equal(suffix, own_suffix):
        raise InputError(f"prompt {prompt_id!r}: the template ends its answer otherwise than "
                         "after the other prompts")
      suffix = own_suffix
    buckets = packing.length_buckets(options.max_length, options.smallest_bucket)
    row_length = row_length_for([len(p) for p in prefixes.values()], len(suffix) + 1, buckets,
                                model.config.hidden_size)
    proxy = VocabAnswers(base.proxy, prefixes, suffix, row_length)
    platform = mesh.devices.flat[0].platform
    step = step_lib.ScoringStep(model, mesh, proxy.readout,
                                ref_model if proxy.name == "implicit" else None)
    batcher = packing.Batcher((row_length,), proxy.readout,
                              max(options.batch_tokens(platform), row_length),
                              mesh.shape["data"], shrink_last=platform == "cpu", slots=row_length)
    return chunks.Scorer(proxy, templater, step, batcher)

  return make

