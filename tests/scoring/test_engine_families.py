"""Gemma 3, OLMo 2, Phi-3 and InternLM2 reward models through the scoring engine (packed rows,
shared prompts: what `python -m socialrm_jax.main.score` runs) equal their PyTorch class scoring each
full sequence alone."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import internlm2_reference
from tests.helpers import model_fixtures
from tests.helpers import scoring_fixtures as fx
from socialrm_jax.base import tables
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import engine

TOLERANCE = 1e-4
OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=512, chunk_size=4,
                                smallest_bucket=64)

# Each family's switches on, windows short enough to cut into the shared prompts.
HF_FAMILIES = {
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
FAMILIES = [*HF_FAMILIES, "InternLM2ForRewardModel"]
# Three candidates sharing each BBQ prompt, and a multi-turn conversation.
ITEMS = fx.bbq_items()[:3] + fx.hh_items()[:1]
REWARD_TOKEN = 5  # InternLM2's `reward_token_id` here: an id of the tiny vocabulary


def _reward_model(folder, architecture: str):
  """A tiny random `architecture` and the chat tokenizer in `folder`; returns the reference."""
  tokenizer = fx.train_chat_tokenizer(folder)
  ids = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
             bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
             max_position_embeddings=512)
  if architecture == "InternLM2ForRewardModel":
    return internlm2_reference.save_tiny_internlm2(folder, architecture, **ids,
                                                   reward_token_id=REWARD_TOKEN), tokenizer
  model_fixtures.save_tiny_hf_model(folder.parent, architecture, subdir=folder.name, **ids,
                                    **HF_FAMILIES[architecture])
  return model_fixtures.hf_reference(folder, architecture), tokenizer


@pytest.mark.parametrize("architecture", FAMILIES)
def test_packed_prefix_shared_scores_match_each_sequence_alone(tmp_path, architecture):
  reference, tokenizer = _reward_model(tmp_path / "rm", architecture)
  items = ITEMS
  run = engine.score_items(load_reward_model(tmp_path / "rm"), items, tmp_path / "scores",
                           options=OPTIONS)
  got = {k: r["reward"] for k, r in fx.scores_by_key(tables.read_rows(tmp_path / "scores",
                                                                      "scores")).items()}
  # InternLM2's reward model scores at the reward token its `get_score` appends.
  appended = [REWARD_TOKEN] if architecture == "InternLM2ForRewardModel" else []
  expected = fx.torch_rewards(reference, tokenizer, items, appended=appended)
  assert fx.max_abs_diff(expected, got) <= TOLERANCE
  assert np.std(list(expected.values())) > 0.05  # rewards differ: the check is not vacuous
  # The prompts were shared: fewer tokens computed than the candidates' full sequences.
  full = sum(len(s) for item in items for s in fx.reference_sequences(tokenizer, item)[0])
  assert run["tokens_computed"] < 0.6 * full
