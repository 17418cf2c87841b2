"""Tiny random checkpoints of every registered model family, each saved by its reference class.

`CASES` maps a case name to a `Case`: the architecture written in config.json and how to build it
(a transformers class, OpenAssistant's GPTNeoXRewardModel from the rewardbench wheel, or InternLM2's
published code restated in PyTorch). Every architecture `families.supported_architectures()`
lists has at least one case; each case turns on the switches that make its family differ from the
plain one (windows shorter than the rows, soft-caps that bite, scaled RoPE, partial rotary, biases,
several labels, tied and untied LM heads, DeBERTa's buckets). `tests/models/conftest.py` builds
them lazily, once a session; `tests/models/test_family_parity.py` runs the shared checks on them.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable

import numpy as np
import torch
import transformers

from tests.helpers import internlm2_reference
from tests.helpers import model_fixtures as mf

PAD_ID = mf.PAD_TOKEN_ID  # never a real token here, so HF's pad-id pooling finds the last token
# A row longer than DeBERTa's bucket span and the decoders' windows (3) and original RoPE context
# (4), rows shorter than both, and a single token.
LENGTHS = (30, 12, 7, 1)
SEQ_LEN = max(LENGTHS)
# Positions reach sum(LENGTHS) in a row whose candidates share the first sequence as a prefix.
MAX_POSITIONS = 64


def sequences(seed: int) -> list[np.ndarray]:
  """Rows of LENGTHS random real tokens (int arrays), drawn from `seed`."""
  rng = np.random.default_rng(seed)
  return [rng.integers(3, PAD_ID, size=length) for length in LENGTHS]


@dataclasses.dataclass(frozen=True)
class Case:
  architecture: str  # config.json's `architectures`: what `load_reward_model` dispatches on
  # Saves a checkpoint into the (new) folder and returns the reference module, in eval mode.
  build: Callable[[pathlib.Path], torch.nn.Module]


def _transformers_redrawn(architecture: str, seed: int = 0, **settings) -> Case:
  """transformers' `architecture` on `model_fixtures.TINY_CONFIGS`, every weight redrawn."""
  def build(folder: pathlib.Path) -> torch.nn.Module:
    mf.save_tiny_hf_model(folder.parent, architecture, subdir=folder.name, seed=seed,
                          max_position_embeddings=MAX_POSITIONS, **settings)
    return mf.hf_reference(folder, architecture)
  return Case(architecture, build)


# Far above HF's 0.02: with the default, pre-activations stay so small that gelu's tanh
# approximation, or a missing attention scale, would pass unnoticed.
INIT_STDDEV = 0.2


def _transformers_initialized(architecture: str, seed: int, num_labels: int = 1, **extra) -> Case:
  """GPT-2 and BERT as their classes initialize them (norms at 1, biases at 0), at std 0.2."""
  def build(folder: pathlib.Path) -> torch.nn.Module:
    common = dict(vocab_size=mf.VOCAB_SIZE, num_labels=num_labels, pad_token_id=PAD_ID,
                  initializer_range=INIT_STDDEV, **extra)
    if architecture.startswith("GPT2"):
      config = transformers.GPT2Config(n_positions=MAX_POSITIONS, n_embd=32, n_layer=2, n_head=4,
                                       bos_token_id=0, eos_token_id=0, **common)
    else:
      config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=64, max_position_embeddings=MAX_POSITIONS,
                                       **common)
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    return model
  return Case(architecture, build)


def _redrawn_class(name: str, fields: dict, seed: int) -> Case:
  """GPT-NeoX (and OpenAssistant's reward model) and DeBERTa-v2, every weight redrawn."""
  def build(folder: pathlib.Path) -> torch.nn.Module:
    model = mf.build_redrawn(name, fields, seed, vocab_size=mf.VOCAB_SIZE, pad_token_id=PAD_ID)
    model.save_pretrained(folder, safe_serialization=True)
    return model
  return Case(name, build)


def _internlm2(architecture: str, **settings) -> Case:
  """InternLM2 (remote code, never run) against its published code restated in PyTorch."""
  def build(folder: pathlib.Path) -> torch.nn.Module:
    return internlm2_reference.save_tiny_internlm2(folder, architecture, **settings)
  return Case(architecture, build)


LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 4}
GEMMA3_ROPE = {"full_attention": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
               "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}}
# Decoder families: each with the switches that make it differ from plain Llama turned on where
# they would otherwise be inert at this size.
DECODER_SETTINGS = {
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
# transformers 5 calls the text-only Gemma 3 classifier Gemma3TextForSequenceClassification.
_CLASSIFIER = {"Gemma3": "Gemma3TextForSequenceClassification"}

CASES: dict[str, Case] = {}
for _family, _settings in DECODER_SETTINGS.items():
  CASES[_CLASSIFIER.get(_family, _family + "ForSequenceClassification")] = _transformers_redrawn(
      _CLASSIFIER.get(_family, _family + "ForSequenceClassification"), **_settings)
  CASES[_family + "ForCausalLM"] = _transformers_redrawn(_family + "ForCausalLM", **_settings)
CASES.update({
    # Other RoPE scaling and the optional biases; several labels.
    "llama_linear_rope_biases": _transformers_redrawn(
        "LlamaForSequenceClassification",
        rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 4.0},
        attention_bias=True, mlp_bias=True),
    "gemma_attention_bias": _transformers_redrawn("GemmaForSequenceClassification",
                                                  attention_bias=True),
    "llama_three_labels": _transformers_redrawn("LlamaForSequenceClassification", num_labels=3),
    "qwen3_three_labels": _transformers_redrawn("Qwen3ForSequenceClassification", num_labels=3,
                                                head_dim=16),
    # InternLM2's reward model with attention biases and dynamic RoPE (plain up to
    # max_position_embeddings), the causal LM with linear RoPE scaling; both with two query heads
    # per key/value head.
    "InternLM2ForRewardModel": _internlm2("InternLM2ForRewardModel", bias=True,
                                          rope_scaling={"type": "dynamic", "factor": 2.0}),
    "InternLM2ForCausalLM": _internlm2("InternLM2ForCausalLM",
                                       rope_scaling={"type": "linear", "factor": 3.0}),
    # GPT-2 and BERT: a single-score head (also with GPT-2's per-layer attention scaling), a
    # multi-label head, tied and untied LM heads, a bare encoder.
    "GPT2ForSequenceClassification": _transformers_initialized("GPT2ForSequenceClassification", 0),
    "GPT2ForSequenceClassification-layer-scaled": _transformers_initialized(
        "GPT2ForSequenceClassification", 1, scale_attn_by_inverse_layer_idx=True),
    "GPT2LMHeadModel": _transformers_initialized("GPT2LMHeadModel", 2),
    "GPT2LMHeadModel-untied": _transformers_initialized("GPT2LMHeadModel", 3,
                                                        tie_word_embeddings=False),
    "BertForSequenceClassification": _transformers_initialized("BertForSequenceClassification", 4,
                                                               num_labels=3),
    "BertModel": _transformers_initialized("BertModel", 5),
    # GPT-NeoX and DeBERTa-v2: every switch of each family once.
    "GPTNeoXRewardModel": _redrawn_class("GPTNeoXRewardModel",
                                         dict(mf.NEOX, rotary_pct=0.25, pooling="last"), 0),
    "GPTNeoXForSequenceClassification": _redrawn_class(
        "GPTNeoXForSequenceClassification", dict(mf.NEOX, rotary_pct=0.5, num_labels=1), 1),
    "GPTNeoXForSequenceClassification-sequential": _redrawn_class(
        "GPTNeoXForSequenceClassification",
        dict(mf.NEOX, rotary_pct=1.0, use_parallel_residual=False, attention_bias=False,
             num_labels=2), 2),
    "GPTNeoXForCausalLM": _redrawn_class("GPTNeoXForCausalLM", dict(mf.NEOX, rotary_pct=0.25), 3),
    "GPTNeoXForCausalLM-tied": _redrawn_class(
        "GPTNeoXForCausalLM", dict(mf.NEOX, rotary_pct=0.25, tie_word_embeddings=True), 4),
    "DebertaV2ForSequenceClassification": _redrawn_class(
        "DebertaV2ForSequenceClassification", dict(mf.DEBERTA_V3, num_labels=1), 5),
    # DeBERTa-v2 style: its own position projections, unbucketed relative positions clipped at a
    # small span, absolute positions and token types added, one term only, two labels.
    "DebertaV2ForSequenceClassification-v2": _redrawn_class(
        "DebertaV2ForSequenceClassification",
        dict(mf.DEBERTA_V3, share_att_key=False, position_buckets=-1, max_relative_positions=6,
             norm_rel_ebd="none", position_biased_input=True, type_vocab_size=2,
             pos_att_type="c2p", num_labels=2), 6),
})

# The checks that load, convert or re-run a model in other layouts run on one case of each family
# and head kind, and on the variants whose weights or layout differ (untied LM head, DeBERTa-v2).
REPRESENTATIVES = [
    "LlamaForSequenceClassification", "Gemma2ForCausalLM", "InternLM2ForRewardModel",
    "GPT2ForSequenceClassification", "GPT2LMHeadModel", "GPT2LMHeadModel-untied",
    "BertForSequenceClassification", "BertModel",
    "GPTNeoXRewardModel", "GPTNeoXForCausalLM",
    "DebertaV2ForSequenceClassification", "DebertaV2ForSequenceClassification-v2",
]
