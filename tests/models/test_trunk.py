"""Every family runs its layers through `trunk.scan_layers`: one stacked module, one traced layer
whatever the depth. Outputs against PyTorch are in test_family_parity.py; the decoder's own scanned
data (windows, RoPE) in test_decoder_scan.py."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

from socialrm_jax.models import attention, families, layers, masks, trunk, weights  # noqa: E402
from socialrm_jax.models.reward_model import load_reward_model  # noqa: E402
from tests.helpers import model_fixtures as mf  # noqa: E402
from tests.helpers.family_cases import CASES, PAD_ID, SEQ_LEN, sequences  # noqa: E402

# One case of each family (GPT-2's with a logit scale of its own per layer, scanned with it).
ONE_PER_FAMILY = ["LlamaForSequenceClassification", "GPT2ForSequenceClassification-layer-scaled",
                  "BertForSequenceClassification", "GPTNeoXForSequenceClassification",
                  "DebertaV2ForSequenceClassification"]


def family_config(tiny_checkpoint, case: str, num_layers: int):
  _, folder = tiny_checkpoint(case)
  architecture = CASES[case].architecture
  family = families.family_for(architecture)
  config = family.config_from_hf(json.loads((folder / "config.json").read_text()), architecture)
  if hasattr(config, "layer_windows"):  # the decoder keeps one window per layer
    config = dataclasses.replace(config, layer_windows=(None,) * num_layers)
  return family, dataclasses.replace(config, num_layers=num_layers)


def lowered_forward(family, config) -> str:
  """StableHLO text of the hidden states of a [2, 8] batch."""
  graphdef, state = nnx.split(family.Model(config))

  def hidden(state, input_ids, attention_mask):
    layout = attention.from_padding_mask(attention_mask, is_causal=family.IS_CAUSAL)
    return nnx.merge(graphdef, state)(input_ids, masks.positions_from_mask(attention_mask), layout)

  ids = jnp.ones((2, 8), jnp.int32)
  return jax.jit(hidden).lower(state, ids, jnp.ones_like(ids)).as_text()


@pytest.mark.parametrize("case", ONE_PER_FAMILY)
def test_every_family_traces_one_layer_whatever_the_depth(tiny_checkpoint, case):
  family, shallow = family_config(tiny_checkpoint, case, 2)
  _, deep = family_config(tiny_checkpoint, case, 6)
  shallow_program, deep_program = lowered_forward(family, shallow), lowered_forward(family, deep)
  assert shallow_program.count("dot_general") == deep_program.count("dot_general") > 0
  assert deep_program.count("stablehlo.while") == 1
  kernels = [v.get_value().shape for p, v in weights.param_paths(
      nnx.eval_shape(lambda: family.Model(deep))).items() if p.startswith("layers/")]
  assert kernels and all(shape[0] == 6 for shape in kernels)  # every layer parameter [L, ...]


@pytest.mark.parametrize("case, family", [("GPT2ForSequenceClassification", "gpt2"),
                                          ("BertForSequenceClassification", "bert")])
def test_format_2_checkpoints_of_per_layer_families_still_load(loaded_model, tmp_path, case,
                                                                family):
  model = loaded_model(case)
  mf.save_native_per_layer(tmp_path / "format_2", model, family, format_version=2)
  ids, mask = mf.pad_rows(sequences(seed=3), SEQ_LEN, "right", PAD_ID)
  np.testing.assert_array_equal(np.asarray(load_reward_model(tmp_path / "format_2")(ids, mask)),
                                np.asarray(model(ids, mask)))


@pytest.mark.parametrize("lora_rank", [0, 3])
def test_a_layers_backward_keeps_its_projections_and_attention_output_not_its_weights(
    tiny_checkpoint, lora_rank):
  """What the scanned layers leave for the backward pass under the default remat policy: the
  projections' outputs, attention's inputs (heads-major, after RoPE) and its output with its
  rows' softmax statistics, per layer; not the key and value projections' outputs (attention's
  inputs stand for them, so RoPE is not recomputed), not the logits or probabilities (attention's
  own backward recomputes them) and not each layer's slice of the stacked weights (taken inside
  the checkpoint, it is taken again, not copied)."""
  family, config = family_config(tiny_checkpoint, "LlamaForSequenceClassification", 4)
  model = family.Model(config)
  if lora_rank:  # LoRA on every projection of the layers, as `training.trainable.init_lora`
    for _, projection in nnx.iter_graph(model.layers):
      if isinstance(projection, layers.Projection):
        shape = projection.kernel.get_value().shape  # [L, out..., in...]
        fan_out = math.prod(shape[1:1 + projection.output_axes])
        fan_in = math.prod(shape[1 + projection.output_axes:])
        projection.lora_a = nnx.Param(jnp.full((shape[0], fan_in, lora_rank), 0.01))
        projection.lora_b = nnx.Param(jnp.full((shape[0], lora_rank, fan_out), 0.01))
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  length = 24  # tokens: no width of the model's, so a residual's shape says what it is
  ids = jnp.ones((1, length), jnp.int32)
  layout = attention.Layout(jnp.ones_like(ids), jnp.zeros_like(ids), is_causal=True)
  positions = jnp.arange(length)[None]
  output_index = jnp.asarray([[9, 23]])

  def hidden_sum(params):  # the last layer at the read tokens only, as the trainer runs it
    return nnx.merge(graphdef, params, rest)(ids, positions, layout,
                                             output_index=output_index).sum()

  printed = io.StringIO()
  with contextlib.redirect_stdout(printed):  # "f32[3,2,16,32] named 'x' from ..." a line
    jax.ad_checkpoint.print_saved_residuals(hidden_sum, params)
  saved = [(tuple(int(n) for n in line.split("[", 1)[1].split("]", 1)[0].split(",") if n),
            line) for line in printed.getvalue().splitlines() if "[" in line.split(" ", 1)[0]]
  scanned = [shape for shape, _ in saved if shape[:1] == (config.num_layers - 1,)]
  named = [why for _, why in saved if "named" in why]
  stacked_kernels = {tuple(v.get_value().shape[1:]) for p, v in weights.param_paths(params).items()
                     if p.startswith("layers/") and v.get_value().ndim >= 3}
  # The gate and up projections' outputs, which the MLP's backward reads: kept, not recomputed;
  # with LoRA, each as one sum x W + (x A) B (`layers.Projection` names it), not its two terms
  # apart, and each projection's x A kept.
  intermediate = [shape for shape in scanned if shape[1:] == (length, config.intermediate_size)]
  assert len(intermediate) == 2, scanned
  low_rank = [shape for shape in scanned if shape[1:] == (length, lora_rank)]
  assert len(low_rank) == (7 if lora_rank else 0), scanned
  assert any("attention_output" in why for why in named), saved
  assert any("attention_row_statistics" in why for why in named), saved
  assert any("attention_inputs" in why for why in named), saved
  kv_width = config.num_kv_heads * config.head_dim  # k_proj's and v_proj's output, [rows, K H]
  assert not [shape for shape in scanned if shape[1:] == (length, kv_width)], scanned
  assert not [shape for shape in scanned if shape[1:] in stacked_kernels], scanned
  assert not [shape for shape in scanned if shape[-2:] == (length, length)], scanned


@pytest.mark.parametrize("case, reads_few", [
    ("LlamaForSequenceClassification", False),
    ("LlamaForSequenceClassification", True),  # the last layer outside the scan
    ("Gemma3TextForSequenceClassification", True),  # windows and RoPE scanned per layer
    ("GPT2ForSequenceClassification-layer-scaled", False),  # a float scanned per layer
    ("DebertaV2ForSequenceClassification", False)])  # relative embeddings closed over
def test_every_remat_policy_gives_the_same_loss_and_gradients(tiny_checkpoint, case, reads_few):
  """What the backward pass keeps is a trade of memory for recomputation, not a change of what is
  computed: every policy's loss and gradients equal the default's. Tolerance: a recomputed value
  is the same float32 operations, but XLA may fuse (so round and reorder) a rematerialized
  forward otherwise than the kept one; over this model's reductions (widths of at most 64 and 16
  tokens) that is within 64 float32 epsilons of each value's magnitude."""
  family, config = family_config(tiny_checkpoint, case, 3)
  if getattr(config, "local_rope_layers", ()):  # local, global, local
    config = dataclasses.replace(config, local_rope_layers=(True, False, True),
                                 layer_windows=(8, None, 8))
  ids = jax.random.randint(jax.random.key(1), (2, 16), 0, 50)
  layout = attention.Layout(jnp.ones_like(ids), jnp.zeros_like(ids),
                            is_causal=family.IS_CAUSAL)
  positions = jnp.broadcast_to(jnp.arange(16), ids.shape)
  output_index = jnp.asarray([[5, 15], [3, 9]]) if reads_few else None
  weights_ = jax.random.normal(jax.random.key(2), (2, 2 if reads_few else 16,
                                                   config.hidden_size))

  def value_and_grads(policy):
    graphdef, params, rest = nnx.split(family.Model(config, remat_policy=policy), nnx.Param, ...)

    def loss(params):
      hidden = nnx.merge(graphdef, params, rest)(ids, positions, layout,
                                                 output_index=output_index)
      return jnp.sum(hidden * weights_)
    return jax.jit(jax.value_and_grad(loss))(params)

  want_loss, want = value_and_grads("auto")
  for policy in trunk.REMAT_POLICIES:
    got_loss, got = value_and_grads(policy)
    for (path, g), w in zip(jax.tree.leaves_with_path((got_loss, got)),
                            jax.tree.leaves((want_loss, want))):
      scale = max(float(np.max(np.abs(w))), 1.0)
      np.testing.assert_allclose(g, w, rtol=0, atol=64 * np.finfo(np.float32).eps * scale,
                                 err_msg=f"{policy}: {jax.tree_util.keystr(path)}")


def test_an_unknown_remat_policy_is_refused_when_the_model_is_made(tiny_checkpoint):
  family, config = family_config(tiny_checkpoint, "LlamaForSequenceClassification", 2)
  with pytest.raises(ValueError, match="unknown remat policy 'everything'; one of auto, "):
    family.Model(config, remat_policy="everything")




def test_bfloat16_weights_on_cpu_are_widened_a_layer_at_a_time(tiny_checkpoint):
  """XLA:CPU computes bfloat16 in float32; the layer loop must widen one layer's slice at a time,
  not the whole stack ahead of the loop (twice the weights' bytes more). With
  `trunk.compiler_options`, a forward whose weights outweigh its activations holds temporaries
  under one copy of the stacked weights; compiled without them, over twice that (so this test
  sees the options go). The two programs compute the same hidden states."""
  family, config = family_config(tiny_checkpoint, "LlamaForSequenceClassification", 4)
  config = dataclasses.replace(config, hidden_size=256, intermediate_size=1024, num_heads=4,
                               num_kv_heads=4, head_dim=64)
  graphdef, state = nnx.split(family.Model(config, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16))
  stacked_bytes = sum(v.get_value().nbytes for path, v in nnx.to_flat_state(state)
                      if path[0] == "layers")
  options = trunk.compiler_options(state)
  assert options and not trunk.compiler_options(
      jax.tree.map(lambda x: x.astype(jnp.float32), state))  # bfloat16 on CPU, not float32

  def hidden(state, input_ids, attention_mask):
    layout = attention.from_padding_mask(attention_mask, is_causal=True)
    return nnx.merge(graphdef, state)(input_ids, masks.positions_from_mask(attention_mask), layout)

  ids = jnp.ones((1, 4), jnp.int32)
  programs = {name: jax.jit(hidden, compiler_options=chosen).lower(
      state, ids, jnp.ones_like(ids)).compile() for name, chosen in [("layer", options),
                                                                     ("stack", {})]}
  temporaries = {name: p.memory_analysis().temp_size_in_bytes for name, p in programs.items()}
  assert temporaries["layer"] < stacked_bytes < 2 * stacked_bytes < temporaries["stack"], (
      temporaries, stacked_bytes)
  np.testing.assert_array_equal(np.asarray(programs["layer"](state, ids, jnp.ones_like(ids))),
                                np.asarray(programs["stack"](state, ids, jnp.ones_like(ids))))
