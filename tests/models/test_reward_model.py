"""Loading paths around the decoder family: sharded and bf16 safetensors, the native orbax
checkpoint, placement over a device mesh, and the checkpoints we refuse."""

from __future__ import annotations

import concurrent.futures
import json
import mmap
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
from flax import nnx

from socialrm_jax.base.errors import InputError
from socialrm_jax.models import families, load_reward_model, weights
from tests.helpers import model_fixtures
from tests.helpers.model_fixtures import hf_rewards
from tests.helpers.paths import REPO_ROOT
from tests.helpers.tolerances import float32_tolerance

LENGTHS, SEQ_LEN = [7, 3, 10], 10
BF16_TOLERANCE = 0.05  # bf16 compute on a 2-layer model; fp32 is held to 1e-4 elsewhere


def batch(padding_side="left"):
  return model_fixtures.random_batch(LENGTHS, SEQ_LEN, padding_side=padding_side)


def split_model_tolerance(folder, head: str, final_sum: str) -> float:
  """How far a tiny decoder split over `model` may come out from the unsplit one in float32
  (`tests/helpers/tolerances.py`): the split reorders each layer's sums over heads (o_proj, N H
  terms) and over the MLP's units (down_proj, I terms), then the head's output goes through a sum
  of the config's `final_sum` terms (the reward's dot over hidden_size, a log-softmax's over
  vocab_size). The head
  reads the final RMSNorm's output x^ (|x^|_2 = sqrt(D)), so a head row w sums terms with
  sum|w_i g_i x^_i| <= sqrt(D) |w * g|_2 (Cauchy-Schwarz, g the norm's weight): the magnitude."""
  config = json.loads((folder / "config.json").read_text())
  tensors = {k: v.float().numpy() for k, v in safetensors.torch.load_file(
      str(folder / "model.safetensors")).items()}
  norm, rows = tensors["model.norm.weight"], tensors[head]
  magnitude = float(np.sqrt(config["hidden_size"]) * np.linalg.norm(rows * norm, axis=1).max())
  chain = config["num_hidden_layers"] * (
      config["num_attention_heads"] * config["head_dim"] + config["intermediate_size"]) + config[final_sum]
  return float32_tolerance(chain, magnitude)


def run_python(script: str, env_extra: dict | None = None) -> str:
  extra = dict(env_extra or {})
  if "XLA_FLAGS" in extra:  # after the developer's own (tests/README.md: perturbing the kernels)
    extra["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {extra['XLA_FLAGS']}".strip()
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO_ROOT), **extra)
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


def test_buffers_of_their_own_memory_map_load_the_same_weights(tmp_path, monkeypatch):
  """A large parameter is read into a memory map of its own, its pages faulted in first; a tiny
  model's parameters all go that way when a piece is one page, and load as malloc's buffers do."""
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification")
  usual = nnx.state(load_reward_model(folder).module)
  monkeypatch.setattr(weights, "_POPULATE_PIECE_BYTES", mmap.PAGESIZE)
  mapped = nnx.state(load_reward_model(folder).module)
  for a, b in zip(jax.tree.leaves(usual), jax.tree.leaves(mapped), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  pool = concurrent.futures.ThreadPoolExecutor(2)
  buffer = weights._host_buffer((3, mmap.PAGESIZE + 1), "float32", pool)
  assert buffer.ctypes.data % mmap.PAGESIZE == 0  # a map's, where malloc's are 64-byte aligned
  buffer[...] = 1.5  # writable, and all of it there
  assert buffer.sum() == 1.5 * buffer.size


def test_bfloat16_weights_load_exactly_and_compute_in_bfloat16(tmp_path):
  architecture = "LlamaForSequenceClassification"
  folder = model_fixtures.save_tiny_hf_model(tmp_path, architecture, torch_dtype=torch.bfloat16)
  ids, mask = batch()
  # The reference upcasts the same bf16 weights to fp32: loading them must lose nothing.
  reference = hf_rewards(model_fixtures.hf_reference(folder, architecture), ids, mask)
  fp32 = np.asarray(load_reward_model(folder, dtype="float32")(ids, mask))
  np.testing.assert_allclose(fp32, reference, atol=1e-4, rtol=0)
  model = load_reward_model(folder, dtype="bfloat16")
  assert model.module.layers.attn.q_proj.kernel.get_value().dtype == np.dtype("bfloat16")
  bf16 = np.asarray(model(ids, mask))
  deviation = np.abs(bf16 - reference).max()
  print(f"bf16 vs fp32 max abs reward deviation: {deviation:.4f}")
  assert 0 < deviation < BF16_TOLERANCE


@pytest.mark.slow  # a subprocess; more than a few seconds
@pytest.mark.parametrize("architecture", ["Qwen2ForSequenceClassification", "GemmaForCausalLM"])
def test_native_checkpoint_gives_bit_identical_outputs(tmp_path, architecture):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, architecture)
  model_fixtures.save_tiny_tokenizer(folder)
  native = tmp_path / "native"
  run_python(f"""
      import sys
      from socialrm_jax.main import convert_checkpoint
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


def test_native_checkpoints_store_stacked_layers_and_format_1_still_loads(tmp_path):
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  from socialrm_jax.models import checkpoint  # pylint: disable=import-outside-toplevel
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Gemma2ForSequenceClassification",
                                             sliding_window=3)
  model = load_reward_model(folder)
  checkpoint.save(tmp_path / "native", model.module, "decoder", model.config)
  model_fixtures.save_native_per_layer(tmp_path / "format_1", model, "decoder", format_version=1)
  with ocp.StandardCheckpointer() as checkpointer:
    stacked = set(checkpointer.metadata(tmp_path / "native" / "params").item_metadata.keys())
    per_layer = set(checkpointer.metadata(tmp_path / "format_1" / "params").item_metadata.keys())
  assert "layers.attn.q_proj.kernel" in stacked and "layers.0.attn.q_proj.kernel" not in stacked
  assert {"layers.0.post_mlp_norm.scale", "layers.1.post_mlp_norm.scale"} <= per_layer
  ids, mask = batch()
  want = np.asarray(model(ids, mask))
  for name in ("native", "format_1"):
    np.testing.assert_array_equal(np.asarray(load_reward_model(tmp_path / name)(ids, mask)), want,
                                  err_msg=name)


def test_convert_checkpoint_refuses_a_non_empty_output(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification")
  from socialrm_jax.main import convert_checkpoint
  with pytest.raises(InputError, match="not empty"):
    convert_checkpoint.convert(str(folder), str(folder))


SHARDED_SCRIPT = """
    import json, numpy as np, jax
    from jax.sharding import AxisType, Mesh
    from tests.helpers import model_fixtures
    from socialrm_jax.models import checkpoint, load_reward_model
    assert jax.device_count() == 8, jax.devices()
    folder, native = {folder!r}, {native!r}
    devices = np.array(jax.devices()).reshape(4, 2)
    mesh = Mesh(devices, ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    ids, mask = model_fixtures.random_batch([7, 3, 10, 5], 10, padding_side="left")
    plain = load_reward_model(folder)
    checkpoint.save(native, plain.module, "decoder", plain.config)
    model_fixtures.save_native_per_layer(native + "_format_1", plain, "decoder", format_version=1)
    out = {{"plain": np.asarray(plain(ids, mask)).tolist()}}
    for name, path in (("hf", folder), ("native", native), ("format_1", native + "_format_1")):
      model = load_reward_model(path, mesh=mesh)
      out[name] = np.asarray(model(ids, mask)).tolist()
      attn = model.module.layers.attn
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


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_parameters_are_split_over_the_model_axis_and_outputs_unchanged(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Qwen2ForSequenceClassification")
  stdout = run_python(SHARDED_SCRIPT.format(folder=str(folder), native=str(tmp_path / "native")),
                      {"JAX_NUM_CPU_DEVICES": "8",
                       "XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
  out = json.loads(stdout.split("RESULT", 1)[1])
  # Split sums, so the rewards as close as their order allows; the three loads of one split model
  # run one program on bit-equal parameters, so they agree exactly.
  tolerance = split_model_tolerance(folder, "score.weight", "hidden_size")
  np.testing.assert_allclose(out["hf"], out["plain"], rtol=0, atol=tolerance)
  np.testing.assert_array_equal(out["native"], out["hf"])
  np.testing.assert_array_equal(out["format_1"], out["hf"])
  for source in ("hf_shards", "native_shards", "format_1_shards"):
    shards = out[source]
    # [L, N, H, D] = [2, 4, 8, 32] split on heads; [L, D, N, H] on heads; [V, D] on vocab; norms
    # replicated.
    assert shards["q_kernel"] == [[[2, 2, 8, 32]], [2, 4, 8, 32]]
    assert shards["o_kernel"] == [[[2, 32, 2, 8]], [2, 32, 4, 8]]
    assert shards["embedding"] == [[[64, 32]], [128, 32]]
    assert shards["norm"] == [[[32]], [32]]


PER_SHARD_SCRIPT = """
    import json, numpy as np, jax, jax.numpy as jnp
    from jax.sharding import AxisType, Mesh
    from tests.helpers import model_fixtures
    from socialrm_jax.models import load_reward_model, reward_model, weights
    assert jax.device_count() == 8, jax.devices()
    folder = {folder!r}

    class Recording:
      \"\"\"The folder's tensors, recording every read: (name, index).\"\"\"
      def __init__(self, tensors):
        self.tensors, self.reads = tensors, []
      def keys(self):
        return self.tensors.keys()
      def shape(self, name):
        return self.tensors.shape(name)
      def dtype(self, name):
        return self.tensors.dtype(name)
      def get(self, name, index=()):
        self.reads.append((name, [[s.start, s.stop] for s in index]))
        return self.tensors.get(name, index)

    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"),
                axis_types=(AxisType.Auto,) * 2)
    plain = load_reward_model(folder)
    family, config = plain.family, plain.config
    module = reward_model.abstract_module(family, config, jnp.float32, "xla")
    sources = family.weight_sources(config)
    tensors = Recording(weights.SafetensorsSource(folder))
    weights.load_params(module, sources, tensors, dtype=jnp.float32, mesh=mesh)
    sharded = reward_model.RewardModel(config, family, module, folder, attention="xla")

    params = weights.param_paths(module)
    plain_params = weights.param_paths(plain.module)
    split = {{}}  # HF tensor -> whether the parameter it feeds is split over "model"
    for path, source in sources.items():
      for name in source.hf_names:
        split[name] = "model" in params[path].get_value().sharding.spec
    ids, mask = model_fixtures.random_batch([7, 3, 10, 5], 10, padding_side="left")
    print("RESULT" + json.dumps({{
        "params_equal": all(np.array_equal(np.asarray(params[p].get_value()),
                                           np.asarray(plain_params[p].get_value()))
                            for p in params),
        "sharded": np.asarray(sharded.token_logprobs(ids, mask)).tolist(),
        "plain": np.asarray(plain.token_logprobs(ids, mask)).tolist(),
        "reads": tensors.reads, "shapes": {{n: tensors.shape(n) for n in tensors.keys()}},
        "split": split}}))
"""


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_each_shard_reads_only_its_slice_of_the_checkpoint(tmp_path):
  """data:2,model:4: a split parameter's tensors are read a quarter at a time, once per model
  shard (not per device); a replicated one is read whole, once."""
  folder = model_fixtures.save_tiny_hf_model(
      tmp_path, "LlamaForCausalLM", num_key_value_heads=4, attention_bias=True, mlp_bias=True,
      torch_dtype=torch.bfloat16)
  stdout = run_python(PER_SHARD_SCRIPT.format(folder=str(folder)),
                      {"JAX_NUM_CPU_DEVICES": "8",
                       "XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
  out = json.loads(stdout.split("RESULT", 1)[1])
  assert out["params_equal"]  # bit for bit; the outputs only as close as split sums allow
  # A log-probability is a logit less a log-sum-exp over the vocabulary: each moves by at most
  # the largest logit's difference, so twice the logits' bound.
  tolerance = 2 * split_model_tolerance(folder, "lm_head.weight", "vocab_size")
  np.testing.assert_allclose(out["sharded"], out["plain"], rtol=0, atol=tolerance)
  reads: dict[str, list] = {}
  for name, index in out["reads"]:
    reads.setdefault(name, []).append(index)
  assert set(reads) == set(out["shapes"])  # every tensor read
  split = [name for name, is_split in out["split"].items() if is_split]
  # Per layer: q/k/v kernels and biases, o_proj, gate/up kernels and biases, down_proj; then the
  # embedding and the LM head.
  assert len(split) == 2 * 12 + 2, split
  for name, indices in reads.items():
    if not out["split"][name]:
      assert indices == [[]], name  # whole, once
      continue
    assert len(indices) == 4, (name, indices)  # one read per model shard
    (axis,) = {len(index) - 1 for index in indices}  # the HF axis that is sliced
    size = out["shapes"][name][axis]
    assert sorted(index[axis] for index in indices) == [
        [i * size // 4, (i + 1) * size // 4] for i in range(4)], (name, indices)


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


def test_attention_is_resolved_at_load_and_recorded(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Gemma2ForSequenceClassification",
                                             sliding_window=3)
  model = load_reward_model(folder)  # "auto"
  assert model.attention == model.module.attention == "xla"  # on CPU
  with pytest.raises(InputError, match="attention='cudnn': cudnn attention runs on gpu"):
    load_reward_model(folder, attention="cudnn")
  # Splash takes sliding-window layers (the window a scanned value; xla where it cuts the row).
  assert load_reward_model(folder, attention="splash").attention == "splash"


def test_trunk_only_loading_skips_the_head(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "Gemma2ForSequenceClassification")
  model = load_reward_model(folder, head="none")
  assert model.config.head == "none" and not hasattr(model.module, "score")
  ids, mask = model_fixtures.random_batch([5, 3], 5, padding_side="left")
  pooled = np.asarray(model(ids, mask))  # the last real token's final hidden state, [B, D]
  assert pooled.shape == (2, model.config.hidden_size) and np.all(np.isfinite(pooled))
  with pytest.raises(InputError, match="carries a 'score' head"):
    load_reward_model(folder, head="lm")
