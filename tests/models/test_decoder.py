"""What only the decoder family has: config reading, refusals and fused-tensor reads of its
variants (Gemma 3, OLMo 2, Phi-3, InternLM2), and rewards blind to the padding side. Every variant's
outputs are checked against PyTorch in test_family_parity.py and, through the scoring engine, in
tests/scoring/test_engine_families.py."""

from __future__ import annotations

import concurrent.futures
import json
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import pytest
import safetensors.numpy

from socialrm_jax.base.errors import InputError
from socialrm_jax.models import decoder, families, load_reward_model, weights
from tests.helpers import family_cases, internlm2_reference, model_fixtures


def _config(folder) -> dict:
  return json.loads((folder / "config.json").read_text())


def test_old_style_gemma3_configs_read_like_new_ones(tmp_path):
  """transformers 4.x: `rope_theta` + `rope_scaling` for the global layers, `rope_local_base_freq`
  for the sliding ones, `sliding_window_pattern` instead of `layer_types`."""
  folder = model_fixtures.save_tiny_hf_model(
      tmp_path, "Gemma3ForCausalLM", num_hidden_layers=4, sliding_window=3,
      layer_types=["sliding_attention", "full_attention"] * 2,
      rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 8.0},
                       "sliding_attention": {"rope_type": "default", "rope_theta": 20.0}})
  new = _config(folder)
  old = {k: v for k, v in new.items() if k not in ("rope_parameters", "layer_types")}
  old.update(rope_theta=1000.0, rope_scaling={"type": "linear", "factor": 8.0},
             rope_local_base_freq=20.0, sliding_window_pattern=2)
  config = decoder.config_from_hf(new, "Gemma3ForCausalLM")
  assert decoder.config_from_hf(old, "Gemma3ForCausalLM") == config
  assert config.layer_windows == (3, None, 3, None)
  assert config.local_rope_layers == (True, False, True, False)
  assert (config.rope_type, config.rope_factor, config.local_rope_theta) == ("linear", 8.0, 20.0)
  rope = decoder.layer_rope_array(config)  # [L, H/2]: local, global, local, global
  np.testing.assert_array_equal(rope[0], rope[2])
  assert rope[1, 1] == pytest.approx(1000.0 ** -0.25 / 8.0)


def test_other_variants_scan_no_rope_frequencies(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Olmo2ForCausalLM")
  assert decoder.layer_rope_array(decoder.config_from_hf(_config(folder), "Olmo2ForCausalLM")) is None


def test_phi3_partial_rotary_from_an_old_style_config(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Phi3ForCausalLM")
  config = {k: v for k, v in _config(folder).items() if k != "rope_parameters"}
  config.update(rope_theta=100.0, partial_rotary_factor=0.75)
  read = decoder.config_from_hf(config, "Phi3ForCausalLM")
  assert (read.rotary_dim, read.rope_theta) == (6, 100.0)  # 0.75 of head_dim 8
  assert decoder.rope_inverse_frequencies(read).shape == (3,)


@pytest.mark.parametrize("rope_type", ["longrope", "su"])
def test_phi3_longrope_is_refused_saying_why(tmp_path, rope_type):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Phi3ForSequenceClassification")
  config = _config(folder)
  config["rope_parameters"] = {"rope_type": rope_type, "rope_theta": 10000.0,
                               "short_factor": [1.0] * 4, "long_factor": [2.0] * 4}
  (folder / "config.json").write_text(json.dumps(config))
  with pytest.raises(InputError, match=f"unsupported rope type '{rope_type}': Phi-3's long-context"):
    load_reward_model(folder)


def test_multimodal_gemma3_is_refused_naming_the_text_classes(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(
      {"architectures": ["Gemma3ForSequenceClassification"], "model_type": "gemma3",
       "text_config": {"hidden_size": 32}, "vision_config": {"hidden_size": 16}}))
  safetensors.numpy.save_file({"score.weight": np.zeros((1, 32), np.float32)},
                              tmp_path / "model.safetensors")
  with pytest.raises(InputError, match="multimodal Gemma 3 .* not implemented; the text-only "
                     "Gemma3TextForSequenceClassification"):
    load_reward_model(tmp_path)
  assert "Gemma3ForSequenceClassification" not in families.supported_architectures()


def test_gemma3_as_an_encoder_is_refused(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Gemma3TextForSequenceClassification")
  config = dict(_config(folder), use_bidirectional_attention=True)
  with pytest.raises(ValueError, match="use_bidirectional_attention"):
    decoder.config_from_hf(config, "Gemma3TextForSequenceClassification")


def test_internlm2_dynamic_rope_refuses_rows_past_max_position_embeddings(tmp_path):
  internlm2_reference.save_tiny_internlm2(
      tmp_path, max_position_embeddings=8, rope_scaling={"type": "dynamic", "factor": 2.0})
  model = load_reward_model(tmp_path)
  assert model.config.rope_max_positions == 8 and model.config.num_labels == 1
  model(*model_fixtures.random_batch([8, 5], 8, padding_side="right"))  # up to 8: the plain RoPE
  with pytest.raises(InputError, match="rows of 9 tokens: InternLM2ForRewardModel's dynamic RoPE"):
    model(*model_fixtures.random_batch([9, 5], 9, padding_side="right"))


def test_the_new_architectures_are_registered():
  supported = families.supported_architectures()
  for name, head in [("Gemma3TextForSequenceClassification", "score"), ("Gemma3ForCausalLM", "lm"),
                     ("Olmo2ForSequenceClassification", "score"), ("Olmo2ForCausalLM", "lm"),
                     ("Phi3ForSequenceClassification", "score"), ("Phi3ForCausalLM", "lm"),
                     ("InternLM2ForRewardModel", "score"), ("InternLM2ForCausalLM", "lm")]:
    assert supported[name] == head and families.family_for(name) is decoder


class _RecordingTensors:
  """A checkpoint's tensors that records which rows of each tensor were read."""

  def __init__(self, tensors: dict[str, np.ndarray]):
    self.tensors, self.reads = tensors, []

  def keys(self):
    return self.tensors.keys()

  def shape(self, name):
    return self.tensors[name].shape

  def dtype(self, name):
    return self.tensors[name].dtype

  def get(self, name, index=()):
    self.reads.append((name, index))
    return self.tensors[name][index]


@pytest.mark.parametrize("architecture", ["Phi3ForCausalLM", "InternLM2ForCausalLM"])
def test_a_device_reads_only_its_rows_of_a_fused_tensor(tmp_path, architecture):
  """A shard of q (or k, v, gate, up) split over heads reads only those rows of `qkv_proj` /
  `gate_up_proj` / `wqkv`, and equals the whole parameter cut."""
  if architecture == "InternLM2ForCausalLM":
    internlm2_reference.save_tiny_internlm2(tmp_path, architecture, num_key_value_heads=2)
    hf = internlm2_reference.default_config(num_key_value_heads=2)
    fused = {"q": "wqkv", "k": "wqkv", "v": "wqkv"}
  else:
    model_fixtures.save_tiny_hf_model(tmp_path, architecture, subdir=".")
    hf = _config(tmp_path)
    fused = {"q": "qkv_proj", "k": "qkv_proj", "v": "qkv_proj", "gate": "gate_up_proj",
             "up": "gate_up_proj"}
  config = decoder.config_from_hf(hf, architecture)
  source = weights.SafetensorsSource(tmp_path)
  tensors = _RecordingTensors({name: source.get(name) for name in source.keys()})
  sources = decoder.weight_sources(config)
  pool = concurrent.futures.ThreadPoolExecutor(2)
  for part, tensor in fused.items():
    path = f"layers/{'mlp' if part in ('gate', 'up') else 'attn'}/{part}_proj/kernel"
    spec = sources[path]
    shape = (config.num_layers,) + (
        (config.intermediate_size,) if part in ("gate", "up") else
        (config.num_heads if part == "q" else config.num_kv_heads, config.head_dim)) + (
            config.hidden_size,)  # [L, out..., in]: a Linear's rows lead
    full_index = tuple(slice(0, n) for n in shape)
    full = weights._read_shard(path, spec, shape, full_index, tensors, pool)
    half = shape[1] // 2  # the second of two devices: heads (or MLP rows) [half, end)
    index = full_index[:1] + (slice(half, shape[1]),) + full_index[2:]
    tensors.reads.clear()
    shard = weights._read_shard(path, spec, shape, index, tensors, pool)
    np.testing.assert_array_equal(shard, full[:, half:])
    start, stop = spec.hf_span or (0, tensors.shape(tensors.reads[0][0])[0])
    for name, hf_index in tensors.reads:  # one per layer: the second half of its rows
      assert tensor in name and hf_index[0] == slice((start + stop) // 2, stop), (part, hf_index)
    # A shard that cuts an InternLM2 group of query heads reads the whole tensor, then cuts.
    odd = full_index[:1] + (slice(1, shape[1]),) + full_index[2:]
    np.testing.assert_array_equal(weights._read_shard(path, spec, shape, odd, tensors, pool),
                                  full[:, 1:])


def test_padding_side_does_not_change_rewards(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Gemma2ForSequenceClassification",
                                             **family_cases.DECODER_SETTINGS["Gemma2"])
  model = load_reward_model(folder)
  lengths, seq_len = [5, 12, 9, 1], 12
  left = model(*model_fixtures.random_batch(lengths, seq_len, padding_side="left"))
  right = model(*model_fixtures.random_batch(lengths, seq_len, padding_side="right"))
  np.testing.assert_allclose(np.asarray(left), np.asarray(right), atol=1e-5)
