"""The judge proxy: margins equal transformers' PyTorch logits on the judge prompts; they are
antisymmetric (swapping two responses flips the sign); and a model pulled toward answer "A" by a
constant keeps the same margins while the pull shows, exactly, as position bias."""

import copy
import dataclasses
import itertools
import json

import numpy as np
import pytest

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import engine, proxies
from tests.helpers import scoring_fixtures as fx

TOLERANCE = 1e-4
OPTIONS = engine.ScoringOptions(max_length=1024, tokens_per_batch=4096, chunk_size=4,
                                proxy="judge")
# The hidden unit the tiny GPT-2's final LayerNorm holds at 1 everywhere, and the pull toward A.
CONSTANT_UNIT = 0
PULL = 6.0


def items():
  """Two BBQ items (3 candidates: 6 judge prompts each) and two HH-RLHF items (multi-turn)."""
  return fx.bbq_items()[:2] + fx.hh_items()[:2]


def make_gpt2_lm(folder, pull_toward_a: float = 0.0):
  """A tiny random GPT-2 LM (untied head) with a chat template whose final LayerNorm makes hidden
  unit CONSTANT_UNIT equal 1 at every position; `pull_toward_a` is then added to the LM head's
  weight from that unit to token "A", so "A"'s logit rises by exactly that much everywhere."""
  import torch
  from transformers import GPT2Config, GPT2LMHeadModel
  tokenizer = fx.train_chat_tokenizer(folder)
  config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=1024,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id, initializer_range=0.2,
                      tie_word_embeddings=False)
  torch.manual_seed(0)
  model = GPT2LMHeadModel(config).eval()
  with torch.no_grad():
    model.transformer.ln_f.weight[CONSTANT_UNIT] = 0.0
    model.transformer.ln_f.bias[CONSTANT_UNIT] = 1.0
    model.lm_head.weight[tokenizer.convert_tokens_to_ids("A"), CONSTANT_UNIT] += pull_toward_a
  model.save_pretrained(folder, safe_serialization=True)
  return model, tokenizer


@pytest.fixture(scope="module")
def judges(tmp_path_factory):
  fair, biased = tmp_path_factory.mktemp("judge"), tmp_path_factory.mktemp("biased_judge")
  return (fair, *make_gpt2_lm(fair)), (biased, *make_gpt2_lm(biased, pull_toward_a=PULL))


def torch_first_minus_second(model, tokenizer, item, first, second) -> float:
  """log P(A) - log P(B) at the end of the judge prompt showing `first` as A, run alone."""
  import torch
  prompt = proxies.judge_item(item, first, second)["prompt"]
  ids = tokenizer(tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True),
                  add_special_tokens=False)["input_ids"]
  with torch.no_grad():
    log_p = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].double(), -1)
  a, b = (tokenizer.convert_tokens_to_ids(t) for t in proxies.JUDGE_ANSWERS)
  return float(log_p[a] - log_p[b])


def torch_judge_rows(model, tokenizer, items_) -> dict[tuple[str, int], tuple[float, float]]:
  """(reward, position bias) per candidate, from the judge prompts of both orders."""
  out = {}
  for item in items_:
    k = len(item["candidates"])
    m = np.zeros((k, k))
    for i, j in itertools.permutations(range(k), 2):
      m[i, j] = torch_first_minus_second(model, tokenizer, item, i, j)
    for c in range(k):
      others = [j for j in range(k) if j != c]
      out[(item["item_id"], c)] = (np.mean([(m[c, j] - m[j, c]) / 2 for j in others]),
                                   np.mean([(m[c, j] + m[j, c]) / 2 for j in others]))
  return out


def _score(folder, items_, output_dir):
  run = engine.score_items(load_reward_model(folder), items_, output_dir, options=OPTIONS)
  return run, fx.scores_by_key(tables.read_rows(output_dir, "scores"))


def test_judge_rewards_and_position_bias_equal_pytorch(judges, tmp_path):
  (folder, torch_model, tokenizer), _ = judges
  run, got = _score(folder, items(), tmp_path)
  expected = torch_judge_rows(torch_model, tokenizer, items())
  assert fx.max_abs_diff({k: v[0] for k, v in expected.items()},
                         {k: r["reward"] for k, r in got.items()}) <= TOLERANCE
  assert fx.max_abs_diff({k: v[1] for k, v in expected.items()},
                         {k: r["position_bias"] for k, r in got.items()}) <= TOLERANCE
  assert np.std([v[0] for v in expected.values()]) > 0.01  # not vacuous
  # Every ordered pair of every item is one judge prompt; each prompt went through the model once.
  prompts = sum(k * (k - 1) for k in (len(it["candidates"]) for it in items()))
  assert run["judge"]["prompts"] == prompts and run["judge"]["pairs"] == prompts // 2
  assert run["judge"]["answer_tokens"] == {t: tokenizer.convert_tokens_to_ids(t)
                                           for t in proxies.JUDGE_ANSWERS}
  assert run["judge"]["template"] == "judge.pairwise/1"
  assert run["proxy"] == "judge" and run["tokens_computed"] < 0.55 * run["tokens_naive"]
  manifest = json.loads((tmp_path / "manifest.json").read_text())
  assert manifest["settings"]["judge_template"] == "judge.pairwise/1"


def test_swapping_two_responses_flips_the_margin(judges, tmp_path):
  (folder, _, _), _ = judges
  original = items()
  swapped = copy.deepcopy(original)
  for item in swapped:
    item["item_id"] += "-swapped"
    item["candidates"][0], item["candidates"][1] = item["candidates"][1], item["candidates"][0]
  _, got = _score(folder, original + swapped, tmp_path)
  for item in original:
    key, swapped_key = item["item_id"], item["item_id"] + "-swapped"
    # Within an item: the two-candidate margins are antisymmetric, exactly: (m - m.T) / 2 holds
    # a - b and b - a, which float subtraction gives as each other's negation.
    if len(item["candidates"]) == 2:
      assert got[(key, 0)]["reward"] == -got[(key, 1)]["reward"]
      assert got[(swapped_key, 0)]["reward"] == pytest.approx(-got[(key, 0)]["reward"], abs=1e-5)
    # Across the swap: candidate 0 is now candidate 1, the same mean margin.
    for a, b in ((0, 1), (1, 0)):
      assert got[(key, a)]["reward"] == pytest.approx(got[(swapped_key, b)]["reward"], abs=1e-5)
    for c in range(2, len(item["candidates"])):  # the others keep their place and reward
      assert got[(key, c)]["reward"] == pytest.approx(got[(swapped_key, c)]["reward"], abs=1e-5)


def test_a_pull_toward_a_cancels_in_the_margin_and_shows_as_position_bias(judges, tmp_path):
  (fair_dir, _, _), (biased_dir, biased_torch, tokenizer) = judges
  fair_run, fair = _score(fair_dir, items(), tmp_path / "fair")
  biased_run, biased = _score(biased_dir, items(), tmp_path / "biased")
  # The pull changes log P(A) - log P(B) by exactly PULL in every prompt ...
  item = items()[0]
  assert torch_first_minus_second(biased_torch, tokenizer, item, 0, 1) > PULL / 2
  # ... so the margins (order-averaged) are unchanged, and the bias moves by PULL.
  assert fx.max_abs_diff({k: r["reward"] for k, r in fair.items()},
                         {k: r["reward"] for k, r in biased.items()}) <= TOLERANCE
  assert fx.max_abs_diff({k: r["position_bias"] + PULL for k, r in fair.items()},
                         {k: r["position_bias"] for k, r in biased.items()}) <= TOLERANCE
  assert biased_run["judge"]["position_bias"] == pytest.approx(
      fair_run["judge"]["position_bias"] + PULL, abs=TOLERANCE)
  # The biased judge answers A whatever the order: its two orders never agree.
  assert biased_run["judge"]["order_agreement"] == 0.0
  assert all(r["order_agreement"] == 0.0 for r in biased.values())


def test_over_long_judge_prompts_are_refused_not_truncated(judges, tmp_path):
  (folder, _, _), _ = judges
  options = dataclasses.replace(OPTIONS, max_length=128, smallest_bucket=64)
  with pytest.raises(InputError, match="judge prompt.*never truncated"):
    engine.score_items(load_reward_model(folder), items(), tmp_path, options=options)


def test_the_judge_reads_one_token_answers(tmp_path, monkeypatch):
  from socialrm_jax.scoring import item_tokens
  fx.train_chat_tokenizer(tmp_path, with_template=False)
  templater = item_tokens.Templater(item_tokens.load_tokenizer(tmp_path), is_causal=True,
                                    max_length=1024)
  # The plain format answers after "Assistant: ": the answer token may carry the space.
  a, b = proxies.Judge(templater).answer_ids
  assert [templater.tokenizer.decode([t]).strip() for t in (a, b)] == ["A", "B"]
  # An answer that is not one token is refused, naming it.
  monkeypatch.setattr(proxies, "JUDGE_ANSWERS", ("Absolutely", "B"))
  with pytest.raises(InputError, match="'Absolutely' is not one token"):
    proxies.Judge(templater)
