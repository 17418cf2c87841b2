"""The decoder's layers run under one scan: the program holds one layer whatever the depth, and
what differs between layers (the sliding window) is scanned data."""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from socialrm_jax.models import attention, decoder, masks


def tiny_config(num_layers: int, windowed: bool) -> decoder.Config:
  """Gemma 2's alternating local/global layers when `windowed`, else no window anywhere."""
  windows = tuple(4 if windowed and i % 2 == 0 else None for i in range(num_layers))
  return decoder.Config(
      architecture="Gemma2ForSequenceClassification", head="score", num_labels=1,
      pad_token_id=0, variant="gemma2", vocab_size=64, hidden_size=32, intermediate_size=64,
      num_layers=num_layers, num_heads=4, num_kv_heads=2, head_dim=8, rms_norm_eps=1e-6,
      activation="gelu_pytorch_tanh", unit_offset_norm=True, sandwich_norms=True,
      attn_logit_softcap=50.0, layer_windows=windows)


def lowered_forward(config: decoder.Config) -> str:
  """StableHLO text of rewards for a [2, 8] batch."""
  graphdef, state = nnx.split(decoder.Model(config))

  def rewards(state, input_ids, attention_mask):
    model = nnx.merge(graphdef, state)
    layout = attention.from_padding_mask(attention_mask, is_causal=True)
    return model.head(model(input_ids, masks.positions_from_mask(attention_mask), layout))

  ids = jnp.zeros((2, 8), jnp.int32)
  return jax.jit(rewards).lower(state, ids, jnp.ones_like(ids)).as_text()


@pytest.mark.parametrize("windowed", [False, True], ids=["no_windows", "alternating_windows"])
def test_program_holds_one_layer_whatever_the_depth(windowed):
  shallow = lowered_forward(tiny_config(2, windowed))
  deep = lowered_forward(tiny_config(16, windowed))
  # Per layer: q, k, v, two attention products, o, gate, up, down; plus the score head.
  assert shallow.count("dot_general") == deep.count("dot_general") == 10
  assert deep.count("stablehlo.while") == 1


def test_stacked_parameters_carry_a_leading_layer_axis():
  config = tiny_config(3, windowed=True)
  model = nnx.eval_shape(lambda: decoder.Model(config))
  assert model.layers.attn.q_proj.kernel.get_value().shape == (3, 4, 8, 32)  # [L, N, H, D]
  assert model.layers.post_mlp_norm.scale.get_value().shape == (3, 32)  # [L, D]
  assert model.embedder.embedding.get_value().shape == (64, 32)  # not stacked


def test_layers_are_drawn_from_different_keys():
  kernel = decoder.Model(tiny_config(2, windowed=False)).layers.mlp.up_proj.kernel.get_value()
  assert not np.array_equal(kernel[0], kernel[1])


def test_window_array_marks_full_layers_and_is_absent_without_windows():
  np.testing.assert_array_equal(decoder.layer_window_array(tiny_config(3, windowed=True)),
                                [4, decoder.FULL_WINDOW, 4])
  assert decoder.layer_window_array(tiny_config(3, windowed=True)).dtype == np.int32
  assert decoder.layer_window_array(tiny_config(3, windowed=False)) is None


@pytest.mark.parametrize("windowed", [False, True], ids=["no_windows", "alternating_windows"])
@pytest.mark.parametrize("picked", [3, 6], ids=["a_few_tokens", "over_half_the_tokens"])
def test_hidden_states_at_picked_tokens_equal_the_whole_models(windowed, picked):
  """`output_index`: the last layer computes at the picked tokens only (at most half the row:
  its MLP is [B, P, F] in the program), else the whole model runs and the tokens are picked
  after; the same hidden states either way."""
  config = tiny_config(3, windowed)
  graphdef, state = nnx.split(decoder.Model(config, rngs=nnx.Rngs(3)))
  rng = np.random.default_rng(0)
  ids = jnp.asarray(rng.integers(1, 64, size=(2, 8)), jnp.int32)
  mask = jnp.asarray([[1] * 8, [1] * 5 + [0] * 3], jnp.int32)
  index = jnp.asarray(rng.integers(0, 8, size=(2, picked)), jnp.int32)

  def hidden(state, index):
    model = nnx.merge(graphdef, state)
    layout = attention.from_padding_mask(mask, is_causal=True)
    return model(ids, masks.positions_from_mask(mask), layout, output_index=index)

  mlp_at_picked = f"tensor<2x{picked}x64xf32>" in jax.jit(hidden).lower(state, index).as_text()
  assert mlp_at_picked == (2 * picked <= 8)
  whole = jax.jit(hidden)(state, None)
  got = jax.jit(hidden)(state, index)
  assert got.shape == (2, picked, 32)
  np.testing.assert_allclose(got, jnp.take_along_axis(whole, index[:, :, None], axis=1),
                             atol=1e-5, rtol=0)
