"""Loading paths around the decoder family: sharded and bf16 safetensors, the native orbax
checkpoint, placement over a device mesh, and the checkpoints we refuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import pytest
import safetensors.numpy
import torch

import model_fixtures
from socialrm_jax.errors import InputError
from socialrm_jax.models import families, load_reward_model
from test_decoder_parity import hf_rewards

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
LENGTHS, SEQ_LEN = [7, 3, 10], 10
BF16_TOLERANCE = 0.05  # bf16 compute on a 2-layer model; fp32 is held to 1e-4 elsewhere


def batch(padding_side="left"):
  return model_fixtures.random_batch(LENGTHS, SEQ_LEN, padding_side=padding_side)


def run_python(script: str, env_extra: dict | None = None) -> str:
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=TESTS_DIR, **(env_extra or {}))
  result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout


def test_multi_file_index_checkpoint_equals_single_file(tmp_path):
  single = model_fixtures.save_tiny_hf_model(tmp_path, "Qwen2ForSequenceClassification",
                                             subdir="single")
  sharded = model_fixtures.save_tiny_hf_model(tmp_path, "Qwen2ForSequenceClassification",
                                              subdir="sharded", max_shard_size="20KB")
  assert (sharded / "model.safetensors.index.json").exists()
  assert len(list(sharded.glob("*.safetensors"))) > 1
  ids, mask = batch()
  np.testing.assert_array_equal(np.asarray(load_reward_model(single)(ids, mask)),
                                np.asarray(load_reward_model(sharded)(ids, mask)))


def test_bfloat16_weights_load_exactly_and_compute_in_bfloat16(tmp_path):
  architecture = "LlamaForSequenceClassification"
  folder = model_fixtures.save_tiny_hf_model(tmp_path, architecture, torch_dtype=torch.bfloat16)
  ids, mask = batch()
  # The reference upcasts the same bf16 weights to fp32: loading them must lose nothing.
  reference = hf_rewards(model_fixtures.hf_reference(folder, architecture), ids, mask)
  fp32 = np.asarray(load_reward_model(folder, dtype="float32")(ids, mask))
  np.testing.assert_allclose(fp32, reference, atol=1e-4, rtol=0)
  model = load_reward_model(folder, dtype="bfloat16")
  assert model.module.layers[0].attn.q_proj.kernel.get_value().dtype == np.dtype("bfloat16")
  bf16 = np.asarray(model(ids, mask))
  deviation = np.abs(bf16 - reference).max()
  print(f"bf16 vs fp32 max abs reward deviation: {deviation:.4f}")
  assert 0 < deviation < BF16_TOLERANCE


@pytest.mark.parametrize("architecture", ["Qwen2ForSequenceClassification", "GemmaForCausalLM"])
def test_native_checkpoint_gives_bit_identical_outputs(tmp_path, architecture):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, architecture)
  model_fixtures.save_tiny_tokenizer(folder)
  native = tmp_path / "native"
  run_python(f"""
      import sys
      from socialrm_jax import convert_checkpoint
      sys.argv = ["convert", "--input={folder}", "--output={native}"]
      convert_checkpoint.run()
  """)
  assert (native / "socialrm_model.json").exists()
  assert not list(native.glob("*.safetensors"))
  ids, mask = batch()
  from_hf, from_native = load_reward_model(folder), load_reward_model(native)
  assert from_native.config == from_hf.config
  if architecture.endswith("ForCausalLM"):
    ours, theirs = from_hf.token_logprobs(ids, mask), from_native.token_logprobs(ids, mask)
  else:
    ours, theirs = from_hf(ids, mask), from_native(ids, mask)
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
  # The tokenizer travels with the checkpoint, byte for byte; the weights do not.
  for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
    assert (native / name).read_bytes() == (folder / name).read_bytes(), name
  assert from_native.tokenizer_path == str(native)


def test_convert_checkpoint_refuses_a_non_empty_output(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification")
  from socialrm_jax import convert_checkpoint
  with pytest.raises(InputError, match="not empty"):
    convert_checkpoint.convert(str(folder), str(folder))


SHARDED_SCRIPT = """
    import json, numpy as np, jax
    from jax.sharding import AxisType, Mesh
    import model_fixtures
    from socialrm_jax.models import checkpoint, load_reward_model
    assert jax.device_count() == 8, jax.devices()
    folder, native = {folder!r}, {native!r}
    devices = np.array(jax.devices()).reshape(4, 2)
    mesh = Mesh(devices, ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    ids, mask = model_fixtures.random_batch([7, 3, 10, 5], 10, padding_side="left")
    plain = load_reward_model(folder)
    checkpoint.save(native, plain.module, "decoder", plain.config)
    out = {{"plain": np.asarray(plain(ids, mask)).tolist()}}
    for name, path in (("hf", folder), ("native", native)):
      model = load_reward_model(path, mesh=mesh)
      out[name] = np.asarray(model(ids, mask)).tolist()
      attn = model.module.layers[0].attn
      shards = lambda v: sorted({{tuple(s.data.shape) for s in v.get_value().addressable_shards}})
      out[name + "_shards"] = {{
          "q_kernel": [shards(attn.q_proj.kernel), list(attn.q_proj.kernel.get_value().shape)],
          "o_kernel": [shards(attn.o_proj.kernel), list(attn.o_proj.kernel.get_value().shape)],
          "embedding": [shards(model.module.embedder.embedding),
                        list(model.module.embedder.embedding.get_value().shape)],
          "norm": [shards(model.module.final_norm.scale),
                   list(model.module.final_norm.scale.get_value().shape)],
      }}
    print("RESULT" + json.dumps(out))
"""


def test_parameters_are_split_over_the_model_axis_and_outputs_unchanged(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Qwen2ForSequenceClassification")
  stdout = run_python(SHARDED_SCRIPT.format(folder=str(folder), native=str(tmp_path / "native")),
                      {"JAX_NUM_CPU_DEVICES": "8",
                       "XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
  out = json.loads(stdout.split("RESULT", 1)[1])
  np.testing.assert_allclose(out["hf"], out["plain"], atol=1e-6)
  np.testing.assert_array_equal(out["native"], out["hf"])
  for source in ("hf_shards", "native_shards"):
    shards = out[source]
    # [D, N, H] = [32, 4, 8] split on heads; [N, H, D] on heads; [V, D] on vocab; norms replicated.
    assert shards["q_kernel"] == [[[32, 2, 8]], [32, 4, 8]]
    assert shards["o_kernel"] == [[[2, 8, 32]], [4, 8, 32]]
    assert shards["embedding"] == [[[64, 32]], [128, 32]]
    assert shards["norm"] == [[[32]], [32]]


def test_pickle_only_folder_is_refused_with_how_to_convert(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification")
  (folder / "model.safetensors").unlink()
  (folder / "pytorch_model.bin").write_bytes(b"not unpickled")
  with pytest.raises(InputError) as e:
    load_reward_model(folder)
  message = str(e.value)
  assert "pytorch_model.bin" in message and "arbitrary code" in message
  assert "save_pretrained(OUT, safe_serialization=True)" in message


def test_unknown_architecture_lists_the_supported_ones(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification")
  config = json.loads((folder / "config.json").read_text())
  config["architectures"] = ["FalconForCausalLM"]
  (folder / "config.json").write_text(json.dumps(config))
  with pytest.raises(InputError) as e:
    load_reward_model(folder)
  assert "FalconForCausalLM" in str(e.value)
  for supported in families.supported_architectures():
    assert supported in str(e.value)


def _with_remote_code(folder, architecture: str, sentinel) -> None:
  """Adds an `auto_map` whose module would leave `sentinel` behind if it were ever imported."""
  (folder / "modeling_custom.py").write_text(
      f"open({str(sentinel)!r}, 'w').write('imported')\nclass CustomModel: pass\n")
  config = json.loads((folder / "config.json").read_text())
  config["architectures"] = [architecture]
  config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_custom.CustomModel"}
  (folder / "config.json").write_text(json.dumps(config))


def test_auto_map_loads_our_architecture_without_running_remote_code(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification")
  sentinel = tmp_path / "remote_code_ran"
  _with_remote_code(folder, "LlamaForSequenceClassification", sentinel)
  rewards = load_reward_model(folder)(*batch())
  assert np.isfinite(np.asarray(rewards)).all()
  assert not sentinel.exists()


def test_auto_map_with_a_foreign_architecture_is_refused(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification")
  sentinel = tmp_path / "remote_code_ran"
  _with_remote_code(folder, "CustomRewardModel", sentinel)
  with pytest.raises(InputError, match="never run"):
    load_reward_model(folder)
  assert not sentinel.exists()


def test_missing_and_unexpected_tensors_are_named(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "MistralForSequenceClassification")
  tensors = safetensors.numpy.load_file(folder / "model.safetensors")
  tensors["extra.weight"] = tensors.pop("model.layers.1.mlp.up_proj.weight")
  safetensors.numpy.save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
  with pytest.raises(InputError) as e:
    load_reward_model(folder)
  assert "missing tensors: model.layers.1.mlp.up_proj.weight" in str(e.value)
  assert "unexpected tensors (not used by this architecture): extra.weight" in str(e.value)


def test_unsupported_rope_scaling_is_refused(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification")
  config = json.loads((folder / "config.json").read_text())
  config["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0}
  (folder / "config.json").write_text(json.dumps(config))
  with pytest.raises(InputError, match="unsupported rope type 'yarn'"):
    load_reward_model(folder)


def test_old_style_configs_read_like_new_ones(tmp_path):
  """Pre-5.0 config.json files: `rope_theta` + `rope_scaling` ("type"), no `layer_types`."""
  from socialrm_jax.models import decoder
  llama = model_fixtures.save_tiny_hf_model(
      tmp_path, "LlamaForCausalLM", rope_parameters=dict(
          rope_type="llama3", rope_theta=500.0, factor=8.0, low_freq_factor=1.0,
          high_freq_factor=4.0, original_max_position_embeddings=16))
  gemma2 = model_fixtures.save_tiny_hf_model(tmp_path, "Gemma2ForCausalLM", sliding_window=3)
  for folder, architecture in ((llama, "LlamaForCausalLM"), (gemma2, "Gemma2ForCausalLM")):
    new = json.loads((folder / "config.json").read_text())
    old = dict(new)
    rope = dict(old.pop("rope_parameters"))
    old["rope_theta"] = rope.pop("rope_theta")
    if rope.pop("rope_type") != "default":
      old["rope_scaling"] = dict(rope, type="llama3")
    old.pop("layer_types", None)
    assert decoder.config_from_hf(old, architecture) == decoder.config_from_hf(new, architecture)
  assert decoder.config_from_hf(new, "Gemma2ForCausalLM").layer_windows == (3, None)


def test_trunk_only_loading_skips_the_head(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Gemma2ForSequenceClassification")
  model = load_reward_model(folder, head="none")
  assert model.config.head == "none" and not hasattr(model.module, "score")
  ids, mask = model_fixtures.random_batch([5, 3], 5, padding_side="left")
  pooled = np.asarray(model(ids, mask))  # the last real token's final hidden state, [B, D]
  assert pooled.shape == (2, model.config.hidden_size) and np.all(np.isfinite(pooled))
  with pytest.raises(InputError, match="carries a 'score' head"):
    load_reward_model(folder, head="lm")
