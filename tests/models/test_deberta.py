"""DeBERTa-v2/v3 and GPT-NeoX (with OpenAssistant's GPTNeoXRewardModel) against their PyTorch
classes, on tiny random checkpoints saved by those classes.

The references: transformers' own `DebertaV2ForSequenceClassification`,
`GPTNeoXForSequenceClassification` and `GPTNeoXForCausalLM`, and `GPTNeoXRewardModel` as the
rewardbench wheel ships it (models/openassistant.py, loaded by path). Each row's reference is the
class run on that sequence alone, unpadded, as in tests/test_gpt2_bert_parity.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from flax import nnx  # noqa: E402
from safetensors import safe_open  # noqa: E402

from tests.helpers import model_fixtures as mf  # noqa: E402
from tests.helpers import scoring_fixtures as fx  # noqa: E402
pytestmark = pytest.mark.usefixtures("one_torch_thread")
from socialrm_jax.base import tables  # noqa: E402
from socialrm_jax.base.errors import InputError  # noqa: E402
from socialrm_jax.models import attention, deberta, families, gpt_neox, tokenizer  # noqa: E402
from socialrm_jax.models.reward_model import load_reward_model  # noqa: E402
from socialrm_jax.scoring import engine  # noqa: E402

VOCAB = 96
PAD_ID = VOCAB - 1  # never a real token here, so HF's pad-id pooling finds the true last token
LENGTHS = (30, 7, 2)  # longer than DeBERTa's tiny bucket span, so relative positions are bucketed
SEQ_LEN = max(LENGTHS)
TOLERANCE = 1e-4
WEIGHT_STD = 0.2  # far above HF's init, so a missing scale or norm cannot pass unnoticed
WHEEL_MODELS = pathlib.Path(transformers.__file__).parents[1] / "rewardbench" / "models"


def _openassistant():
  """The rewardbench wheel's models/openassistant.py, loaded by path (the wheel's package
  imports would pull in its dependencies)."""
  spec = importlib.util.spec_from_file_location("rewardbench_openassistant",
                                                WHEEL_MODELS / "openassistant.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


OPENASSISTANT = _openassistant()

_NEOX = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=512)
# DeBERTa-v3 as reward-model-deberta-v3-large-v2 sets it up: shared keys, log buckets, LayerNormed
# relative embeddings, no absolute positions, no token types.
_DEBERTA_V3 = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=64, max_position_embeddings=512, relative_attention=True,
                   position_buckets=8, max_relative_positions=-1, norm_rel_ebd="layer_norm",
                   share_att_key=True, pos_att_type="p2c|c2p", position_biased_input=False,
                   type_vocab_size=0)

# case -> (class name, config fields): every switch of each family once.
CASES = {
    "GPTNeoXRewardModel": ("GPTNeoXRewardModel", dict(_NEOX, rotary_pct=0.25, pooling="last")),
    "GPTNeoXForSequenceClassification": (
        "GPTNeoXForSequenceClassification", dict(_NEOX, rotary_pct=0.5, num_labels=1)),
    "GPTNeoXForSequenceClassification-sequential": (
        "GPTNeoXForSequenceClassification",
        dict(_NEOX, rotary_pct=1.0, use_parallel_residual=False, attention_bias=False,
             num_labels=2)),
    "GPTNeoXForCausalLM": ("GPTNeoXForCausalLM", dict(_NEOX, rotary_pct=0.25)),
    "GPTNeoXForCausalLM-tied": ("GPTNeoXForCausalLM",
                                dict(_NEOX, rotary_pct=0.25, tie_word_embeddings=True)),
    "DebertaV2ForSequenceClassification": (
        "DebertaV2ForSequenceClassification", dict(_DEBERTA_V3, num_labels=1)),
    # DeBERTa-v2 style: its own position projections, unbucketed relative positions clipped at a
    # small span, absolute positions and token types added, one term only, two labels.
    "DebertaV2ForSequenceClassification-v2": (
        "DebertaV2ForSequenceClassification",
        dict(_DEBERTA_V3, share_att_key=False, position_buckets=-1, max_relative_positions=6,
             norm_rel_ebd="none", position_biased_input=True, type_vocab_size=2,
             pos_att_type="c2p", num_labels=2)),
}


def _model_class(name: str):
  return getattr(OPENASSISTANT, name, None) or getattr(transformers, name)


def _build(name: str, fields: dict, seed: int, **overrides) -> torch.nn.Module:
  """The class `name` with `fields`, every weight redrawn from `seed` (norms around 1)."""
  model_class = _model_class(name)
  config_class = (OPENASSISTANT.GPTNeoXRewardModelConfig if name == "GPTNeoXRewardModel"
                  else model_class.config_class)
  settings = dict(vocab_size=VOCAB, pad_token_id=PAD_ID, **fields)
  settings.update(overrides)
  config = config_class(**settings)
  config.architectures = [name]
  torch.manual_seed(seed)
  model = model_class(config).eval()
  with torch.no_grad():
    for param_name, param in model.named_parameters():
      param.normal_(0.0, WEIGHT_STD)
      if param.ndim == 1 and "norm" in param_name.lower():
        param.add_(1.0)
  return model


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
  """case -> (PyTorch model in eval mode, the folder `save_pretrained` wrote)."""
  out = {}
  for seed, (case, (name, fields)) in enumerate(CASES.items()):
    model = _build(name, fields, seed)
    folder = tmp_path_factory.mktemp(case)
    model.save_pretrained(folder, safe_serialization=True)
    out[case] = (model, folder)
  return out


@pytest.fixture(scope="module")
def load(tiny_models):
  """case -> its RewardModel, loaded once so compilations are shared."""
  return mf.cached_reward_models(tiny_models)


def _sequences(seed: int) -> list[np.ndarray]:
  rng = np.random.default_rng(seed)
  return [rng.integers(1, PAD_ID, size=length) for length in LENGTHS]




@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0] != "GPTNeoXForCausalLM"])
def test_rewards_match_the_pytorch_class(tiny_models, load, case, padding_side):
  hf_model, _ = tiny_models[case]
  sequences = _sequences(seed=1)
  ids, mask = mf.pad_rows(sequences, SEQ_LEN, padding_side, PAD_ID)
  rewards = np.asarray(load(case)(jnp.asarray(ids), jnp.asarray(mask)))
  expected = np.stack([mf.hf_alone(hf_model, seq).logits[0].numpy() for seq in sequences])
  if expected.shape[-1] == 1:
    expected = expected[:, 0]
  assert rewards.shape == expected.shape
  np.testing.assert_allclose(rewards, expected, rtol=0, atol=TOLERANCE)
  assert np.std(expected) > 0.05  # not vacuous: the rows' rewards differ


@pytest.mark.parametrize("case, padding_side", [
    ("GPTNeoXForCausalLM", "left"), ("GPTNeoXForCausalLM", "right"),
    ("GPTNeoXForCausalLM-tied", "left")])
def test_gpt_neox_token_logprobs_match_the_pytorch_class(tiny_models, load, case, padding_side):
  hf_model, _ = tiny_models[case]
  sequences = _sequences(seed=2)
  ids, mask = mf.pad_rows(sequences, SEQ_LEN, padding_side, PAD_ID)
  logprobs = np.asarray(load(case).token_logprobs(jnp.asarray(ids), jnp.asarray(mask)))
  expected = np.zeros(ids.shape, np.float32)
  for row, seq in enumerate(sequences):
    log_softmax = torch.log_softmax(mf.hf_alone(hf_model, seq).logits[0], dim=-1).numpy()
    start = 0 if padding_side == "right" else SEQ_LEN - len(seq)
    expected[row, start + 1:start + len(seq)] = log_softmax[np.arange(len(seq) - 1), seq[1:]]
  np.testing.assert_allclose(logprobs, expected, rtol=0, atol=TOLERANCE)


@nnx.jit
def _hidden(module, input_ids, positions, layout):
  return module(input_ids, positions, layout)  # [B, T, D]


def _run_rows(module, rows, length: int, is_causal: bool) -> np.ndarray:
  """[R, T, D] hidden states of packed rows, one compilation: each row's parts (tokens, first
  position, segment, branch) one after the other, then padding (see `scoring/packing.py`)."""
  shape = (len(rows), length)
  ids = np.full(shape, PAD_ID, np.int32)
  positions, segments, branches = (np.zeros(shape, np.int32) for _ in range(3))
  for r, parts in enumerate(rows):
    start = 0
    for tokens, first_position, segment, branch in parts:
      span = slice(start, start + len(tokens))
      ids[r, span], positions[r, span] = tokens, first_position + np.arange(len(tokens))
      segments[r, span], branches[r, span] = segment, branch
      start += len(tokens)
  layout = attention.Layout(jnp.asarray(segments), jnp.asarray(branches), is_causal)
  return np.asarray(_hidden(module, jnp.asarray(ids), jnp.asarray(positions), layout))


@pytest.mark.parametrize("case", ["DebertaV2ForSequenceClassification",
                                  "DebertaV2ForSequenceClassification-v2"])
def test_deberta_packed_segments_see_their_own_relative_positions(load, case):
  """Three sequences packed in one row, then padding: each equals itself alone in a row of its
  own, so the relative positions (and buckets) restart per segment."""
  sequences = _sequences(seed=4)
  packed = [(seq, 0, segment, 0) for segment, seq in enumerate(sequences, start=1)]
  hidden = _run_rows(load(case).module, [packed] + [[(seq, 0, 1, 0)] for seq in sequences],
                     sum(LENGTHS) + 5, is_causal=False)
  start = 0
  for row, seq in enumerate(sequences, start=1):
    np.testing.assert_allclose(hidden[0, start:start + len(seq)], hidden[row, :len(seq)],
                               rtol=0, atol=TOLERANCE)
    start += len(seq)


def test_gpt_neox_branches_sharing_a_prefix_equal_each_sequence_alone(load):
  """A causal item's candidates in one row, their common prefix once: every token's hidden state
  is that of its full sequence alone (rows 1 and 2)."""
  prefix, *continuations = _sequences(seed=6)
  shared = [(prefix, 0, 1, 0)] + [(tail, len(prefix), 1, branch)
                                  for branch, tail in enumerate(continuations, start=1)]
  alone = [[(np.concatenate([prefix, tail]), 0, 1, 0)] for tail in continuations]
  hidden = _run_rows(load("GPTNeoXForCausalLM").module, [shared] + alone, SEQ_LEN + 12,
                     is_causal=True)
  start = len(prefix)
  for row, tail in enumerate(continuations, start=1):
    np.testing.assert_allclose(hidden[0, :len(prefix)], hidden[row, :len(prefix)], rtol=0,
                               atol=TOLERANCE)
    np.testing.assert_allclose(hidden[0, start:start + len(tail)],
                               hidden[row, len(prefix):len(prefix) + len(tail)], rtol=0,
                               atol=TOLERANCE)
    start += len(tail)


@pytest.mark.parametrize("bucket_size, max_position", [(256, 512), (8, 512), (128, 24528)])
def test_log_buckets_match_transformers_at_every_distance(bucket_size, max_position):
  """The host table of bucketed relative positions equals HF's float32 computation everywhere
  (its ceil would move a bucket if the float steps differed)."""
  from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position
  distance = 4096
  theirs = make_log_bucket_position(torch.arange(-(distance - 1), distance), bucket_size,
                                    max_position).long().numpy()
  np.testing.assert_array_equal(deberta.log_bucket_table(distance, bucket_size, max_position),
                                theirs)


@pytest.mark.parametrize("case", list(CASES))
def test_weight_sources_use_every_checkpoint_tensor(tiny_models, case):
  _, folder = tiny_models[case]
  architecture = CASES[case][0]
  family = families.family_for(architecture)
  config = family.config_from_hf(json.loads((folder / "config.json").read_text()), architecture)
  with safe_open(str(folder / "model.safetensors"), framework="numpy") as tensors:
    saved = set(tensors.keys())
  used = {name for source in family.weight_sources(config).values() for name in source.hf_names}
  assert used == saved
  assert not any(family.is_saved_buffer(name) for name in used if "position_embeddings" not in name)


@pytest.mark.parametrize("case", list(CASES))
def test_config_survives_json(tiny_models, case):
  _, folder = tiny_models[case]
  architecture = CASES[case][0]
  family = families.family_for(architecture)
  config = family.config_from_hf(json.loads((folder / "config.json").read_text()), architecture)
  assert family.Config.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_old_style_gpt_neox_config_fields_are_read():
  """Pythia's and oasst-rm-2.1's config.json predate `rope_parameters`: `rotary_pct`,
  `rotary_emb_base`."""
  hf = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
            vocab_size=VOCAB, rotary_pct=0.25, rotary_emb_base=5000, use_parallel_residual=True,
            pooling="last")
  config = gpt_neox.config_from_hf(hf, "GPTNeoXRewardModel")
  assert (config.rotary_dims, config.rope_theta, config.num_labels) == (4, 5000.0, 1)
  assert gpt_neox.is_saved_buffer("gpt_neox.layers.3.attention.masked_bias")
  assert gpt_neox.is_saved_buffer("gpt_neox.layers.0.attention.rotary_emb.inv_freq")
  assert deberta.is_saved_buffer("deberta.embeddings.position_ids")


def test_native_checkpoint_gives_identical_deberta_rewards(tiny_models, load, tmp_path):
  """HF folder -> `convert_checkpoint` -> orbax folder: the config (its tuple field included)
  and the rewards survive."""
  from socialrm_jax.main import convert_checkpoint  # defines absl flags; only this test needs it
  case = "DebertaV2ForSequenceClassification-v2"
  convert_checkpoint.convert(str(tiny_models[case][1]), str(tmp_path / "native"))
  native = load_reward_model(tmp_path / "native")
  assert native.config == load(case).config and native.attention == "xla"
  ids, mask = mf.pad_rows(_sequences(seed=5), SEQ_LEN, "left", PAD_ID)
  np.testing.assert_array_equal(np.asarray(native(ids, mask)), np.asarray(load(case)(ids, mask)))


def _resave_config(tiny_models, case: str, tmp_path, **changes) -> pathlib.Path:
  """A copy of `case`'s folder whose config.json has `changes`."""
  source = tiny_models[case][1]
  folder = tmp_path / case
  folder.mkdir()
  (folder / "model.safetensors").symlink_to(source / "model.safetensors")
  config = json.loads((source / "config.json").read_text())
  config.update(changes)
  (folder / "config.json").write_text(json.dumps(config))
  return folder


def test_mean_pooling_is_refused_naming_the_field(tiny_models, tmp_path):
  folder = _resave_config(tiny_models, "GPTNeoXRewardModel", tmp_path, pooling="mean")
  with pytest.raises(InputError, match=r"`pooling`: 'mean' is not supported.*supported: last"):
    load_reward_model(folder)


def test_deberta_convolution_is_refused(tiny_models, tmp_path):
  folder = _resave_config(tiny_models, "DebertaV2ForSequenceClassification", tmp_path,
                          conv_kernel_size=3)
  with pytest.raises(InputError, match="conv_kernel_size"):
    load_reward_model(folder)


def test_deberta_runs_xla_attention_only(tiny_models, load):
  """Its relative-position bias is added on the xla path; the kernels take none."""
  assert load("DebertaV2ForSequenceClassification").attention == "xla"
  for kernel in ("splash", "cudnn"):
    with pytest.raises(InputError, match="relative-position bias|cudnn attention runs on gpu"):
      load_reward_model(tiny_models["DebertaV2ForSequenceClassification"][1], attention=kernel)
  assert attention.resolve("auto", backend="gpu", dtype=jnp.bfloat16, logit_cap=None,
                           has_windows=False, is_causal=False, has_position_bias=True) == "xla"
  assert attention.resolve("auto", backend="tpu", dtype=jnp.bfloat16, logit_cap=None,
                           has_windows=False, is_causal=False, has_position_bias=True) == "xla"


# End to end: converted items through the scoring engine (what `socialrm-score` runs).
# One row length (a single compilation); several items a row, so packing is exercised.
OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=512, chunk_size=4,
                                smallest_bucket=256)


def _deberta_v3_tokenizer(folder: pathlib.Path):
  """A DeBERTa-v3-style SentencePiece Unigram tokenizer over the fixture items' words, built by
  transformers' `DebertaV2Tokenizer` and saved (tokenizer.json) beside the model."""
  words = sorted({w for text in fx.item_texts(fx.all_items()) for w in text.split()})
  chars = sorted({c for w in words for c in w})
  vocab = [("[PAD]", 0.0), ("[UNK]", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[MASK]", 0.0)]
  vocab += [(f"\u2581{w}", -float(len(w))) for w in words[:200]]  # the rest split into pieces
  vocab += [(c, -20.0) for c in chars] + [(f"\u2581{c}", -21.0) for c in chars]
  tok = transformers.DebertaV2Tokenizer(vocab=vocab)
  tok.save_pretrained(folder)
  return tok


def _reference_rewards_pairs(model, tok, items) -> dict:
  """Each (question, answer) pair encoded by transformers' tokenizer, scored alone."""
  out = {}
  with torch.no_grad():
    for item in items:
      question = item["prompt"][0]["content"] if len(item["prompt"]) == 1 else "\n\n".join(
          f"{m['role'].capitalize()}: {m['content']}" for m in item["prompt"])
      for c, text in enumerate(item["candidates"]):
        enc = tok(question, text, return_tensors="pt")
        out[(item["item_id"], c)] = float(model(input_ids=enc["input_ids"]).logits[0, 0])
  return out


def _scored(folder) -> dict:
  return {k: r["reward"] for k, r in fx.scores_by_key(tables.read_rows(folder, "scores")).items()}


def test_deberta_v3_tokenizer_json_loads_as_transformers_encodes(tmp_path):
  tok = _deberta_v3_tokenizer(tmp_path)
  ours = tokenizer.load_tokenizer(tmp_path).backend_tokenizer
  for item in fx.all_items():
    question = item["prompt"][0]["content"]
    for answer in item["candidates"]:
      theirs = tok(question, answer)
      encoding = ours.encode(question, answer)
      assert encoding.ids == theirs["input_ids"]
      assert encoding.type_ids == theirs["token_type_ids"]
  assert ours.token_to_id("\u2581[UNK]") is None and tok.unk_token_id == 1


def test_deberta_folder_with_only_its_sentencepiece_model_is_refused_saying_so(tmp_path):
  (tmp_path / "spm.model").write_bytes(b"not read")
  with pytest.raises(InputError, match="no tokenizer.json.*it holds spm.model"):
    tokenizer.check_tokenizer_files(tmp_path)


def test_deberta_scores_converted_items_as_the_pytorch_class(tmp_path):
  tok = _deberta_v3_tokenizer(tmp_path / "rm")
  model = _build("DebertaV2ForSequenceClassification", _DEBERTA_V3, seed=11, vocab_size=len(tok),
                 pad_token_id=tok.pad_token_id, num_labels=1)
  model.save_pretrained(tmp_path / "rm", safe_serialization=True)
  items = fx.all_items()
  engine.score_items(load_reward_model(tmp_path / "rm"), items, tmp_path / "scores",
                     options=OPTIONS)
  expected = _reference_rewards_pairs(model, tok, items)
  assert fx.max_abs_diff(expected, _scored(tmp_path / "scores")) <= TOLERANCE
  assert np.std(list(expected.values())) > 0.05


def _openassistant_rm(folder: pathlib.Path, seed: int):
  tok = fx.train_chat_tokenizer(folder)
  model = _build("GPTNeoXRewardModel", dict(_NEOX, rotary_pct=0.25, pooling="last"), seed,
                 vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                 bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
  model.save_pretrained(folder, safe_serialization=True)
  return model, tok


def test_openassistant_gpt_neox_rm_scores_converted_items_as_the_wheel_class(tmp_path):
  model, tok = _openassistant_rm(tmp_path / "rm", seed=12)
  items = fx.all_items()
  run = engine.score_items(load_reward_model(tmp_path / "rm"), items, tmp_path / "scores",
                           options=OPTIONS)
  expected = fx.torch_rewards(model, tok, items)
  assert fx.max_abs_diff(expected, _scored(tmp_path / "scores")) <= TOLERANCE
  assert np.std(list(expected.values())) > 0.05
  full = sum(len(s) for item in items for s in fx.reference_sequences(tok, item)[0])
  assert run["tokens_computed"] < 0.6 * full  # prefix sharing was on


@pytest.mark.slow
def test_socialrm_score_command_scores_gpt_neox_and_deberta(tmp_path):
  """`python -m socialrm_jax.main.score` on both families' folders, as a user runs it."""
  neox, neox_tok = _openassistant_rm(tmp_path / "neox", seed=13)
  tok = _deberta_v3_tokenizer(tmp_path / "deberta")
  encoder = _build("DebertaV2ForSequenceClassification", _DEBERTA_V3, seed=14,
                   vocab_size=len(tok), pad_token_id=tok.pad_token_id, num_labels=1)
  encoder.save_pretrained(tmp_path / "deberta", safe_serialization=True)
  items = fx.all_items()
  tables.write_rows(tmp_path / "items" / "items.jsonl", items)
  for name, expected in (("neox", fx.torch_rewards(neox, neox_tok, items)),
                         ("deberta", _reference_rewards_pairs(encoder, tok, items))):
    subprocess.run(fx.score_command(tmp_path / name, tmp_path / "items", tmp_path / f"{name}-out"),
                   env=fx.subprocess_env(), check=True, timeout=400)
    assert fx.max_abs_diff(expected, _scored(tmp_path / f"{name}-out")) <= TOLERANCE


def test_families_are_registered():
  supported = families.supported_architectures()
  assert supported["DebertaV2ForSequenceClassification"] == "score"
  assert supported["GPTNeoXRewardModel"] == "score"
  assert supported["GPTNeoXForCausalLM"] == "lm"
