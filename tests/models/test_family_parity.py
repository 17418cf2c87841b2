"""Every registered model family against its PyTorch reference class, on tiny random checkpoints.

The checks every family shares, each written once and parametrized over `family_cases.CASES` (every
architecture `families.supported_architectures()` lists has a case): outputs within 1e-4 of the
reference in fp32 with left and with right padding, every checkpoint tensor read, the config
through JSON, the native (orbax) checkpoint round trip, packed segments and prefix-sharing
branches equal to each sequence alone, splash attention equal to xla. The reference for each row
is the class run on that row alone, unpadded: the value a reward must have whatever padding its
batch needed (HF's own padded BERT pools position 0 even when it is a pad, so a padded HF batch is
no reference). What only one family has is checked next to this file, in `test_<family>.py`.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from flax import nnx  # noqa: E402
from safetensors import safe_open  # noqa: E402

from socialrm_jax.models import families, hf_config, trunk  # noqa: E402
from socialrm_jax.models.reward_model import load_reward_model  # noqa: E402
from tests.helpers.family_cases import (CASES, LENGTHS, PAD_ID, REPRESENTATIVES,  # noqa: E402
                                        SEQ_LEN, sequences)
from tests.helpers import model_fixtures as mf  # noqa: E402
from tests.helpers.packed_rows import run_rows, shared_prefix  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOLERANCE = 1e-4
ALL_CASES = sorted(CASES)


def head_of(case: str) -> str:
  return families.supported_architectures()[CASES[case].architecture]


def test_every_registered_family_and_architecture_has_a_case():
  family_of_case = {families.family_for(c.architecture).__name__.rsplit(".", 1)[-1]
                    for c in CASES.values()}
  assert family_of_case == set(families.FAMILY_MODULES)
  assert {c.architecture for c in CASES.values()} == set(families.supported_architectures())


def test_every_family_declares_the_whole_interface(monkeypatch):
  """Each family module declares every `ModelFamily` member itself (nothing is read with a
  default), and one that lacks a member is refused naming it."""
  for module in families.family_modules():
    assert isinstance(module, families.ModelFamily)
    assert issubclass(module.Config, hf_config.FamilyConfig)
    assert issubclass(module.Model, trunk.FamilyModel)
  gpt2 = next(m for m in families.family_modules() if m.__name__.endswith(".gpt2"))
  monkeypatch.delattr(gpt2, "BASE_MODEL_PREFIX")
  with pytest.raises(TypeError, match="gpt2 does not declare the ModelFamily interface: lacks "
                     "BASE_MODEL_PREFIX$"):
    families.family_modules()


@pytest.mark.parametrize("case", ALL_CASES)
def test_every_config_declares_the_config_interface(tiny_checkpoint, case):
  _, folder = tiny_checkpoint(case)
  architecture = CASES[case].architecture
  config = families.family_for(architecture).config_from_hf(
      json.loads((folder / "config.json").read_text()), architecture)
  assert isinstance(config, families.ModelConfig)
  assert config.head_dim * config.num_heads > 0 and config.reward_head is None


def reference_outputs(reference, rows: list[np.ndarray], head: str, padding_side: str):
  """What the model must give for `rows` padded to SEQ_LEN on `padding_side`: rewards [B] (or
  [B, L] with L > 1 labels) for a score head, the pooler's output [B, D] for a bare encoder,
  log p(token | tokens before it) [B, T] for an LM head (0 at padding and at each first token)."""
  if head == "lm":
    expected = np.zeros((len(rows), SEQ_LEN), np.float32)
    for row, seq in enumerate(rows):
      log_softmax = torch.log_softmax(mf.hf_alone(reference, seq).logits[0].float(), dim=-1).numpy()
      start = 0 if padding_side == "right" else SEQ_LEN - len(seq)
      expected[row, start + 1:start + len(seq)] = log_softmax[np.arange(len(seq) - 1), seq[1:]]
    return expected
  if head == "none":
    return np.stack([mf.hf_alone(reference, seq).pooler_output[0].numpy() for seq in rows])
  expected = np.stack([mf.hf_alone(reference, seq).logits[0].numpy() for seq in rows])
  return expected[:, 0] if expected.shape[-1] == 1 else expected


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("case", ALL_CASES)
def test_outputs_match_the_pytorch_class(tiny_checkpoint, loaded_model, case, padding_side):
  reference, _ = tiny_checkpoint(case)
  rows = sequences(seed=1)
  ids, mask = mf.pad_rows(rows, SEQ_LEN, padding_side, PAD_ID)
  model, head = loaded_model(case), head_of(case)
  if head == "lm":
    ours = model.token_logprobs(jnp.asarray(ids), jnp.asarray(mask))
  else:
    ours = model(jnp.asarray(ids), jnp.asarray(mask))
  expected = reference_outputs(reference, rows, head, padding_side)
  ours = np.asarray(ours)
  assert ours.shape == expected.shape
  np.testing.assert_allclose(ours, expected, rtol=0, atol=TOLERANCE)
  assert np.std(expected) > 0.05  # not vacuous: the outputs differ between rows and tokens


@pytest.mark.parametrize("case", ALL_CASES)
def test_weight_sources_use_every_checkpoint_tensor(tiny_checkpoint, case):
  """Each HF tensor feeds our parameters (a fused one, as GPT-2's c_attn or Phi-3's qkv_proj,
  feeds several), none is left, and none we read looks like a saved buffer the loader skips."""
  _, folder = tiny_checkpoint(case)
  architecture = CASES[case].architecture
  family = families.family_for(architecture)
  config = family.config_from_hf(json.loads((folder / "config.json").read_text()), architecture)
  with safe_open(str(folder / "model.safetensors"), framework="numpy") as tensors:
    saved = set(tensors.keys())
  used = {name for source in family.weight_sources(config).values() for name in source.hf_names}
  assert used == saved
  # DeBERTa's absolute position table is a buffer in old checkpoints and a weight where
  # `position_biased_input` is set (see `weights.check_names`).
  assert not any(family.is_saved_buffer(name) for name in used if "position_embeddings" not in name)


@pytest.mark.parametrize("family, buffers", [
    ("decoder", ["model.layers.0.self_attn.rotary_emb.inv_freq"]),
    ("gpt2", ["h.0.attn.bias", "transformer.h.11.attn.masked_bias"]),
    ("bert", ["embeddings.position_ids", "bert.embeddings.token_type_ids"]),
    ("gpt_neox", ["gpt_neox.layers.3.attention.masked_bias",
                  "gpt_neox.layers.0.attention.rotary_emb.inv_freq"]),
    ("deberta", ["deberta.embeddings.position_ids"]),
])
def test_saved_buffers_are_told_apart_from_weights(family, buffers):
  """Old checkpoints carry buffers the loader may skip (the weights it reads are checked above)."""
  module = next(m for m in families.family_modules() if m.__name__.endswith("." + family))
  assert all(module.is_saved_buffer(name) for name in buffers)


@pytest.mark.parametrize("case", ALL_CASES)
def test_config_survives_json_and_is_registered(tiny_checkpoint, case):
  reference, folder = tiny_checkpoint(case)
  architecture = CASES[case].architecture
  family = families.family_for(architecture)
  hf_config = json.loads((folder / "config.json").read_text())
  config = family.config_from_hf(hf_config, architecture)
  assert family.Config.from_dict(json.loads(json.dumps(config.to_dict()))) == config
  assert config.head == head_of(case)
  if config.head == "score":  # as many labels as the reference class outputs
    assert config.num_labels == mf.hf_alone(reference, np.array([3])).logits.shape[-1]
  assert config.pad_token_id == PAD_ID


@pytest.mark.parametrize("case", REPRESENTATIVES)
def test_native_checkpoint_gives_identical_outputs(tiny_checkpoint, loaded_model, tmp_path, case):
  """HF folder -> `convert_checkpoint` -> orbax folder: the config (tuple fields included), the
  attention implementation and every output survive."""
  from socialrm_jax.main import convert_checkpoint  # defines absl flags; only this test needs it
  ids, mask = mf.pad_rows(sequences(seed=5), SEQ_LEN, "left", PAD_ID)
  source = loaded_model(case)
  convert_checkpoint.convert(str(tiny_checkpoint(case)[1]), str(tmp_path / "native"))
  native = load_reward_model(tmp_path / "native")

  assert native.family is source.family and native.config == source.config
  assert native.attention == source.attention
  if source.config.head == "lm":
    expected, got = source.token_logprobs(ids, mask), native.token_logprobs(ids, mask)
  else:
    expected, got = source(ids, mask), native(ids, mask)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


@pytest.mark.parametrize("case", REPRESENTATIVES)
def test_packed_segments_restart_positions(loaded_model, case):
  """Sequences packed in one row (a segment each), then padding: each equals itself alone in a row
  of its own, so positions (and DeBERTa's relative buckets) restart per segment."""
  module = loaded_model(case).module
  is_causal = families.family_for(CASES[case].architecture).IS_CAUSAL
  rows = sequences(seed=4)
  packed = [(seq, 0, segment, 0) for segment, seq in enumerate(rows, start=1)]
  hidden = run_rows(module, [packed] + [[(seq, 0, 1, 0)] for seq in rows], sum(LENGTHS) + 5,
                    is_causal, PAD_ID)
  start = 0
  for row, seq in enumerate(rows, start=1):
    np.testing.assert_allclose(hidden[0, start:start + len(seq)], hidden[row, :len(seq)],
                               rtol=0, atol=TOLERANCE)
    start += len(seq)


CAUSAL_REPRESENTATIVES = [c for c in REPRESENTATIVES
                          if families.family_for(CASES[c].architecture).IS_CAUSAL]


@pytest.mark.parametrize("case", CAUSAL_REPRESENTATIVES)
def test_branches_sharing_a_prefix_equal_each_sequence_alone(loaded_model, case):
  """A causal item's candidates in one row, their common prefix once: every token's hidden state
  is that of its full sequence alone (rows 1 and up)."""
  prefix, *continuations = sequences(seed=6)
  alone = [[(np.concatenate([prefix, tail]), 0, 1, 0)] for tail in continuations]
  hidden = run_rows(loaded_model(case).module, [shared_prefix(prefix, continuations)] + alone,
                    sum(LENGTHS) + 4, is_causal=True, pad_id=PAD_ID)
  start = len(prefix)
  for row, tail in enumerate(continuations, start=1):
    np.testing.assert_allclose(hidden[0, :len(prefix)], hidden[row, :len(prefix)], rtol=0,
                               atol=TOLERANCE)
    np.testing.assert_allclose(hidden[0, start:start + len(tail)],
                               hidden[row, len(prefix):len(prefix) + len(tail)], rtol=0,
                               atol=TOLERANCE)
    start += len(tail)


@pytest.mark.parametrize("case", ["GPT2LMHeadModel", "BertModel"])
def test_splash_attention_gives_the_xla_hidden_states(loaded_model, case):
  """The family model built with attention="splash" (interpreted on CPU) and the loaded weights:
  on a 128-token packed row (a row length splash takes) it equals the xla model."""
  xla_module = loaded_model(case).module
  family = families.family_for(CASES[case].architecture)
  splash_module = family.Model(xla_module.config, attention="splash")
  nnx.update(splash_module, nnx.state(xla_module, nnx.Param))
  rows = sequences(seed=9)
  if family.IS_CAUSAL:
    parts = shared_prefix(rows[0], rows[1:])
  else:  # encoders share nothing: one sequence a segment
    parts = [(seq, 0, segment, 0) for segment, seq in enumerate(rows, start=1)]
  np.testing.assert_allclose(run_rows(splash_module, [parts], 128, family.IS_CAUSAL, PAD_ID),
                             run_rows(xla_module, [parts], 128, family.IS_CAUSAL, PAD_ID), rtol=0,
                             atol=TOLERANCE)


def test_families_are_registered():
  supported = families.supported_architectures()
  assert supported["DebertaV2ForSequenceClassification"] == "score"
  assert supported["GPTNeoXRewardModel"] == "score"
  assert supported["GPTNeoXForCausalLM"] == "lm"
