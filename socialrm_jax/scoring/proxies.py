"""Reward proxies: how a model's readouts become the rewards of the scores table.

A proxy decides what a chunk of items sends through the model and how the readouts that come back
become score rows (docs/spec.md sec. 2: `item_id`, `candidate`, `reward`, and columns of its
own). All of them run through the same engine (templating, prefix sharing, packing, the compiled
step), so the scores keep docs/spec.md's columns and every metric works unchanged.

- `none`, a score head: the head's output at the candidate's last token. A head with several
  outputs (a multi-objective reward model) keeps the whole vector in `rewards`, and `Objective`
  reduces it to the scalar `reward` the metrics use: one output (`--objective=INDEX`) or a
  weighted sum (`--objective_weights=w1,w2,...`).
- `loglik`: the mean log-probability of the candidate's response tokens (docs/spec.md sec. 4), with
  `reward_sum` and `n_tokens` beside it. A response with no token (empty, and a template that
  writes no end of turn after it) has none to read: it is refused, naming the item, as for
  `implicit`.
- `implicit`: the DPO implicit reward, the sum over the response tokens of
  log p_policy(token) - log p_ref(token), as RewardBench's DPO mode computes it with a reference
  model. DPO's beta multiplies every reward by the same positive number and changes no comparison,
  so it is 1 here. `--length_normalize` divides the sum by the response's token count. The policy
  and the reference run on the same packed batches, in one compiled program per shape
  (`step.ScoringStep` with `ref_model`), and must share a tokenizer (`check_same_tokenizer`).
- `judge`: an instruction-tuned model is asked which of two replies is better (`JUDGE_TEMPLATE`,
  named and versioned). For an item with K candidates each ordered pair (i, j), i != j, makes one
  judge prompt showing i as reply A and j as reply B; its readouts are the log-probabilities of
  the two answer tokens `A` and `B` (`JUDGE_ANSWERS`: the first token of the assistant's answer,
  which must decode to the letter; both read at the prompt's last position). With
  m(i, j) = log P(A) - log P(B) on the prompt showing i first:
      margin(i, j) = (m(i, j) - m(j, i)) / 2   (antisymmetric: a preference for i over j)
      bias(i, j)   = (m(i, j) + m(j, i)) / 2   (symmetric: the preference for whatever is first)
  so a constant pull toward one position cancels from the margin and shows in the bias.
  A candidate's `reward` is its mean margin against the item's other candidates (pairs and
  metrics then work unchanged: r_i - r_j orders i and j as the judge does); `position_bias` is
  its mean bias and `order_agreement` the share of its comparisons whose two orders prefer the
  same reply. run.json's `judge` holds the position bias over all compared pairs.
  The judge prompts are items scored by the loglik machinery: each prompt's two answers share the
  prompt as their prefix, so a prompt goes through the model once. Judge prompts are never
  truncated (they would lose the instruction or a reply): an over-long one is an error.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from socialrm_jax.base import tables, templates
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import heads
from socialrm_jax.scoring import packing
from socialrm_jax.scoring.item_tokens import EncodedItem, Templater, plain_messages

PROXIES = ("none", "loglik", "implicit", "judge")

JUDGE_TEMPLATE = templates.PromptTemplate("judge.pairwise", 1, {"": (
    "Here is a conversation between a user and an AI assistant, followed by two candidate "
    "replies for the assistant's next turn.\n\n"
    "[Conversation]\n{conversation}\n\n"
    "[Reply A]\n{first}\n\n"
    "[Reply B]\n{second}\n\n"
    "Which reply is better: more helpful, honest, harmless and fair? Answer with one letter, "
    "A or B.")})
# The judge's answers, as the assistant's reply: the first position's letter, then the second's.
JUDGE_ANSWERS = ("A", "B")
# A conversation both tokenizers of an implicit reward must render to the same token ids.
TOKENIZER_PROBE = (
    {"role": "user", "content": "Which reply is kinder? Déjà vu: 12,345 naïve café owners said "
                                "\"no\" — twice!\n\tWhy?"},
    {"role": "assistant", "content": "The second one, because it listens first. 😊"},
)


def resolve(head: str, proxy: str | None) -> str:
  """The proxy a model is scored with: its score head ("none") for a reward model, `loglik` for
  a language model unless another is asked; a proxy the head cannot serve is refused."""
  if proxy is None:
    proxy = "loglik" if head == "lm" else "none"
  if proxy not in PROXIES:
    raise InputError(f"unknown --proxy={proxy!r}; use one of {', '.join(PROXIES)}")
  if proxy != "none" and head != "lm":
    raise InputError(f"--proxy={proxy} needs a language-model head; this model has a {head!r} "
                     "head")
  if proxy == "none" and head != "score":
    raise InputError(f"this model has a {head!r} head, no reward head: pass --proxy=loglik (its "
                     "mean response log-likelihood), --proxy=implicit with --ref_model, or "
                     "--proxy=judge")
  return proxy


@dataclasses.dataclass(frozen=True)
class Objective:
  """The scalar `reward` of a score head with L outputs: output `index`, or the sum of the outputs
  weighted by `weights` (L of them). With neither, output 0."""
  index: int | None = None
  weights: tuple[float, ...] = ()

  def validate(self) -> None:
    if self.index is not None and self.weights:
      raise InputError("pass --objective or --objective_weights, not both")
    if self.index is not None and self.index < 0:
      raise InputError(f"--objective must be >= 0, got {self.index}")
    if not all(np.isfinite(self.weights)):
      raise InputError(f"--objective_weights must be finite numbers, got {list(self.weights)}")

  def check(self, num_labels: int) -> None:
    """Refuses an objective the head's `num_labels` outputs cannot give."""
    if self.weights and len(self.weights) != num_labels:
      raise InputError(f"--objective_weights has {len(self.weights)} weights, but the score head "
                       f"has {num_labels} output(s)")
    if (self.index or 0) >= num_labels:
      raise InputError(f"--objective={self.index} is out of range: the score head has "
                       f"{num_labels} output(s), 0 to {num_labels - 1}")

  def reduce(self, vectors: np.ndarray) -> np.ndarray:
    """[n, L] -> [n]"""
    if self.weights:
      return np.einsum("nl,l->n", vectors, np.asarray(self.weights, np.float64))
    return vectors[:, self.index or 0]

  def settings(self) -> dict:
    return {"objective": self.index, "objective_weights": list(self.weights)}


def every_sequence_tokens(encoded: Sequence[EncodedItem]) -> int:
  """Tokens of every encoded sequence, each run as its own full sequence."""
  return sum(len(s) for enc in encoded for s in enc.sequences)


class Proxy:
  """One scored sequence per candidate; a candidate's row from its summed readouts.

  `readout` is what the compiled step reads ("score": the head's outputs; "loglik": the log-prob
  of each response token), `models` how many models run on every batch.
  """
  name = ""
  readout = "loglik"
  models = 1
  extra_fields: tuple[tuple[str, pa.DataType], ...] = ()

  def settings(self) -> dict:
    """What changes a score besides the model and the items (for the manifest)."""
    return {"proxy": self.name}

  def encode(self, templater: Templater, first_index: int,
             items: Sequence[dict]) -> tuple[list[EncodedItem], Any]:
    """The chunk's sequences and what `rows` needs to map them back to the items."""
    return templater.encode_many(first_index, items), None

  def locate_gates(self, encoded: list[EncodedItem]) -> list[EncodedItem]:
    """The encoded items with what the model's head reads besides the answer's last token (a
    gated head's prompt position); unchanged for every other head."""
    return encoded

  def pack(self, batcher: packing.Batcher, encoded: Sequence[EncodedItem], *, is_causal: bool,
           chunk: int) -> list[packing.RowWriter]:
    """A chunk's encoded items as rows: packed by length, prompts shared (`Batcher.pack`)."""
    return batcher.pack(encoded, is_causal=is_causal, chunk=chunk)

  def tokens_naive(self, encoded: Sequence[EncodedItem], plan: Any,
                   item_pairs: Sequence[Sequence[tuple[int, int]]]) -> int:
    """Tokens a scorer computes that runs each pair's chosen and rejected as full sequences."""
    del plan
    return sum(len(enc.sequences[a]) + len(enc.sequences[b])
               for enc, pairs in zip(encoded, item_pairs) for a, b in pairs)

  def columns(self, values: np.ndarray, count: int) -> dict:
    """A candidate's columns from its readouts summed [W] over `count` readouts."""
    raise NotImplementedError

  def rows(self, items: Sequence[dict], encoded: Sequence[EncodedItem], plan: Any,
           values: np.ndarray, counts: np.ndarray) -> list[dict]:
    """Score rows from the readouts summed per candidate: values [candidates, W], counts
    [candidates] (candidates numbered through the chunk, `packing.candidate_offsets`)."""
    del items, plan
    offsets = packing.candidate_offsets(encoded)
    out = []
    for slot, enc in enumerate(encoded):
      for c in range(enc.num_candidates):
        owner = int(offsets[slot]) + c
        out.append({"item_id": enc.item_id, "candidate": c,
                    **self.columns(values[owner], int(counts[owner])),
                    "sequence_tokens": len(enc.sequences[c])})
    return out

  def schema(self) -> pa.Schema:
    return pa.schema([("item_id", pa.string()), ("candidate", pa.int32()),
                      ("reward", pa.float64()), *self.extra_fields,
                      ("sequence_tokens", pa.int32())])

  def summary(self, folder) -> dict:
    """run.json fields about the proxy, from the score rows in the run's folder."""
    del folder
    return {}


class ScoreHead(Proxy):
  """The score head's outputs; `objective` makes several of them one `reward`."""
  name = "none"
  readout = "score"

  def __init__(self, num_labels: int, objective: Objective, head: heads.HeadSpec | None = None):
    """`head`: a custom reward head (`models.heads`): its outputs' names go to run.json, and a
    gated one has its gate located in every sequence."""
    objective.check(num_labels)
    self.num_labels, self.objective, self.head = num_labels, objective, head
    if num_labels > 1:
      self.extra_fields = (("rewards", pa.list_(pa.float64())),)

  def settings(self) -> dict:
    return {**super().settings(), **self.objective.settings()}

  def summary(self, folder) -> dict:
    """A custom head's class and output names (output 0: the score its pipeline ranks by)."""
    del folder
    if self.head is None:
      return {}
    return {"reward_head": {"class": self.head.architecture, "kind": self.head.kind,
                            "outputs": list(self.head.output_names)}}

  def locate_gates(self, encoded):
    """A gated head (ArmoRM, QRM) reads its gate at the last occurrence of its pattern (the
    assistant header before the answer); an item whose sequence lacks it is refused."""
    if self.head is None or not self.head.gate_pattern:
      return encoded
    out = []
    for enc in encoded:
      found = [heads.gate_position(self.head, seq) for seq in enc.sequences]
      if any(p is None for p in found):
        c = found.index(None)
        pattern = heads.PATTERN_TEXTS.get(self.head.gate_pattern, "")
        raise InputError(
            f"item {enc.item_id!r}, candidate {c}: {self.head.architecture} reads its gating "
            f"network at the last {pattern} (token ids {list(self.head.gate_pattern)}), which "
            "this item's sequence does not hold: score it with the model's own Llama 3 chat "
            "template, and a --max_length that keeps the prompt's last turn")
      out.append(dataclasses.replace(enc, gate_positions=tuple(found)))
    return out

  def columns(self, values: np.ndarray, count: int) -> dict:
    del count
    row = {"reward": float(self.objective.reduce(values[None, :])[0])}
    if self.num_labels > 1:
      row["rewards"] = [float(v) for v in values]
    return row


class ResponseTokens(Proxy):
  """A proxy that reads the log-probabilities of the response's tokens: a response with none
  (empty, under a template that writes nothing after an answer, no end-of-turn token) has no
  reward, and is refused when encoded, naming its item."""

  def encode(self, templater: Templater, first_index: int,
             items: Sequence[dict]) -> tuple[list[EncodedItem], Any]:
    encoded, plan = super().encode(templater, first_index, items)
    for enc, item in zip(encoded, items):
      for c, (sequence, start) in enumerate(zip(enc.sequences, enc.response_starts)):
        if start >= len(sequence):
          raise InputError(
              f"item {enc.item_id!r} (dataset {item.get('dataset')!r}), candidate {c}: the "
              "response has no token to score (it is empty, and the chat template writes no "
              f"end-of-turn token after an answer); --proxy={self.name} reads the response's "
              "token log-probabilities: give every candidate text")
    return encoded, plan


class LogLik(ResponseTokens):
  """The mean log-probability of the response tokens (docs/spec.md sec. 4)."""
  name = "loglik"
  extra_fields = (("reward_sum", pa.float64()), ("n_tokens", pa.int32()))

  def columns(self, values: np.ndarray, count: int) -> dict:
    return {"reward": values[0] / count if count else float("nan"),
            "reward_sum": float(values[0]), "n_tokens": count}


class Implicit(ResponseTokens):
  """The DPO implicit reward: sum of log p_policy - log p_ref over the response tokens."""
  name = "implicit"
  models = 2
  extra_fields = (("reward_sum", pa.float64()), ("n_tokens", pa.int32()),
                  ("policy_logprob_sum", pa.float64()), ("ref_logprob_sum", pa.float64()))

  def __init__(self, reference: dict, length_normalize: bool):
    self.reference, self.length_normalize = reference, length_normalize

  def settings(self) -> dict:
    return {**super().settings(), "ref_model": self.reference,
            "length_normalize": self.length_normalize}

  def columns(self, values: np.ndarray, count: int) -> dict:
    policy, ref = float(values[0]), float(values[1])
    ratio = policy - ref
    reward = (ratio / count if count else float("nan")) if self.length_normalize else ratio
    return {"reward": reward, "reward_sum": ratio, "n_tokens": count,
            "policy_logprob_sum": policy, "ref_logprob_sum": ref}


def check_same_tokenizer(policy: Templater, reference: Templater, reference_path: str) -> None:
  """Refuses a reference model that tokenizes otherwise than the policy: the implicit reward
  compares both models' log-probabilities of the same token ids, so the vocabularies and the
  rendered ids of a probe conversation (`TOKENIZER_PROBE`, each rendered by its own template)
  must be equal."""
  why = ("the implicit reward compares both models' log-probabilities of the same token ids; "
         "use the reference model the policy was trained from, with the policy's tokenizer")
  vocab = policy.tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
  ref_vocab = reference.tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
  if vocab != ref_vocab:
    differ = sorted(set(vocab.items()) ^ set(ref_vocab.items()), key=lambda kv: (kv[1], kv[0]))
    token, index = differ[0]
    owner = "policy" if vocab.get(token) == index else "reference"
    raise InputError(f"--ref_model's tokenizer differs from the policy's: vocabularies of "
                     f"{len(vocab)} and {len(ref_vocab)} tokens (e.g. the {owner}'s token "
                     f"{token!r} = {index}); {why}", reference_path)
  ids = policy.tokenize(policy.render(TOKENIZER_PROBE, add_generation_prompt=False))
  ref_ids = reference.tokenize(reference.render(TOKENIZER_PROBE, add_generation_prompt=False))
  if len(ids) != len(ref_ids) or not np.array_equal(ids, ref_ids):
    n = min(len(ids), len(ref_ids))
    first = next((i for i in range(n) if ids[i] != ref_ids[i]), n)
    raise InputError(f"--ref_model's tokenizer renders a probe conversation to other token ids "
                     f"than the policy's ({len(ids)} and {len(ref_ids)} tokens, first difference "
                     f"at token {first}: chat templates or special tokens differ); {why}",
                     reference_path)


def judge_item(item: dict, first: int, second: int) -> dict:
  """The judge prompt showing candidate `first` as reply A and `second` as reply B, as an item
  whose two candidates are the answers."""
  text = JUDGE_TEMPLATE.render(
      conversation=plain_messages(item["prompt"]).rstrip("\n"),
      first=item["candidates"][first], second=item["candidates"][second])
  return {"item_id": f"{item['item_id']} (judge: {first} as A, {second} as B)",
          "prompt": [{"role": "user", "content": text}], "candidates": list(JUDGE_ANSWERS)}


class Judge(Proxy):
  """Pairwise judgements by an instruction-tuned model, both orders, one answer token each."""
  name = "judge"
  extra_fields = (("position_bias", pa.float64()), ("order_agreement", pa.float64()))

  def __init__(self, templater: Templater):
    self.answer_ids = None
    probe = {"item_id": "judge answer tokens", "prompt": [{"role": "user", "content": "?"}],
             "candidates": ["x", "y"]}
    _, self.answer_ids = self._answers_only(templater.encode(0, judge_item(probe, 0, 1)),
                                            templater)

  def settings(self) -> dict:
    return {**super().settings(), "judge_template": f"{JUDGE_TEMPLATE.name}/"
            f"{JUDGE_TEMPLATE.version}", "judge_answers": list(JUDGE_ANSWERS)}

  def _answers_only(self, enc: EncodedItem,
                    templater: Templater) -> tuple[EncodedItem, tuple[int, int]]:
    """The judge prompt's two sequences cut after their answer token, checked to be one token
    after the same prompt (the first answer's id decoding to the letter)."""
    (a, b), (start, start_b) = enc.sequences, enc.response_starts
    if start != start_b or min(len(a), len(b)) <= start or not np.array_equal(a[:start],
                                                                               b[:start]):
      raise InputError(f"{enc.item_id}: the answers {' and '.join(JUDGE_ANSWERS)} do not follow "
                       "the same prompt tokens under this chat template; the judge cannot read "
                       "them at one position")
    ids = (int(a[start]), int(b[start]))
    for label, token in zip(JUDGE_ANSWERS, ids):
      text = templater.tokenizer.decode([token])
      if text.strip() != label:
        raise InputError(f"the judge's answer {label!r} is not one token in this model's "
                         f"rendering (its first token is {text!r}); the judge reads a one-token "
                         "answer")
    if self.answer_ids is not None and ids != self.answer_ids:
      raise InputError(f"{enc.item_id}: the answers are tokens {ids} here but {self.answer_ids} "
                       "in other judge prompts; the judge needs one token per answer")
    return dataclasses.replace(enc, sequences=(a[:start + 1], b[:start + 1])), ids

  def encode(self, templater, first_index, items):
    prompts, plan = [], []
    for slot, item in enumerate(items):
      for first, second in itertools.permutations(range(len(item["candidates"])), 2):
        prompts.append(judge_item(item, first, second))
        plan.append((slot, first, second))
    encoded = []
    for enc in templater.encode_many(first_index, prompts):
      if enc.truncated_tokens:
        raise InputError(f"item {enc.item_id}: the judge prompt is over --max_length="
                         f"{templater.max_length} tokens; judge prompts are never truncated "
                         "(they would lose the instruction or a reply): raise --max_length")
      encoded.append(self._answers_only(enc, templater)[0])
    return encoded, plan

  def tokens_naive(self, encoded, plan, item_pairs):
    """Each judge prompt's two answers as two full sequences."""
    del plan, item_pairs
    return every_sequence_tokens(encoded)

  def rows(self, items, encoded, plan, values, counts):
    del counts
    offsets = packing.candidate_offsets(encoded)[:-1]                   # [prompts]
    log_p = values[:, 0]                                                # [2 * prompts]
    first_minus_second = log_p[offsets] - log_p[offsets + 1]           # [prompts]
    orders = [np.zeros((len(it["candidates"]),) * 2) for it in items]  # [K, K] each
    for m, (slot, first, second) in zip(first_minus_second, plan):
      orders[slot][first, second] = m
    out = []
    for item, m in zip(items, orders):
      k = m.shape[0]
      others = max(k - 1, 1)
      margin = (m - m.T) / 2                                            # [K, K]
      bias = (m + m.T) / 2                                              # [K, K], 0 on the diagonal
      agree = (m * m.T < 0).astype(np.float64)                          # [K, K]
      for c in range(k):
        out.append({"item_id": str(item["item_id"]), "candidate": c,
                    "reward": float(margin[c].sum() / others),
                    "position_bias": float(bias[c].sum() / others),
                    "order_agreement": float(agree[c].sum() / others)})
    return out

  def schema(self) -> pa.Schema:
    return pa.schema([("item_id", pa.string()), ("candidate", pa.int32()),
                      ("reward", pa.float64()), *self.extra_fields])

  def summary(self, folder):
    """The position bias and order agreement over every compared pair of the folder's scores (a
    resumed run's too): an item's pairs' mean is its candidates' mean (each candidate is in K - 1
    of its K (K - 1) / 2 pairs)."""
    by_item: dict[str, list[dict]] = {}
    for row in tables.read_rows(folder, "scores"):
      by_item.setdefault(str(row["item_id"]), []).append(row)
    pairs = bias = agreement = 0.0
    for candidates in by_item.values():
      k = len(candidates)
      n = k * (k - 1) / 2
      pairs += n
      bias += n * np.mean([r["position_bias"] for r in candidates])
      agreement += n * np.mean([r["order_agreement"] for r in candidates])
    return {"judge": {
        "template": f"{JUDGE_TEMPLATE.name}/{JUDGE_TEMPLATE.version}",
        "answer_tokens": dict(zip(JUDGE_ANSWERS, self.answer_ids)),
        "pairs": int(pairs), "prompts": int(2 * pairs),
        "position_bias": bias / pairs if pairs else None,
        "order_agreement": agreement / pairs if pairs else None}}


def make(name: str, *, model, templater: Templater, objective: Objective = Objective(),
         reference: dict | None = None, length_normalize: bool = False) -> Proxy:
  """The proxy `name` (from `resolve`) for `model`; `reference` identifies the implicit reward's
  reference model (see `shards.model_identity`)."""
  if name != "none" and (objective.index is not None or objective.weights):
    raise InputError(f"--objective and --objective_weights pick an output of a score head; "
                     f"--proxy={name} has none")
  if name == "none":
    return ScoreHead(model.config.num_labels, objective, model.config.reward_head)
  if name == "loglik":
    return LogLik()
  if name == "implicit":
    if reference is None:
      raise InputError("--proxy=implicit needs --ref_model (the reference model, e.g. the SFT "
                       "model the policy was trained from with DPO)")
    return Implicit(reference, length_normalize)
  return Judge(templater)
