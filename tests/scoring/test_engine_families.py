"""Reward models of each family through the scoring engine (templated or paired items, packed rows,
shared prompts: what `python -m socialrm_jax.main.score` runs) equal their PyTorch class scoring
each full sequence alone. The families' own forward passes are checked in
tests/models/test_family_parity.py; Llama and GPT-2 through the engine in test_engine.py."""

from __future__ import annotations

import functools
import pathlib
import subprocess

import numpy as np
import pytest

from socialrm_jax.base import tables
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import engine
from tests.helpers import internlm2_reference
from tests.helpers import model_fixtures as mf
from tests.helpers import scoring_fixtures as fx

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOLERANCE = 1e-4
# Several items a row, so packing is exercised.
OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=512, chunk_size=4,
                                smallest_bucket=64)
# One row length (a single compilation) for the larger item set.
ONE_BUCKET = engine.ScoringOptions(max_length=256, tokens_per_batch=512, chunk_size=4,
                                   smallest_bucket=256)
# Three candidates sharing each BBQ prompt, and a multi-turn conversation.
FEW_ITEMS = fx.bbq_items()[:3] + fx.hh_items()[:1]
REWARD_TOKEN = 5  # InternLM2's `reward_token_id` here: an id of the tiny vocabulary

# Each decoder family's switches on, windows short enough to cut into the shared prompts.
HF_DECODERS = {
    "Gemma3TextForSequenceClassification": dict(
        sliding_window=8, layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 10000.0,
                                            "factor": 4.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}}),
    "Olmo2ForSequenceClassification": dict(),
    "Phi3ForSequenceClassification": dict(
        sliding_window=8, rope_parameters={"rope_type": "default", "rope_theta": 100.0,
                                           "partial_rotary_factor": 0.5}),
}


def decoder_rm(folder: pathlib.Path, seed: int, *, architecture: str):
  """A tiny random decoder `architecture` and the chat tokenizer in `folder` -> (items -> the
  expected reward of each (item_id, candidate), the tokenizer)."""
  tokenizer = fx.train_chat_tokenizer(folder)
  ids = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
             bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
             max_position_embeddings=512)
  if architecture == "InternLM2ForRewardModel":
    reference = internlm2_reference.save_tiny_internlm2(folder, architecture, **ids, seed=seed,
                                                        reward_token_id=REWARD_TOKEN)
    # InternLM2's reward model scores at the reward token its `get_score` appends.
    return (lambda items: fx.torch_rewards(reference, tokenizer, items, appended=[REWARD_TOKEN]),
            tokenizer)
  mf.save_tiny_hf_model(folder.parent, architecture, subdir=folder.name, seed=seed, **ids,
                        **HF_DECODERS[architecture])
  reference = mf.hf_reference(folder, architecture)
  return lambda items: fx.torch_rewards(reference, tokenizer, items), tokenizer


def openassistant_rm(folder: pathlib.Path, seed: int):
  """OpenAssistant's GPTNeoXRewardModel (the wheel's class) and the chat tokenizer in `folder`."""
  tok = fx.train_chat_tokenizer(folder)
  model = mf.build_redrawn("GPTNeoXRewardModel", dict(mf.NEOX, rotary_pct=0.25, pooling="last"),
                           seed, vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                           bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
  model.save_pretrained(folder, safe_serialization=True)
  return lambda items: fx.torch_rewards(model, tok, items), tok


def deberta_rm(folder: pathlib.Path, seed: int):
  """A DeBERTa-v3 reward model and its SentencePiece tokenizer in `folder`: (question, answer)
  pairs, as reward-model-deberta-v3-large-v2 reads them."""
  tok = mf.deberta_v3_tokenizer(folder, fx.item_texts(fx.all_items()))
  model = mf.build_redrawn("DebertaV2ForSequenceClassification", mf.DEBERTA_V3, seed,
                           vocab_size=len(tok), pad_token_id=tok.pad_token_id, num_labels=1)
  model.save_pretrained(folder, safe_serialization=True)
  return lambda items: mf.reference_rewards_of_pairs(model, tok, items), tok


# case -> (builder, seed, items, options, prompts shared: decoders share each item's prompt).
CASES = {
    **{arch: (functools.partial(decoder_rm, architecture=arch), 0, FEW_ITEMS, OPTIONS, True)
       for arch in [*HF_DECODERS, "InternLM2ForRewardModel"]},
    "GPTNeoXRewardModel": (openassistant_rm, 12, fx.all_items(), ONE_BUCKET, True),
    "DebertaV2ForSequenceClassification": (deberta_rm, 11, fx.all_items(), ONE_BUCKET, False),
}


def _scored(folder) -> dict:
  return {k: r["reward"] for k, r in fx.scores_by_key(tables.read_rows(folder, "scores")).items()}


@pytest.mark.parametrize("case", list(CASES))
def test_engine_scores_equal_the_pytorch_class_on_each_sequence_alone(tmp_path, case):
  build, seed, items, options, shares_prompts = CASES[case]
  expected_for, tokenizer = build(tmp_path / "rm", seed)
  run = engine.score_items(load_reward_model(tmp_path / "rm"), items, tmp_path / "scores",
                           options=options)
  expected = expected_for(items)
  assert fx.max_abs_diff(expected, _scored(tmp_path / "scores")) <= TOLERANCE
  assert np.std(list(expected.values())) > 0.05  # rewards differ: the check is not vacuous
  if shares_prompts:  # fewer tokens computed than the candidates' full sequences
    full = sum(len(s) for item in items for s in fx.reference_sequences(tokenizer, item)[0])
    assert run["tokens_computed"] < 0.6 * full


@pytest.mark.slow
def test_socialrm_score_command_scores_gpt_neox_and_deberta(tmp_path):
  """`python -m socialrm_jax.main.score` on both families' folders, as a user runs it."""
  items = fx.all_items()
  tables.write_rows(tmp_path / "items" / "items.jsonl", items)
  for name, build, seed in (("neox", openassistant_rm, 13), ("deberta", deberta_rm, 14)):
    expected = build(tmp_path / name, seed)[0](items)
    subprocess.run(fx.score_command(tmp_path / name, tmp_path / "items", tmp_path / f"{name}-out"),
                   env=fx.subprocess_env(), check=True, timeout=400)
    assert fx.max_abs_diff(expected, _scored(tmp_path / f"{name}-out")) <= TOLERANCE
