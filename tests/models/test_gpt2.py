"""GPT-2 and BERT families against transformers' PyTorch models, on tiny random checkpoints.

Each tiny model is saved with `save_pretrained` and loaded back through `load_reward_model`, the
path every real checkpoint takes. The reference for every row is transformers run on that row
alone, unpadded: that is the value a reward must have whatever padding the batch needed (HF's own
padded BERT pools position 0 even when it is a pad, so a padded HF batch is no reference).
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from flax import nnx  # noqa: E402
from safetensors import safe_open  # noqa: E402

from tests.helpers import model_fixtures as mf  # noqa: E402

from socialrm_jax.models import attention, bert, families, gpt2, masks  # noqa: E402
from socialrm_jax.models.reward_model import load_reward_model  # noqa: E402

VOCAB = 96
# Never a real token in these tests, so GPT-2's HF pooling (last token != pad_token_id) finds the
# true last token.
PAD_ID = VOCAB - 1
MAX_POSITIONS = 32
LENGTHS = (9, 5, 2)  # a full row, a half row, a nearly empty row
SEQ_LEN = max(LENGTHS)
TOLERANCE = 1e-4
# Far above HF's 0.02: with the default, pre-activations stay so small that gelu's tanh
# approximation, or a missing attention scale, would pass unnoticed.
INIT_STDDEV = 0.2

# case -> (HF architecture, num_labels, extra config fields): a single-score head (also with
# GPT-2's per-layer attention scaling), a multi-label head, tied and untied LM heads, a bare
# encoder.
CASES = {
    "GPT2ForSequenceClassification": ("GPT2ForSequenceClassification", 1, {}),
    "GPT2ForSequenceClassification-layer-scaled": (
        "GPT2ForSequenceClassification", 1, {"scale_attn_by_inverse_layer_idx": True}),
    "GPT2LMHeadModel": ("GPT2LMHeadModel", 1, {}),
    "GPT2LMHeadModel-untied": ("GPT2LMHeadModel", 1, {"tie_word_embeddings": False}),
    "BertForSequenceClassification": ("BertForSequenceClassification", 3, {}),
    "BertModel": ("BertModel", 1, {}),
}


def _hf_config(architecture: str, num_labels: int, extra: dict):
  common = dict(vocab_size=VOCAB, num_labels=num_labels, pad_token_id=PAD_ID,
                initializer_range=INIT_STDDEV, **extra)
  if architecture.startswith("GPT2"):
    return transformers.GPT2Config(n_positions=MAX_POSITIONS, n_embd=32, n_layer=2, n_head=4,
                                   bos_token_id=0, eos_token_id=0, **common)
  return transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=64, max_position_embeddings=MAX_POSITIONS,
                                 **common)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
  """case -> (HF torch model in eval mode, folder it was saved to)."""
  out = {}
  for index, (case, (architecture, num_labels, extra)) in enumerate(CASES.items()):
    torch.manual_seed(index)
    model = getattr(transformers, architecture)(_hf_config(architecture, num_labels, extra)).eval()
    folder = tmp_path_factory.mktemp(case)
    model.save_pretrained(folder, safe_serialization=True)
    out[case] = (model, folder)
  return out


@pytest.fixture(scope="module")
def load(tiny_models):
  """case -> its RewardModel, loaded once so compilations are shared."""
  return mf.cached_reward_models(tiny_models)


@nnx.jit
def _hidden(module, input_ids, positions, layout):
  """The family model's forward pass, compiled (eager op-by-op dispatch is slow on CPU)."""
  return module(input_ids, positions, layout)  # [B, T, D]


def _sequences(seed: int) -> list[np.ndarray]:
  rng = np.random.default_rng(seed)
  return [rng.integers(1, PAD_ID, size=length) for length in LENGTHS]




@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("case", ["GPT2ForSequenceClassification",
                                  "GPT2ForSequenceClassification-layer-scaled",
                                  "BertForSequenceClassification"])
def test_rewards_match_transformers(tiny_models, load, case, padding_side):
  hf_model, _ = tiny_models[case]
  sequences = _sequences(seed=1)
  ids, mask = mf.pad_rows(sequences, SEQ_LEN, padding_side, PAD_ID)

  reward_model = load(case)
  rewards = np.asarray(reward_model(jnp.asarray(ids), jnp.asarray(mask)))

  expected = np.stack([mf.hf_alone(hf_model, seq).logits[0].numpy() for seq in sequences])
  if CASES[case][1] == 1:
    expected = expected[:, 0]  # a single-score head gives rewards [B]
  assert rewards.shape == expected.shape
  np.testing.assert_allclose(rewards, expected, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("case", ["GPT2LMHeadModel", "GPT2LMHeadModel-untied"])
def test_gpt2_token_logprobs_match_transformers(tiny_models, load, case, padding_side):
  hf_model, _ = tiny_models[case]
  sequences = _sequences(seed=2)
  ids, mask = mf.pad_rows(sequences, SEQ_LEN, padding_side, PAD_ID)

  logprobs = np.asarray(load(case).token_logprobs(jnp.asarray(ids), jnp.asarray(mask)))

  expected = np.zeros(ids.shape, np.float32)  # 0 at padding and at each first real token
  for row, seq in enumerate(sequences):
    log_softmax = torch.log_softmax(mf.hf_alone(hf_model, seq).logits[0], dim=-1).numpy()  # [L, V]
    per_token = log_softmax[np.arange(len(seq) - 1), seq[1:]]  # log p(seq[t] | seq[:t]), t >= 1
    start = 0 if padding_side == "right" else SEQ_LEN - len(seq)
    expected[row, start + 1:start + len(seq)] = per_token
  np.testing.assert_allclose(logprobs, expected, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_bert_encoder_states_and_pooled_output_match_transformers(tiny_models, load,
                                                                  padding_side):
  hf_model, _ = tiny_models["BertModel"]
  sequences = _sequences(seed=3)
  ids, mask = mf.pad_rows(sequences, SEQ_LEN, padding_side, PAD_ID)

  reward_model = load("BertModel")
  hidden = np.asarray(_hidden(
      reward_model.module, jnp.asarray(ids), masks.positions_from_mask(jnp.asarray(mask)),
      attention.from_padding_mask(jnp.asarray(mask), is_causal=False)))  # [B, T, D]
  first_real = np.asarray(masks.first_real_index(jnp.asarray(mask)))  # [B]: where [CLS] sits
  pooled = np.asarray(reward_model.module.head(
      jnp.asarray(hidden[np.arange(len(sequences)), first_real])))  # [B, D]

  for row, seq in enumerate(sequences):
    reference = mf.hf_alone(hf_model, seq)
    real = mask[row].astype(bool)
    np.testing.assert_allclose(hidden[row, real], reference.last_hidden_state[0].numpy(),
                               rtol=0, atol=TOLERANCE)
    # A bare encoder's "reward" is HF's pooler_output: tanh(dense([CLS] hidden)).
    np.testing.assert_allclose(pooled[row], reference.pooler_output[0].numpy(),
                               rtol=0, atol=TOLERANCE)


def _alone(module, seq: np.ndarray, is_causal: bool) -> np.ndarray:
  """[L, D] hidden states of `seq` scored alone, in a batch of one unpadded row."""
  ones = jnp.ones((1, len(seq)), jnp.int32)
  return np.asarray(_hidden(module, jnp.asarray(seq[None], jnp.int32),
                            jnp.arange(len(seq), dtype=jnp.int32)[None],
                            attention.from_padding_mask(ones, is_causal)))[0]


def _row(parts: list[tuple[np.ndarray, int, int, int]], length: int):
  """One packed row: each part (tokens, first position, segment, branch) after the last, then
  padding -> ids, positions, segment ids, branch ids [1, length] (see `scoring/packing.py`)."""
  ids = np.full((1, length), PAD_ID, np.int32)
  positions, segments, branches = (np.zeros((1, length), np.int32) for _ in range(3))
  start = 0
  for tokens, first_position, segment, branch in parts:
    span = slice(start, start + len(tokens))
    ids[0, span], positions[0, span] = tokens, first_position + np.arange(len(tokens))
    segments[0, span], branches[0, span] = segment, branch
    start += len(tokens)
  return ids, positions, segments, branches


def _shared_prefix(prefix: np.ndarray, continuations: list[np.ndarray]):
  """A causal item as the packer lays it out: the candidates' common prefix once (branch 0), then
  each continuation in its own branch, positions continuing the prefix's; one segment."""
  return [(prefix, 0, 1, 0)] + [(tail, len(prefix), 1, branch)
                                for branch, tail in enumerate(continuations, start=1)]


def _run_row(module, row, is_causal: bool) -> np.ndarray:
  """[T, D] hidden states of a `_row`."""
  ids, positions, segments, branches = (jnp.asarray(a) for a in row)
  layout = attention.Layout(segments, branches, is_causal)
  return np.asarray(_hidden(module, ids, positions, layout))[0]


@pytest.mark.parametrize("architecture", ["GPT2ForSequenceClassification",
                                          "BertForSequenceClassification"])
def test_packed_segments_restart_positions(load, architecture):
  """Two sequences packed in one row (two segments), then padding, equal the two scored alone."""
  module = load(architecture).module
  is_causal = families.family_for(architecture).IS_CAUSAL
  first, second = _sequences(seed=4)[:2]
  ends = np.cumsum([len(first), len(second)])
  packed = _run_row(module, _row([(first, 0, 1, 0), (second, 0, 2, 0)], ends[-1] + 3), is_causal)

  np.testing.assert_allclose(packed[:ends[0]], _alone(module, first, is_causal), rtol=0,
                             atol=TOLERANCE)
  np.testing.assert_allclose(packed[ends[0]:ends[1]], _alone(module, second, is_causal), rtol=0,
                             atol=TOLERANCE)


def test_gpt2_branches_sharing_a_prefix_equal_each_sequence_alone(load):
  """A causal item's candidates in one row, their common prefix once: every branch token's hidden
  state is that of its full sequence scored alone."""
  module = load("GPT2LMHeadModel").module
  prefix, *continuations = _sequences(seed=6)  # 9 shared tokens, then branches of 5 and 2
  packed = _run_row(module, _row(_shared_prefix(prefix, continuations), 20), is_causal=True)

  start = len(prefix)
  for tail in continuations:
    alone = _alone(module, np.concatenate([prefix, tail]), is_causal=True)
    np.testing.assert_allclose(packed[:len(prefix)], alone[:len(prefix)], rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(packed[start:start + len(tail)], alone[len(prefix):], rtol=0,
                               atol=TOLERANCE)
    start += len(tail)


@pytest.mark.parametrize("case", ["GPT2LMHeadModel", "BertModel"])
def test_splash_attention_gives_the_xla_hidden_states(load, case):
  """The family model built with attention="splash" (interpreted on CPU) and the loaded weights:
  on a 128-token packed row (a row length splash takes) it equals the xla model."""
  xla_module = load(case).module
  family = families.family_for(CASES[case][0])
  splash_module = family.Model(xla_module.config, attention="splash")
  nnx.update(splash_module, nnx.state(xla_module, nnx.Param))
  sequences = _sequences(seed=9)
  if family.IS_CAUSAL:
    parts = _shared_prefix(sequences[0], sequences[1:])
  else:  # encoders share nothing: one sequence a segment
    parts = [(seq, 0, segment, 0) for segment, seq in enumerate(sequences, start=1)]
  row = _row(parts, 128)
  np.testing.assert_allclose(_run_row(splash_module, row, family.IS_CAUSAL),
                             _run_row(xla_module, row, family.IS_CAUSAL), rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("case", list(CASES))
def test_weight_sources_use_every_checkpoint_tensor(tiny_models, case):
  """Each HF tensor feeds our parameters (the fused GPT-2 c_attn feeds three) and none is left."""
  _, folder = tiny_models[case]
  architecture = CASES[case][0]
  family = families.family_for(architecture)
  hf_config = json.loads((folder / "config.json").read_text())
  config = family.config_from_hf(hf_config, architecture)
  with safe_open(str(folder / "model.safetensors"), framework="numpy") as tensors:
    saved = set(tensors.keys())
  sources = family.weight_sources(config)
  assert {source.hf_name for source in sources.values()} == saved


@pytest.mark.parametrize("case", list(CASES))
def test_config_survives_json(tiny_models, case):
  _, folder = tiny_models[case]
  architecture, num_labels, _ = CASES[case]
  family = families.family_for(architecture)
  config = family.config_from_hf(json.loads((folder / "config.json").read_text()), architecture)
  assert family.Config.from_dict(json.loads(json.dumps(config.to_dict()))) == config
  assert config.num_labels == num_labels
  assert config.pad_token_id == PAD_ID


@pytest.mark.parametrize("family, buffers", [
    (gpt2, ["h.0.attn.bias", "transformer.h.11.attn.masked_bias"]),
    (bert, ["embeddings.position_ids", "bert.embeddings.token_type_ids"]),
])
def test_saved_buffers_are_told_apart_from_weights(tiny_models, family, buffers):
  """Old checkpoints carry buffers the loader may skip; no weight we read may look like one."""
  assert all(family.is_saved_buffer(name) for name in buffers)
  for case, (architecture, _, _) in CASES.items():
    if architecture in family.ARCHITECTURES:
      hf_config = json.loads((tiny_models[case][1] / "config.json").read_text())
      sources = family.weight_sources(family.config_from_hf(hf_config, architecture))
      assert not any(family.is_saved_buffer(source.hf_name) for source in sources.values())


@pytest.mark.parametrize("case", ["GPT2ForSequenceClassification", "GPT2LMHeadModel-untied",
                                  "BertForSequenceClassification"])
def test_native_checkpoint_gives_identical_outputs(tiny_models, load, tmp_path, case):
  """HF folder -> `convert_checkpoint` -> orbax folder: the config and every output survive."""
  from socialrm_jax.main import convert_checkpoint  # defines absl flags; only this test needs it
  ids, mask = mf.pad_rows(_sequences(seed=5), SEQ_LEN, "left", PAD_ID)
  source = load(case)
  convert_checkpoint.convert(str(tiny_models[case][1]), str(tmp_path / "native"))
  native = load_reward_model(tmp_path / "native")

  assert native.family is source.family and native.config == source.config
  if source.config.head == "lm":
    expected, got = source.token_logprobs(ids, mask), native.token_logprobs(ids, mask)
  else:
    expected, got = source(ids, mask), native(ids, mask)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_base_model_checkpoint_without_prefix_loads(tiny_models, load, tmp_path):
  """openai-community/gpt2 saves its tensors without `transformer.` (`h.0.attn.c_attn.weight`);
  transformers adds the prefix on load, and so must we."""
  from safetensors.numpy import save_file
  folder = tiny_models["GPT2LMHeadModel"][1]
  with safe_open(folder / "model.safetensors", framework="numpy") as f:
    bare = {name.removeprefix("transformer."): f.get_tensor(name) for name in f.keys()}
  assert not any(name.startswith("transformer.") for name in bare)
  (tmp_path / "bare").mkdir()
  save_file(bare, tmp_path / "bare" / "model.safetensors")
  (tmp_path / "bare" / "config.json").write_text((folder / "config.json").read_text())
  ids, mask = mf.pad_rows(_sequences(seed=7), SEQ_LEN, "right", PAD_ID)
  np.testing.assert_array_equal(
      np.asarray(load_reward_model(tmp_path / "bare").token_logprobs(ids, mask)),
      np.asarray(load("GPT2LMHeadModel").token_logprobs(ids, mask)))


def test_bare_encoder_call_returns_pooled_output(tiny_models, load):
  """`BertModel` has no score head: calling it gives the pooler's output at [CLS], [B, D]."""
  model, _ = tiny_models["BertModel"]
  ids, mask = mf.pad_rows(_sequences(seed=8), SEQ_LEN, "right", PAD_ID)
  got = np.asarray(load("BertModel")(ids, mask))
  assert got.shape == (len(LENGTHS), 32)
  for row, seq in enumerate(_sequences(seed=8)):
    np.testing.assert_allclose(got[row], mf.hf_alone(model, seq).pooler_output[0].numpy(),
                               atol=TOLERANCE)
