"""GPT-2 (pre-LayerNorm causal transformer, learned absolute positions) in Flax NNX.

Covers `GPT2ForSequenceClassification` (a bias-free linear score head) and `GPT2LMHeadModel`
(the LM head tied to the token embedding, unless the config unties it). HF GPT-2 stores its
projections as `Conv1D` weights, laid out [in, out] (the transpose of `nn.Linear`);
`weight_sources` transposes them into `layers.Projection`'s [out, in] kernels (GPT-2's models are
small) and splits the fused `c_attn` [D, 3D] into our separate query, key and value projections.

Positions come from the caller (`positions`), not from the token index, so left padding and
packed rows see the same position embeddings as the sequence scored alone. The blocks are one
stacked module run under `jax.lax.scan` (`trunk.scan_layers`), as every family's; with
`scale_attn_by_inverse_layer_idx` each layer's logit scale is scanned with its parameters.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

import jax
import numpy as np
from flax import nnx

from socialrm_jax.models import attention as attention_lib
from socialrm_jax.models import hf_config as hf_config_lib
from socialrm_jax.models import layers, trunk
from socialrm_jax.models.weights import WeightSource, stacked_sources

ARCHITECTURES = {
    "GPT2ForSequenceClassification": "score",
    "GPT2LMHeadModel": "lm",
}
REFUSED_ARCHITECTURES: dict[str, str] = {}
IS_CAUSAL = True
HAS_POSITION_BIAS = False

# HF's `base_model_prefix`: where the head classes keep the trunk. The original GPT-2 checkpoints
# were saved from the bare `GPT2Model`, so their tensors lack it (`h.0.attn.c_attn.weight`).
BASE_MODEL_PREFIX = "transformer."
# Non-parameter buffers older checkpoints saved: the causal mask and its fill value per layer.
_SAVED_BUFFER = re.compile(r"^(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)$")
INIT_STDDEV = 0.02  # HF's `initializer_range` for GPT-2; only matters before weights are loaded.


@dataclasses.dataclass(frozen=True)
class Config(hf_config_lib.FamilyConfig):
  """What a GPT-2 checkpoint needs to be rebuilt; JSON-able through `to_dict`/`from_dict`."""
  vocab_size: int
  max_positions: int
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  layer_norm_eps: float
  activation: str
  scale_attn_weights: bool = True
  scale_attn_by_inverse_layer_idx: bool = False
  # HF ties GPT-2's LM head to the token embedding unless the config says otherwise.
  tie_word_embeddings: bool = dataclasses.field(default=True, kw_only=True)

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads


def config_from_hf(hf_config: dict[str, Any], architecture: str) -> Config:
  """Our config from a HF GPT-2 `config.json` dict."""
  head_fields = hf_config_lib.head_fields(hf_config, architecture, ARCHITECTURES, "GPT-2")
  activation = hf_config.get("activation_function", "gelu_new")
  layers.activation(activation)  # a ValueError naming the supported ones, if unknown
  if hf_config.get("add_cross_attention"):
    raise ValueError("GPT-2 with cross-attention is an encoder-decoder part, not a reward model")
  hidden_size = int(hf_config["n_embd"])
  num_heads = int(hf_config["n_head"])
  hf_config_lib.attention_heads(hidden_size, num_heads, "n_embd", "n_head")
  return Config(
      **head_fields,
      vocab_size=int(hf_config["vocab_size"]),
      max_positions=int(hf_config["n_positions"]),
      hidden_size=hidden_size,
      num_layers=int(hf_config["n_layer"]),
      num_heads=num_heads,
      intermediate_size=int(hf_config.get("n_inner") or 4 * hidden_size),
      layer_norm_eps=float(hf_config.get("layer_norm_epsilon", 1e-5)),
      activation=activation,
      scale_attn_weights=bool(hf_config.get("scale_attn_weights", True)),
      scale_attn_by_inverse_layer_idx=bool(hf_config.get("scale_attn_by_inverse_layer_idx", False)),
      tie_word_embeddings=bool(hf_config.get("tie_word_embeddings", True)),
  )


def is_saved_buffer(hf_name: str) -> bool:
  """True for a checkpoint tensor that is a saved buffer, not a weight: the loader may skip it."""
  return _SAVED_BUFFER.match(hf_name) is not None


def _normal(stddev: float = INIT_STDDEV):
  return jax.nn.initializers.normal(stddev)


def attention_scale(config: Config, layer_index: int) -> float:
  """GPT-2's logit scale: 1/sqrt(H) unless switched off, divided by the layer's 1-based index
  when `scale_attn_by_inverse_layer_idx` is set."""
  scale = (1.0 / np.sqrt(config.head_dim)) if config.scale_attn_weights else 1.0
  if config.scale_attn_by_inverse_layer_idx:
    scale /= layer_index + 1
  return scale


def layer_scale_array(config: Config) -> np.ndarray | None:
  """[L] float32 logit scale per layer when it differs between layers
  (`scale_attn_by_inverse_layer_idx`), scanned with the layers; None when every layer has
  `attention_scale(config, 0)`, a constant of the traced program."""
  if not config.scale_attn_by_inverse_layer_idx:
    return None
  return np.array([attention_scale(config, i) for i in range(config.num_layers)], np.float32)


class Block(nnx.Module):
  """Pre-LayerNorm block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

  def __init__(self, config: Config, *, attention: str, dtype, param_dtype, rngs: nnx.Rngs):
    norm = functools.partial(nnx.LayerNorm, config.hidden_size, epsilon=config.layer_norm_eps,
                             dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.ln_1 = norm()
    self.attn = layers.BiasedSelfAttention(
        config.hidden_size, config.num_heads, config.head_dim, scale=attention_scale(config, 0),
        implementation=attention, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.ln_2 = norm()
    self.mlp = layers.DenseMLP(config.hidden_size, config.intermediate_size, config.activation,
                               dtype=dtype, param_dtype=param_dtype, rngs=rngs)

  def __call__(self, x: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               scale: jax.Array | None = None) -> jax.Array:
    """`scale`: this layer's logit scale where layers differ (`layer_scale_array`)."""
    x = x + self.attn(self.ln_1(x), positions, layout, scale)  # [B, T, D]
    return x + self.mlp(self.ln_2(x))  # [B, T, D]


class Model(trunk.FamilyModel):
  """GPT-2 trunk plus its head (`score`, `lm`, or none when loaded trunk-only), per the contract."""

  def build(self, config: Config, kw: dict[str, Any]) -> None:
    d = config.hidden_size
    self.embed = layers.Embedder(config.vocab_size, d, **kw)  # also the tied LM head
    self.position_embed = layers.Embedder(config.max_positions, d, **kw)
    self.layers = self.stacked_blocks(Block, config, kw)
    self.final_norm = nnx.LayerNorm(d, epsilon=config.layer_norm_eps, **kw)
    # Full fp32 products, as the trunk's.
    linear = functools.partial(nnx.Linear, use_bias=False,
                               precision=attention_lib.matmul_precision(kw["dtype"]),
                               kernel_init=_normal(), **kw)
    if config.head == "score":
      self.score = linear(d, config.num_labels)
    if config.head == "lm" and not config.tie_word_embeddings:
      self.lm_head = linear(d, config.vocab_size)

  def __call__(self, input_ids: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               token_type_ids: jax.Array | None = None,
               output_index: jax.Array | None = None) -> jax.Array:
    """input_ids, positions [B, T] int32 under `layout` -> hidden [B, T, D] ([B, P, D] at
    `output_index` [B, P])."""
    x = self.embed(input_ids) + self.position_embed(positions)  # [B, T, D]
    if token_type_ids is not None:
      # HF GPT-2 embeds token types with the token embedding table itself.
      x = x + self.embed(token_type_ids)

    def layer(block: Block, x: jax.Array, scale: jax.Array | None) -> jax.Array:
      return block(x, positions, layout, scale)

    x = trunk.scan_layers(self.layers, x, layer, layer_scale_array(self.config),
                          remat=self.remat_policy)
    return layers.take_positions(self.final_norm(x), output_index)  # [B, T or P, D]

  def head(self, hidden: jax.Array) -> jax.Array:
    """[..., D] -> [..., num_labels] (score), [..., vocab] (LM) or [..., D] (head "none")."""
    if self.config.head == "score":
      return self.score(hidden)
    if self.config.head == "none":
      return hidden
    if not self.config.tie_word_embeddings:
      return self.lm_head(hidden)
    return self.embed.attend(hidden)  # [..., V]


def _columns(start: int, stop: int, shape: tuple[int, ...], w: np.ndarray) -> np.ndarray:
  """A column block [:, start:stop] of a Conv1D weight [in, out] as our [out, in] kernel (or a
  slice of its bias), reshaped."""
  return w[..., start:stop].T.reshape(shape)


def _transpose_reshape(shape: tuple[int, ...], w: np.ndarray) -> np.ndarray:
  return w.T.reshape(shape)


def _reshape(shape: tuple[int, ...], w: np.ndarray) -> np.ndarray:
  return w.reshape(shape)


def _transpose(w: np.ndarray) -> np.ndarray:
  return w.T


def weight_sources(config: Config) -> dict[str, WeightSource]:
  """Every parameter of `Model(config)` -> the HF tensor it is read from.

  Both HF classes save the trunk under `transformer.`; a tied LM head is `transformer.wte`
  itself, so `lm_head.weight` is asked for only when the config unties it.
  """
  d, n, h = config.hidden_size, config.num_heads, config.head_dim
  trunk = BASE_MODEL_PREFIX
  sources = {
      "embed/embedding": WeightSource(f"{trunk}wte.weight", model_axis=0),  # [V, D]
      "position_embed/embedding": WeightSource(f"{trunk}wpe.weight"),  # [P, D]
      "final_norm/scale": WeightSource(f"{trunk}ln_f.weight"),
      "final_norm/bias": WeightSource(f"{trunk}ln_f.bias"),
  }
  block = stacked_sources(f"{trunk}h.{{layer}}.", config.num_layers)
  for norm in ("ln_1", "ln_2"):
    sources[f"layers/{norm}/scale"] = block(f"{norm}.weight")  # [L, D]
    sources[f"layers/{norm}/bias"] = block(f"{norm}.bias")
  # c_attn is Conv1D [D, 3D]: columns [0, D) are the queries, then keys, then values.
  for index, name in enumerate(("q_proj", "k_proj", "v_proj")):
    start, stop = index * d, (index + 1) * d
    sources[f"layers/attn/{name}/kernel"] = block(
        "attn.c_attn.weight", functools.partial(_columns, start, stop, (n, h, d)),
        model_axis=1)  # [L, N, H, D]
    sources[f"layers/attn/{name}/bias"] = block(
        "attn.c_attn.bias", functools.partial(_columns, start, stop, (n, h)),
        model_axis=1)  # [L, N, H]
  sources["layers/attn/o_proj/kernel"] = block(
      "attn.c_proj.weight", functools.partial(_transpose_reshape, (d, n, h)),
      model_axis=2)  # [L, D, N, H]
  sources["layers/attn/o_proj/bias"] = block("attn.c_proj.bias")
  sources["layers/mlp/up/kernel"] = block("mlp.c_fc.weight", _transpose, model_axis=1)  # [L, F, D]
  sources["layers/mlp/up/bias"] = block("mlp.c_fc.bias", model_axis=1)  # [L, F]
  sources["layers/mlp/down/kernel"] = block("mlp.c_proj.weight", _transpose,
                                            model_axis=2)  # [L, D, F]
  sources["layers/mlp/down/bias"] = block("mlp.c_proj.bias")
  if config.head == "score":
    # nn.Linear stores [L, D]; ours is [D, L].
    sources["score/kernel"] = WeightSource("score.weight", _transpose)
  if config.head == "lm" and not config.tie_word_embeddings:
    sources["lm_head/kernel"] = WeightSource("lm_head.weight", _transpose, model_axis=1)  # [D, V]
  return sources
