"""BERT-style bidirectional encoders (post-LayerNorm, learned absolute positions) in Flax NNX.

Covers `BertForSequenceClassification` (pooler + classifier on the [CLS] hidden) and `BertModel`
(a bare encoder such as all-MiniLM-L6-v2). For `BertModel` the head kind is `"none"` and `head`
returns HF's `pooler_output`: tanh(dense([CLS] hidden)), the encoder's own pooled summary of the
sequence, so the head applied at [CLS] (as the reward path applies it) gives that [B, D] vector;
callers that want token states use `Model.__call__`.

Positions come from the caller (`positions`), so packed rows restart their positions per segment
and padding on either side does not shift them. Token types default to zeros (one segment). The
layers are one stacked module run under `jax.lax.scan` (`trunk.scan_layers`), as every family's.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from socialrm_jax.models import attention as attention_lib
from socialrm_jax.models import hf_config as hf_config_lib
from socialrm_jax.models import layers, trunk
from socialrm_jax.models.weights import WeightSource, stacked_sources

ARCHITECTURES = {
    "BertForSequenceClassification": "score",
    "BertModel": "none",
}
REFUSED_ARCHITECTURES: dict[str, str] = {}
IS_CAUSAL = False
HAS_POSITION_BIAS = False

INIT_STDDEV = 0.02  # HF's `initializer_range` for BERT; only matters before weights are loaded.
# HF's `base_model_prefix`: where the head classes keep the encoder.
BASE_MODEL_PREFIX = "bert."
# Where each HF class saves the encoder's tensors: the classifier wraps it as `bert`.
ENCODER_PREFIX = {
    "BertForSequenceClassification": BASE_MODEL_PREFIX,
    "BertModel": "",
}
# Non-parameter buffers some checkpoints saved (all-MiniLM-L6-v2 has `embeddings.position_ids`).
_SAVED_BUFFER = re.compile(r"^(bert\.)?embeddings\.(position_ids|token_type_ids)$")


@dataclasses.dataclass(frozen=True)
class Config(hf_config_lib.FamilyConfig):
  """What a BERT checkpoint needs to be rebuilt; JSON-able through `to_dict`/`from_dict`."""
  vocab_size: int
  max_positions: int
  type_vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  layer_norm_eps: float
  activation: str

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads


def config_from_hf(hf_config: dict[str, Any], architecture: str) -> Config:
  """Our config from a HF BERT `config.json` dict."""
  head_fields = hf_config_lib.head_fields(hf_config, architecture, ARCHITECTURES, "BERT")
  activation = hf_config.get("hidden_act", "gelu")
  layers.activation(activation)  # a ValueError naming the supported ones, if unknown
  position_type = hf_config.get("position_embedding_type", "absolute")
  if position_type != "absolute":
    raise ValueError(f"BERT position_embedding_type {position_type!r} is not supported; only "
                     "'absolute' is")
  if hf_config.get("is_decoder") or hf_config.get("add_cross_attention"):
    raise ValueError("BERT configured as a decoder is not a bidirectional encoder; not supported")
  hidden_size = int(hf_config["hidden_size"])
  num_heads = int(hf_config["num_attention_heads"])
  hf_config_lib.attention_heads(hidden_size, num_heads)
  return Config(
      **head_fields,
      vocab_size=int(hf_config["vocab_size"]),
      max_positions=int(hf_config["max_position_embeddings"]),
      type_vocab_size=int(hf_config.get("type_vocab_size", 2)),
      hidden_size=hidden_size,
      num_layers=int(hf_config["num_hidden_layers"]),
      num_heads=num_heads,
      intermediate_size=int(hf_config["intermediate_size"]),
      layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-12)),
      activation=activation,
  )


def is_saved_buffer(hf_name: str) -> bool:
  """True for a checkpoint tensor that is a saved buffer, not a weight: the loader may skip it."""
  return _SAVED_BUFFER.match(hf_name) is not None


def _normal(stddev: float = INIT_STDDEV):
  return jax.nn.initializers.normal(stddev)


class Block(nnx.Module):
  """Post-LayerNorm block: x = norm(x + attn(x)), then x = norm(x + mlp(x))."""

  def __init__(self, config: Config, *, attention: str, dtype, param_dtype, rngs: nnx.Rngs):
    norm = functools.partial(nnx.LayerNorm, config.hidden_size, epsilon=config.layer_norm_eps,
                             dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.attn = layers.BiasedSelfAttention(
        config.hidden_size, config.num_heads, config.head_dim, scale=1.0 / np.sqrt(config.head_dim),
        implementation=attention, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.attn_norm = norm()
    self.mlp = layers.DenseMLP(config.hidden_size, config.intermediate_size, config.activation,
                               dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.mlp_norm = norm()

  def __call__(self, x: jax.Array, positions: jax.Array, layout: attention_lib.Layout) -> jax.Array:
    x = self.attn_norm(x + self.attn(x, positions, layout))  # [B, T, D]
    return self.mlp_norm(x + self.mlp(x))  # [B, T, D]


class Model(trunk.FamilyModel):
  """BERT encoder plus its head (pooler + classifier, or the pooler alone), per the contract."""

  def build(self, config: Config, kw: dict[str, Any]) -> None:
    d = config.hidden_size
    self.embed = layers.Embedder(config.vocab_size, d, **kw)
    self.position_embed = layers.Embedder(config.max_positions, d, **kw)
    self.token_type_embed = layers.Embedder(config.type_vocab_size, d, **kw)
    self.embed_norm = nnx.LayerNorm(d, epsilon=config.layer_norm_eps, **kw)
    self.layers = self.stacked_blocks(Block, config, kw)
    # Full fp32 products, as the trunk's.
    linear = functools.partial(nnx.Linear, precision=attention_lib.matmul_precision(kw["dtype"]),
                               kernel_init=_normal(), **kw)
    self.pooler = linear(d, d)
    if config.head == "score":
      self.classifier = linear(d, config.num_labels)

  def __call__(self, input_ids: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               token_type_ids: jax.Array | None = None,
               output_index: jax.Array | None = None) -> jax.Array:
    """input_ids, positions [B, T] int32 under `layout` (not causal) -> hidden [B, T, D] ([B, P, D]
    at `output_index` [B, P]).

    The hidden states are the last layer's output (BERT is post-LayerNorm: its last norm is the
    final norm), i.e. HF's `last_hidden_state`.
    """
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)
    x = (self.embed(input_ids) + self.position_embed(positions)
         + self.token_type_embed(token_type_ids))  # [B, T, D]
    x = self.embed_norm(x)
    x = trunk.scan_layers(self.layers, x, lambda block, x, _: block(x, positions, layout),
                          remat=self.remat_policy)
    return layers.take_positions(x, output_index)  # [B, T or P, D]

  def head(self, cls_hidden: jax.Array) -> jax.Array:
    """[..., D] ([CLS] hidden) -> [..., num_labels] (classifier) or [..., D] (pooler output)."""
    pooled = jnp.tanh(self.pooler(cls_hidden))  # [..., D]
    if self.config.head == "score":
      return self.classifier(pooled)
    return pooled


def _transpose(w: np.ndarray) -> np.ndarray:
  return w.T


def _reshape(shape: tuple[int, ...], w: np.ndarray) -> np.ndarray:
  return w.reshape(shape)


def weight_sources(config: Config) -> dict[str, WeightSource]:
  """Every parameter of `Model(config)` -> the HF tensor it is read from.

  `BertModel` saves the encoder at the top level; `BertForSequenceClassification` under `bert.`,
  with its `classifier` beside it. HF stores dense weights as nn.Linear [out, in]: the encoder's
  projections are those as stored (`layers.Projection`; attention's [heads, head_dim, in] and
  [out, heads, head_dim]); the pooler and classifier, `nnx.Linear`s, are [in, out].
  """
  d, n, h = config.hidden_size, config.num_heads, config.head_dim
  prefix = ENCODER_PREFIX[config.architecture]
  embeddings = f"{prefix}embeddings"
  sources = {
      "embed/embedding": WeightSource(f"{embeddings}.word_embeddings.weight", model_axis=0),
      "position_embed/embedding": WeightSource(f"{embeddings}.position_embeddings.weight"),
      "token_type_embed/embedding": WeightSource(f"{embeddings}.token_type_embeddings.weight"),
      "embed_norm/scale": WeightSource(f"{embeddings}.LayerNorm.weight"),
      "embed_norm/bias": WeightSource(f"{embeddings}.LayerNorm.bias"),
      "pooler/kernel": WeightSource(f"{prefix}pooler.dense.weight", _transpose),
      "pooler/bias": WeightSource(f"{prefix}pooler.dense.bias"),
  }
  block = stacked_sources(f"{prefix}encoder.layer.{{layer}}.", config.num_layers)
  for name, hf_name in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")):
    sources[f"layers/attn/{name}/kernel"] = block(
        f"attention.self.{hf_name}.weight", functools.partial(_reshape, (n, h, d)),
        model_axis=1)  # [L, N, H, D]
    sources[f"layers/attn/{name}/bias"] = block(
        f"attention.self.{hf_name}.bias", functools.partial(_reshape, (n, h)),
        model_axis=1)  # [L, N, H]
  sources["layers/attn/o_proj/kernel"] = block(
      "attention.output.dense.weight", functools.partial(_reshape, (d, n, h)),
      model_axis=2)  # [L, D, N, H]
  sources["layers/attn/o_proj/bias"] = block("attention.output.dense.bias")
  sources["layers/attn_norm/scale"] = block("attention.output.LayerNorm.weight")
  sources["layers/attn_norm/bias"] = block("attention.output.LayerNorm.bias")
  sources["layers/mlp/up/kernel"] = block(
      "intermediate.dense.weight", model_axis=1)  # [L, F, D]
  sources["layers/mlp/up/bias"] = block("intermediate.dense.bias", model_axis=1)
  sources["layers/mlp/down/kernel"] = block(
      "output.dense.weight", model_axis=2)  # [L, D, F]
  sources["layers/mlp/down/bias"] = block("output.dense.bias")
  sources["layers/mlp_norm/scale"] = block("output.LayerNorm.weight")
  sources["layers/mlp_norm/bias"] = block("output.LayerNorm.bias")
  if config.head == "score":
    sources["classifier/kernel"] = WeightSource("classifier.weight", _transpose)  # [D, L]
    sources["classifier/bias"] = WeightSource("classifier.bias")
  return sources
