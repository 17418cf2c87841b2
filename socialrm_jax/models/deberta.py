"""DeBERTa-v2/v3 sequence classifiers (OpenAssistant's reward-model-deberta-v3-*) in Flax NNX.

Covers `DebertaV2ForSequenceClassification`: a post-LayerNorm bidirectional encoder whose attention
adds disentangled relative-position scores to the content ones, then HF's ContextPooler
(act(dense([CLS] hidden))) and a linear classifier. For query t and key s, with r(t, s) the
relative position pos_t - pos_s, log-bucketed (`position_buckets`, `max_relative_positions`) and
shifted by the span A into [0, 2A):
  logits[t, s] = (q_t . k_s + q_t . pk[r(t, s)]  (c2p)  + k_s . pq[-r(s, t)]  (p2c)) / sqrt(H * f)
where pk, pq are the shared relative embeddings (LayerNormed under `norm_rel_ebd`) projected by
the layer's key and query projections (`share_att_key`) or by their own, and f counts the terms
`pos_att_type` switches on. That sum is an additive bias [B, N, T, S] on the content logits, which
`attention.attend` takes on its "xla" path (the kernels take none; `HAS_POSITION_BIAS` makes
`attention.resolve` pick xla).

Positions come from the caller and restart in each packed segment, so the relative positions of
two packed sequences are those of each alone (the packer gives an encoder one sequence a segment;
tokens of other segments are masked). The layers are one stacked module run under
`jax.lax.scan` (`trunk.scan_layers`). DeBERTa-v2-xlarge's convolution layer (`conv_kernel_size`) is
refused: its kernel would reach across packed segments.
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
from socialrm_jax.models.weights import WeightSource, reshape_to, stacked_sources

ARCHITECTURES = {
    "DebertaV2ForSequenceClassification": "score",
}
REFUSED_ARCHITECTURES: dict[str, str] = {}
IS_CAUSAL = False
# The relative-position scores are an additive bias only "xla" attention takes.
HAS_POSITION_BIAS = True

# HF's `base_model_prefix`: where the classifier keeps the encoder.
BASE_MODEL_PREFIX = "deberta."
POS_ATT_TYPES = ("c2p", "p2c")
# Non-parameter buffers some checkpoints saved, and the absolute position table of a model that
# does not add it (`position_biased_input: false`; HF skips it on load, as we do).
_SAVED_BUFFER = re.compile(
    r"^(deberta\.)?embeddings\.(position_ids|position_embeddings\.weight)$")


@dataclasses.dataclass(frozen=True)
class Config(hf_config_lib.FamilyConfig):
  """What a DeBERTa-v2 checkpoint needs to be rebuilt; JSON-able through `to_dict`/`from_dict`."""
  vocab_size: int
  embedding_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  head_dim: int
  intermediate_size: int
  layer_norm_eps: float
  activation: str
  pooler_activation: str
  max_positions: int
  position_biased_input: bool
  type_vocab_size: int
  relative_attention: bool
  position_buckets: int  # <= 0: relative positions are not bucketed
  max_relative_positions: int
  share_att_key: bool
  pos_att_types: tuple[str, ...]
  norm_rel_embeddings: bool

  @property
  def attention_span(self) -> int:
    """A: relative positions index the 2A relative embeddings as r + A."""
    return self.position_buckets if self.position_buckets > 0 else self.max_relative_positions

  @property
  def attention_scale(self) -> float:
    """1 / sqrt(H * f), f = 1 + the relative terms in use (HF's `scale_factor`)."""
    terms = len(self.pos_att_types) if self.relative_attention else 0
    return 1.0 / float(np.sqrt(np.float32(self.head_dim * (1 + terms))))


def _pos_att_types(value: Any) -> tuple[str, ...]:
  """`pos_att_type` as configs write it ("p2c|c2p" or a list) -> the terms in use."""
  if value is None:
    return ()
  items = value.lower().split("|") if isinstance(value, str) else list(value)
  types = tuple(sorted({item.strip() for item in items if item.strip()}))
  unknown = [t for t in types if t not in POS_ATT_TYPES]
  if unknown:
    raise ValueError(f"`pos_att_type` {unknown} unknown; supported: {', '.join(POS_ATT_TYPES)}")
  return types


def config_from_hf(hf_config: dict[str, Any], architecture: str) -> Config:
  """Our config from a HF DeBERTa-v2 `config.json` dict (HF's defaults where a field is absent)."""
  head_fields = hf_config_lib.head_fields(hf_config, architecture, ARCHITECTURES, "DeBERTa-v2")
  if int(hf_config.get("conv_kernel_size", 0) or 0) > 0:
    raise ValueError("`conv_kernel_size` > 0 (DeBERTa-v2-xlarge's convolution layer) is not "
                     "supported: its kernel would mix tokens of packed sequences")
  activation = hf_config.get("hidden_act", "gelu")
  pooler_activation = hf_config.get("pooler_hidden_act", "gelu")
  layers.activation(activation)  # a ValueError naming the supported ones, if unknown
  layers.activation(pooler_activation)
  hidden_size = int(hf_config["hidden_size"])
  num_heads = int(hf_config["num_attention_heads"])
  hf_config_lib.attention_heads(hidden_size, num_heads)
  pooler_size = int(hf_config.get("pooler_hidden_size") or hidden_size)
  if pooler_size != hidden_size:
    raise ValueError(f"`pooler_hidden_size`={pooler_size} differs from hidden_size={hidden_size}; "
                     "HF's classifier then cannot run either")
  max_positions = int(hf_config.get("max_position_embeddings", 512))
  max_relative = int(hf_config.get("max_relative_positions", -1))
  norm_rel = [x.strip() for x in str(hf_config.get("norm_rel_ebd", "none")).lower().split("|")]
  return Config(
      **head_fields,
      vocab_size=int(hf_config["vocab_size"]),
      embedding_size=int(hf_config.get("embedding_size") or hidden_size),
      hidden_size=hidden_size,
      num_layers=int(hf_config["num_hidden_layers"]),
      num_heads=num_heads,
      head_dim=int(hf_config.get("attention_head_size") or hidden_size // num_heads),
      intermediate_size=int(hf_config["intermediate_size"]),
      layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-7)),
      activation=activation,
      pooler_activation=pooler_activation,
      max_positions=max_positions,
      position_biased_input=bool(hf_config.get("position_biased_input", True)),
      type_vocab_size=int(hf_config.get("type_vocab_size", 0)),
      relative_attention=bool(hf_config.get("relative_attention", False)),
      position_buckets=int(hf_config.get("position_buckets", -1)),
      max_relative_positions=max_relative if max_relative >= 1 else max_positions,
      share_att_key=bool(hf_config.get("share_att_key", False)),
      pos_att_types=_pos_att_types(hf_config.get("pos_att_type")),
      norm_rel_embeddings="layer_norm" in norm_rel,
  )


def is_saved_buffer(hf_name: str) -> bool:
  """True for a checkpoint tensor that is a saved buffer, not a weight: the loader may skip it
  (a model that does use the position table still requires it: see `weights.check_names`)."""
  return _SAVED_BUFFER.match(hf_name) is not None


def log_bucket_table(max_distance: int, bucket_size: int, max_position: int) -> np.ndarray:
  """[2M - 1] int32: HF's `make_log_bucket_position` of each relative position in (-M, M), at
  index r + M - 1. Computed on the host in float32, the steps in HF's order, so the ceil lands
  where PyTorch's does (tests/models/test_deberta.py checks every distance)."""
  relative = np.arange(-(max_distance - 1), max_distance, dtype=np.int64)
  if bucket_size <= 0 or max_position <= 0:
    return relative.astype(np.int32)
  mid = bucket_size // 2
  sign = np.sign(relative)
  abs_pos = np.where((relative < mid) & (relative > -mid), mid - 1, np.abs(relative))
  with np.errstate(divide="ignore"):
    ratio = abs_pos.astype(np.float32) / np.float32(mid)
    log_pos = np.ceil(np.log(ratio) / np.log(np.float32((max_position - 1) / mid))
                      * np.float32(mid - 1)) + np.float32(mid)
  bucketed = np.where(abs_pos <= mid, relative.astype(np.float32), log_pos * sign)
  return bucketed.astype(np.int32)


def relative_indices(config: Config, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
  """positions [B, T] -> (c2p, p2c) [B, T, S] int32 indices into the 2A relative embeddings.

  c2p[t, s] = clip(r(t - s) + A), p2c[t, s] = clip(-r(s - t) + A), r the bucketing, as HF's
  `disentangled_attention_bias` gathers them. Rows are at most T long, so every difference of
  two positions of a segment lies in (-T, T), the table's range.
  """
  length = positions.shape[1]
  span = config.attention_span
  table = jnp.asarray(log_bucket_table(length, config.position_buckets,
                                       config.max_relative_positions))  # [2T - 1]
  difference = positions[:, :, None] - positions[:, None, :]  # [B, T, S]: pos_t - pos_s
  offset = length - 1

  def bucket(d):
    return jnp.take(table, jnp.clip(d + offset, 0, 2 * offset))

  c2p = jnp.clip(bucket(difference) + span, 0, 2 * span - 1)
  p2c = jnp.clip(-bucket(-difference) + span, 0, 2 * span - 1)
  return c2p.astype(jnp.int32), p2c.astype(jnp.int32)


class Attention(nnx.Module):
  """Disentangled self-attention: content logits plus c2p / p2c relative-position scores."""

  def __init__(self, config: Config, *, implementation: str, dtype, param_dtype, rngs: nnx.Rngs):
    d, n, h = config.hidden_size, config.num_heads, config.head_dim
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.q_proj = layers.Projection("BTD,NHD->BTNH", (n, h, d), (n, h), **kw)
    self.k_proj = layers.Projection("BTD,NHD->BTNH", (n, h, d), (n, h), **kw)
    self.v_proj = layers.Projection("BTD,NHD->BTNH", (n, h, d), (n, h), **kw)
    self.o_proj = layers.Projection("BTNH,DNH->BTD", (d, n, h), (d,), **kw)
    uses = config.pos_att_types if config.relative_attention else ()
    if not config.share_att_key and "c2p" in uses:
      self.pos_key_proj = layers.Projection("BTD,NHD->BTNH", (n, h, d), (n, h), **kw)
    if not config.share_att_key and "p2c" in uses:
      self.pos_query_proj = layers.Projection("BTD,NHD->BTNH", (n, h, d), (n, h), **kw)
    self.config = config
    self.uses = uses
    self.implementation = implementation

  def position_bias(self, q: jax.Array, k: jax.Array, relative: jax.Array,
                    c2p_index: jax.Array, p2c_index: jax.Array) -> jax.Array:
    """q, k [B, T, N, H], relative embeddings [2A, D], indices [B, T, S] -> [B, N, T, S], scaled."""
    rel = relative[None]  # [1, 2A, D]
    precision = attention_lib.matmul_precision(q.dtype)
    bias = jnp.zeros((), jnp.float32)
    if "c2p" in self.uses:
      pos_key = (self.k_proj if self.config.share_att_key else self.pos_key_proj)(rel)[0]
      scores = jnp.einsum("BTNH,RNH->BNTR", q, pos_key, precision=precision)  # [B, N, T, 2A]
      bias = bias + jnp.take_along_axis(scores, c2p_index[:, None], axis=-1)  # [B, N, T, S]
    if "p2c" in self.uses:
      pos_query = (self.q_proj if self.config.share_att_key else self.pos_query_proj)(rel)[0]
      scores = jnp.einsum("BSNH,RNH->BNSR", k, pos_query, precision=precision)  # [B, N, S, 2A]
      by_key = jnp.take_along_axis(scores, jnp.swapaxes(p2c_index, 1, 2)[:, None],
                                   axis=-1)  # [B, N, S, T]
      bias = bias + jnp.swapaxes(by_key, 2, 3)  # [B, N, T, S]
    return (bias * self.config.attention_scale).astype(jnp.float32)

  def __call__(self, x: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               relative: jax.Array | None, c2p_index: jax.Array | None,
               p2c_index: jax.Array | None) -> jax.Array:
    q = self.q_proj(x)  # [B, T, N, H]
    k = self.k_proj(x)  # [B, S, N, H]
    v = self.v_proj(x)  # [B, S, N, H]
    bias = (self.position_bias(q, k, relative, c2p_index, p2c_index) if self.uses
            else None)  # [B, N, T, S]
    out = attention_lib.attend(q, k, v, layout, positions, scale=self.config.attention_scale,
                               implementation=self.implementation, bias=bias)  # [B, T, N, H]
    return self.o_proj(out)  # [B, T, D]


class Block(nnx.Module):
  """Post-LayerNorm block: x = norm(x + attn(x)), then x = norm(x + mlp(x))."""

  def __init__(self, config: Config, *, attention: str, dtype, param_dtype, rngs: nnx.Rngs):
    norm = functools.partial(nnx.LayerNorm, config.hidden_size, epsilon=config.layer_norm_eps,
                             dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.attn = Attention(config, implementation=attention, dtype=dtype, param_dtype=param_dtype,
                          rngs=rngs)
    self.attn_norm = norm()
    self.mlp = layers.DenseMLP(config.hidden_size, config.intermediate_size, config.activation,
                               dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.mlp_norm = norm()

  def __call__(self, x, positions, layout, relative, c2p_index, p2c_index) -> jax.Array:
    x = self.attn_norm(self.attn(x, positions, layout, relative, c2p_index, p2c_index) + x)
    return self.mlp_norm(self.mlp(x) + x)  # [B, T, D]


class Model(trunk.FamilyModel):
  """DeBERTa-v2 encoder plus ContextPooler and classifier (or neither, loaded trunk-only)."""

  def build(self, config: Config, kw: dict[str, Any]) -> None:
    d, e = config.hidden_size, config.embedding_size
    self.embed = layers.Embedder(config.vocab_size, e, **kw)
    if config.position_biased_input:
      self.position_embed = layers.Embedder(config.max_positions, e, **kw)
    if config.type_vocab_size > 0:
      self.token_type_embed = layers.Embedder(config.type_vocab_size, e, **kw)
    if e != d:
      self.embed_proj = layers.Projection("BTE,DE->BTD", (d, e), None, **kw)
    norm = functools.partial(nnx.LayerNorm, d, epsilon=config.layer_norm_eps, **kw)
    self.embed_norm = norm()
    if config.relative_attention:
      self.rel_embed = layers.Embedder(2 * config.attention_span, d, **kw)  # [2A, D]
      if config.norm_rel_embeddings:
        self.rel_norm = norm()
    self.layers = self.stacked_blocks(Block, config, kw)
    if config.head == "score":
      self.pooler = layers.Projection("...D,ED->...E", (d, d), (d,), **kw)
      self.classifier = layers.Projection("...D,LD->...L", (config.num_labels, d),
                                          (config.num_labels,), **kw)

  def __call__(self, input_ids: jax.Array, positions: jax.Array, layout: attention_lib.Layout,
               token_type_ids: jax.Array | None = None,
               output_index: jax.Array | None = None) -> jax.Array:
    """input_ids, positions [B, T] int32 under `layout` (not causal) -> hidden [B, T, D] ([B, P, D]
    at `output_index` [B, P]): the last layer's output, HF's `last_hidden_state`."""
    config = self.config
    x = self.embed(input_ids)  # [B, T, E]
    if config.position_biased_input:
      x = x + self.position_embed(positions)
    if config.type_vocab_size > 0:
      types = jnp.zeros_like(input_ids) if token_type_ids is None else token_type_ids
      x = x + self.token_type_embed(types)
    if config.embedding_size != config.hidden_size:
      x = self.embed_proj(x)  # [B, T, D]
    x = self.embed_norm(x)
    relative = c2p_index = p2c_index = None
    if config.relative_attention:
      relative = self.rel_embed.embedding[...].astype(x.dtype)  # [2A, D]
      if config.norm_rel_embeddings:
        relative = self.rel_norm(relative)
      c2p_index, p2c_index = relative_indices(config, positions)  # [B, T, S] each

    def layer(block: Block, x: jax.Array, _) -> jax.Array:
      return block(x, positions, layout, relative, c2p_index, p2c_index)

    x = trunk.scan_layers(self.layers, x, layer, remat=self.remat_policy)
    return layers.take_positions(x, output_index)  # [B, T or P, D]

  def head(self, cls_hidden: jax.Array) -> jax.Array:
    """[..., D] ([CLS] hidden) -> [..., num_labels]: ContextPooler then the classifier; the
    hidden state itself when loaded trunk-only."""
    if self.config.head != "score":
      return cls_hidden
    pooled = layers.activation(self.config.pooler_activation)(self.pooler(cls_hidden))
    return self.classifier(pooled)  # [..., L]




def weight_sources(config: Config) -> dict[str, WeightSource]:
  """Every parameter of `Model(config)` -> the HF tensor(s) it is read from.

  The encoder lives under `deberta.`, the pooler and classifier at the top. Block parameters are
  stacked [L, ...] from the per-layer tensors; heads split over `model` from the rows of the
  q/k/v projections and the columns of the output one.
  """
  d, h = config.hidden_size, config.head_dim
  trunk = BASE_MODEL_PREFIX

  block = stacked_sources(f"{trunk}encoder.layer.{{layer}}.", config.num_layers)

  embeddings = f"{trunk}embeddings"
  out: dict[str, WeightSource] = {
      "embed/embedding": WeightSource(f"{embeddings}.word_embeddings.weight", model_axis=0,
                                      hf_axis=0),
      "embed_norm/scale": WeightSource(f"{embeddings}.LayerNorm.weight"),
      "embed_norm/bias": WeightSource(f"{embeddings}.LayerNorm.bias"),
  }
  if config.position_biased_input:
    out["position_embed/embedding"] = WeightSource(f"{embeddings}.position_embeddings.weight")
  if config.type_vocab_size > 0:
    out["token_type_embed/embedding"] = WeightSource(f"{embeddings}.token_type_embeddings.weight")
  if config.embedding_size != config.hidden_size:
    out["embed_proj/kernel"] = WeightSource(f"{embeddings}.embed_proj.weight")  # [D, E]
  if config.relative_attention:
    out["rel_embed/embedding"] = WeightSource(f"{trunk}encoder.rel_embeddings.weight")
    if config.norm_rel_embeddings:
      out["rel_norm/scale"] = WeightSource(f"{trunk}encoder.LayerNorm.weight")
      out["rel_norm/bias"] = WeightSource(f"{trunk}encoder.LayerNorm.bias")
  projections = [("q_proj", "query_proj"), ("k_proj", "key_proj"), ("v_proj", "value_proj")]
  uses = config.pos_att_types if config.relative_attention else ()
  if not config.share_att_key:
    projections += [(name, name) for name, term in (("pos_key_proj", "c2p"),
                                                    ("pos_query_proj", "p2c")) if term in uses]
  for ours, theirs in projections:
    out[f"layers/attn/{ours}/kernel"] = block(  # [L, N, H, D]
        f"attention.self.{theirs}.weight", reshape_to(-1, h, d), model_axis=1, hf_axis=0)
    out[f"layers/attn/{ours}/bias"] = block(  # [L, N, H]
        f"attention.self.{theirs}.bias", reshape_to(-1, h), model_axis=1, hf_axis=0)
  out["layers/attn/o_proj/kernel"] = block(  # [L, D, N, H]
      "attention.output.dense.weight", reshape_to(d, -1, h), model_axis=2, hf_axis=1)
  out["layers/attn/o_proj/bias"] = block("attention.output.dense.bias")
  out["layers/attn_norm/scale"] = block("attention.output.LayerNorm.weight")
  out["layers/attn_norm/bias"] = block("attention.output.LayerNorm.bias")
  out["layers/mlp/up/kernel"] = block(  # [L, F, D]
      "intermediate.dense.weight", model_axis=1, hf_axis=0)
  out["layers/mlp/up/bias"] = block("intermediate.dense.bias", model_axis=1, hf_axis=0)
  out["layers/mlp/down/kernel"] = block(  # [L, D, F]
      "output.dense.weight", model_axis=2, hf_axis=1)
  out["layers/mlp/down/bias"] = block("output.dense.bias")
  out["layers/mlp_norm/scale"] = block("output.LayerNorm.weight")
  out["layers/mlp_norm/bias"] = block("output.LayerNorm.bias")
  if config.head == "score":
    out["pooler/kernel"] = WeightSource("pooler.dense.weight")
    out["pooler/bias"] = WeightSource("pooler.dense.bias")
    out["classifier/kernel"] = WeightSource("classifier.weight")  # [L, D]
    out["classifier/bias"] = WeightSource("classifier.bias")
  return out
