"""Decoder family vs transformers' PyTorch reference on tiny random checkpoints.

Every architecture runs with the switches that make it differ from plain Llama turned on where they
would otherwise be inert at this size: Llama 3.1 RoPE scaling with a short original context,
windows shorter than the sequences (Mistral, Qwen2, Gemma 2), Gemma 2 soft-caps that bite, a
`head_dim` unlike hidden/heads (Qwen3). Rewards (score heads) and per-token log-probs (LM heads)
must agree within 1e-4 with left and with right padding.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import pytest
import torch

from tests.helpers import internlm2_reference
from tests.helpers import model_fixtures
from socialrm_jax.models import load_reward_model

TOLERANCE = 1e-4
LENGTHS = [5, 12, 9, 1]  # a window of 3 and an original context of 4 both matter at 12
SEQ_LEN = 12

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 4}
GEMMA3_ROPE = {"full_attention": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
               "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}}
FAMILY_SETTINGS = {
    "Llama": dict(rope_parameters=LLAMA3_ROPE),
    "Mistral": dict(sliding_window=3),
    "Qwen2": dict(use_sliding_window=True, sliding_window=3, max_window_layers=1),
    "Qwen3": dict(head_dim=16),
    "Gemma": dict(),
    "Gemma2": dict(sliding_window=3, attn_logit_softcapping=0.5, final_logit_softcapping=2.0,
                   query_pre_attn_scalar=16),
    # One local and one global layer, each with its own RoPE (the global one scaled), q/k norms.
    "Gemma3": dict(sliding_window=3, layer_types=["sliding_attention", "full_attention"],
                   rope_parameters=GEMMA3_ROPE, query_pre_attn_scalar=16),
    "Olmo2": dict(),
    # A quarter of each head's dims rotate; every layer slides.
    "Phi3": dict(sliding_window=3, rope_parameters={"rope_type": "default", "rope_theta": 100.0,
                                                    "partial_rotary_factor": 0.5}),
}
# Extra cases: other RoPE scaling and the optional biases.
EXTRA_CASES = {
    "llama_linear_rope_biases": ("LlamaForSequenceClassification", dict(
        rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 4.0},
        attention_bias=True, mlp_bias=True)),
    "gemma_attention_bias": ("GemmaForSequenceClassification", dict(attention_bias=True)),
    "llama_three_labels": ("LlamaForSequenceClassification", dict(num_labels=3)),
    "qwen3_three_labels": ("Qwen3ForSequenceClassification", dict(num_labels=3, head_dim=16)),
}

# transformers 5 calls the text-only Gemma 3 classifier Gemma3TextForSequenceClassification.
_CLASSIFIER = {"Gemma3": "Gemma3TextForSequenceClassification"}

CASES = {}
for _family, _settings in FAMILY_SETTINGS.items():
  for _head in ("ForSequenceClassification", "ForCausalLM"):
    _architecture = _family + _head
    if _head == "ForSequenceClassification":
      _architecture = _CLASSIFIER.get(_family, _architecture)
    CASES[_architecture] = (_architecture, _settings)
CASES.update(EXTRA_CASES)


def hf_rewards(reference, ids, mask) -> np.ndarray:
  with torch.no_grad():
    logits = reference(input_ids=torch.tensor(ids).long(),
                       attention_mask=torch.tensor(mask).long()).logits.numpy()  # [B, L]
  return logits[:, 0] if logits.shape[-1] == 1 else logits


def hf_token_logprobs(reference, ids, mask) -> np.ndarray:
  with torch.no_grad():
    logits = reference(input_ids=torch.tensor(ids).long(),
                       attention_mask=torch.tensor(mask).long()).logits  # [B, T, V]
  log_probs = torch.log_softmax(logits.float(), dim=-1)[:, :-1]
  picked = log_probs.gather(-1, torch.tensor(ids[:, 1:]).long()[..., None])[..., 0].numpy()
  scored = (mask[:, 1:] * mask[:, :-1]).astype(bool)
  return np.concatenate([np.zeros((len(ids), 1)), np.where(scored, picked, 0.0)], axis=1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_transformers_with_left_and_right_padding(tmp_path, case):
  architecture, settings = CASES[case]
  folder = model_fixtures.save_tiny_hf_model(tmp_path, architecture, **settings)
  reference = model_fixtures.hf_reference(folder, architecture)
  assert_matches_reference(load_reward_model(folder), reference, architecture)


# InternLM2 against its published code restated in PyTorch (tests/internlm2_reference.py): the
# reward model with attention biases and dynamic RoPE (plain up to max_position_embeddings), the
# causal LM with linear RoPE scaling; both with two query heads per key/value head.
INTERNLM2_CASES = {
    "reward_biases_dynamic_rope": ("InternLM2ForRewardModel", dict(
        bias=True, rope_scaling={"type": "dynamic", "factor": 2.0})),
    "causal_lm_linear_rope": ("InternLM2ForCausalLM", dict(
        rope_scaling={"type": "linear", "factor": 3.0})),
}


@pytest.mark.parametrize("case", sorted(INTERNLM2_CASES))
def test_internlm2_matches_its_published_code_with_left_and_right_padding(tmp_path, case):
  architecture, settings = INTERNLM2_CASES[case]
  reference = internlm2_reference.save_tiny_internlm2(tmp_path, architecture, **settings)
  assert_matches_reference(load_reward_model(tmp_path), reference, architecture)


def assert_matches_reference(model, reference, architecture: str) -> None:
  """Rewards (or per-token log-probs) of a left- and a right-padded batch within TOLERANCE."""
  for padding_side in ("left", "right"):
    ids, mask = model_fixtures.random_batch(LENGTHS, SEQ_LEN, padding_side=padding_side)
    if architecture.endswith("ForCausalLM"):
      ours, theirs = model.token_logprobs(ids, mask), hf_token_logprobs(reference, ids, mask)
    else:
      ours, theirs = model(ids, mask), hf_rewards(reference, ids, mask)
    ours = np.asarray(ours)
    assert ours.shape == theirs.shape, padding_side
    assert np.abs(theirs).max() > 0.1, "reference outputs too small to compare"
    np.testing.assert_allclose(ours, theirs, atol=TOLERANCE, rtol=0, err_msg=padding_side)


def test_padding_side_does_not_change_rewards(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Gemma2ForSequenceClassification",
                                             **FAMILY_SETTINGS["Gemma2"])
  model = load_reward_model(folder)
  left = model(*model_fixtures.random_batch(LENGTHS, SEQ_LEN, padding_side="left"))
  right = model(*model_fixtures.random_batch(LENGTHS, SEQ_LEN, padding_side="right"))
  np.testing.assert_allclose(np.asarray(left), np.asarray(right), atol=1e-5)
