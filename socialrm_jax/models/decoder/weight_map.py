"""Which HF tensors feed the decoder's parameters (`weight_sources`), and which saved tensors are
buffers, not weights. Fused checkpoint tensors (Phi-3's `qkv_proj` and `gate_up_proj`, InternLM2's
grouped `wqkv`) are split into the same q/k/v and gate/up parameters on load, so the model code is
one for all."""

from __future__ import annotations

import numpy as np

from socialrm_jax.models import heads as heads_lib
from socialrm_jax.models.decoder.config import Config
from socialrm_jax.models.weights import WeightSource, reshape_to, stacked_sources


def is_saved_buffer(name: str) -> bool:
  """Tensors old checkpoints saved that are not weights: RoPE's inverse frequencies (we compute them)."""
  return name.endswith("rotary_emb.inv_freq")


def _grouped_qkv(part: str, groups: int, h: int, d: int | None = None):
  """InternLM2's fused `wqkv` rows (or bias), laid out per key/value head: its G query heads, then
  its key, then its value -> our q kernel [N, H, D] or k/v kernel [K, H, D] (the bias: [N or K, H]).

  Works on any run of whole groups, so a device holding whole groups of query heads reads only
  its rows (a shard that cuts a group reads the tensor whole: `WeightSource.hf_block`).
  """
  picks = {"q": slice(0, groups), "k": slice(groups, groups + 1), "v": slice(groups + 1, groups + 2)}

  def transform(w: np.ndarray) -> np.ndarray:
    per_group = w.reshape(-1, groups + 2, h, *w.shape[1:])  # [K', G + 2, H, (D)]
    rows = per_group[:, picks[part]].reshape(-1, *w.shape[1:])  # [N' or K' x H, (D)]
    return rows.reshape(-1, h) if d is None else rows.reshape(-1, h, d)
  return transform


def _internlm2_trunk(config: Config, block) -> dict[str, WeightSource]:
  """InternLM2's trunk: its own tensor names, a fused `wqkv`, and w1/w3/w2 for gate/up/down."""
  d, h = config.hidden_size, config.head_dim
  groups = config.num_heads // config.num_kv_heads
  out = {
      "embedder/embedding": WeightSource("model.tok_embeddings.weight", model_axis=0, hf_axis=0),
      "final_norm/scale": WeightSource("model.norm.weight"),
      "layers/pre_attn_norm/scale": block("attention_norm.weight"),
      "layers/pre_mlp_norm/scale": block("ffn_norm.weight"),
      "layers/attn/o_proj/kernel": block(  # [L, D, N, H]
          "attention.wo.weight", reshape_to(d, -1, h), model_axis=2, hf_axis=1),
      "layers/mlp/gate_proj/kernel": block(  # [L, F, D]
          "feed_forward.w1.weight", model_axis=1, hf_axis=0),
      "layers/mlp/up_proj/kernel": block("feed_forward.w3.weight", model_axis=1, hf_axis=0),
      "layers/mlp/down_proj/kernel": block(  # [L, D, F]
          "feed_forward.w2.weight", model_axis=2, hf_axis=1),
  }
  for part in ("q", "k", "v"):
    per_block = groups if part == "q" else 1  # one block of rows: a key/value head's group
    out[f"layers/attn/{part}_proj/kernel"] = block(  # [L, N or K, H, D]
        "attention.wqkv.weight", _grouped_qkv(part, groups, h, d), model_axis=1, hf_axis=0,
        hf_block=per_block)
    if config.qkv_bias:
      out[f"layers/attn/{part}_proj/bias"] = block(  # [L, N or K, H]
          "attention.wqkv.bias", _grouped_qkv(part, groups, h), model_axis=1, hf_axis=0,
          hf_block=per_block)
  if config.out_bias:
    out["layers/attn/o_proj/bias"] = block("attention.wo.bias")
  return out


# Per variant, the head tensors where they are not named `score` / `lm_head`.
_HEAD_TENSORS = {"internlm2": {"score": "v_head.weight", "lm": "output.weight"}}


def weight_sources(config: Config) -> dict[str, WeightSource]:
  """Our parameter path -> HF tensor(s), transform, and the axes split over `model`.

  Block parameters are stacked [L, ...] from the L per-layer HF tensors, so their `model_axis`
  counts the layer axis. A kernel is its Linear's [out, in] as stored, its output or input axis
  unflattened into heads where it has them (`layers.Projection`: no transpose). Heads and MLP
  width are split: an HF Linear keeps them in its rows
  (`hf_axis=0`: q/k/v, gate/up, the LM head) or, for the projections back to D, its columns
  (`hf_axis=1`: o_proj, down_proj); the embedding keeps the vocabulary in its rows. A fused
  tensor feeds several parameters, each reading its own rows (`hf_span`: Phi-3's q|k|v and
  gate|up; InternLM2's grouped `wqkv`, by its transform).
  """
  d, h = config.hidden_size, config.head_dim
  n_rows, k_rows, f = config.num_heads * h, config.num_kv_heads * h, config.intermediate_size

  block = stacked_sources("model.layers.{layer}.", config.num_layers)

  if config.variant == "internlm2":
    out = _internlm2_trunk(config, block)
  else:
    out = {
        "embedder/embedding": WeightSource("model.embed_tokens.weight", model_axis=0, hf_axis=0),
        "final_norm/scale": WeightSource("model.norm.weight"),
    }
    if config.post_norms_only:
      out["layers/post_attn_norm/scale"] = block("post_attention_layernorm.weight")
      out["layers/post_mlp_norm/scale"] = block("post_feedforward_layernorm.weight")
    elif config.sandwich_norms:
      out["layers/pre_attn_norm/scale"] = block("input_layernorm.weight")
      out["layers/post_attn_norm/scale"] = block("post_attention_layernorm.weight")
      out["layers/pre_mlp_norm/scale"] = block("pre_feedforward_layernorm.weight")
      out["layers/post_mlp_norm/scale"] = block("post_feedforward_layernorm.weight")
    else:
      out["layers/pre_attn_norm/scale"] = block("input_layernorm.weight")
      out["layers/pre_mlp_norm/scale"] = block("post_attention_layernorm.weight")
    if config.variant == "phi3":  # q, k, v stacked in one `qkv_proj`; gate, up in `gate_up_proj`
      spans = {"q_proj": (0, n_rows), "k_proj": (n_rows, n_rows + k_rows),
               "v_proj": (n_rows + k_rows, n_rows + 2 * k_rows)}
      for name, span in spans.items():
        out[f"layers/attn/{name}/kernel"] = block(  # [L, N or K, H, D]
            "self_attn.qkv_proj.weight", reshape_to(-1, h, d), 1, 0, span)
      for name, span in (("gate_proj", (0, f)), ("up_proj", (f, 2 * f))):
        out[f"layers/mlp/{name}/kernel"] = block(  # [L, F, D]
            "mlp.gate_up_proj.weight", model_axis=1, hf_axis=0, hf_span=span)
    else:
      for name in ("q_proj", "k_proj", "v_proj"):
        out[f"layers/attn/{name}/kernel"] = block(  # [L, N or K, H, D]
            f"self_attn.{name}.weight", reshape_to(-1, h, d), model_axis=1, hf_axis=0)
        if config.qkv_bias:
          out[f"layers/attn/{name}/bias"] = block(  # [L, N or K, H]
              f"self_attn.{name}.bias", reshape_to(-1, h), model_axis=1, hf_axis=0)
      for name in ("gate_proj", "up_proj"):
        out[f"layers/mlp/{name}/kernel"] = block(  # [L, F, D]
            f"mlp.{name}.weight", model_axis=1, hf_axis=0)
        if config.mlp_bias:
          out[f"layers/mlp/{name}/bias"] = block(f"mlp.{name}.bias", model_axis=1, hf_axis=0)
    out["layers/attn/o_proj/kernel"] = block(  # [L, D, N, H]
        "self_attn.o_proj.weight", reshape_to(d, -1, h), model_axis=2, hf_axis=1)
    if config.out_bias:
      out["layers/attn/o_proj/bias"] = block("self_attn.o_proj.bias")
    if config.qk_norm_over_heads:  # [N x H] and [K x H] -> [L, N, H] and [L, K, H]
      out["layers/attn/q_norm/scale"] = block("self_attn.q_norm.weight", reshape_to(-1, h), 1, 0)
      out["layers/attn/k_norm/scale"] = block("self_attn.k_norm.weight", reshape_to(-1, h), 1, 0)
    elif config.qk_norm:
      out["layers/attn/q_norm/scale"] = block("self_attn.q_norm.weight")
      out["layers/attn/k_norm/scale"] = block("self_attn.k_norm.weight")
    out["layers/mlp/down_proj/kernel"] = block(  # [L, D, F]
        "mlp.down_proj.weight", model_axis=2, hf_axis=1)
    if config.mlp_bias:
      out["layers/mlp/down_proj/bias"] = block("mlp.down_proj.bias")
  head_tensors = _HEAD_TENSORS.get(config.variant, {})
  if config.head == "score" and config.reward_head is not None:
    out.update(heads_lib.weight_sources(config.reward_head))
  elif config.head == "score":
    out["score/kernel"] = WeightSource(head_tensors.get("score", "score.weight"))  # [L, D]
  elif config.head == "lm" and not config.tie_word_embeddings:
    out["lm_head/kernel"] = WeightSource(  # [V, D]
        head_tensors.get("lm", "lm_head.weight"), model_axis=0, hf_axis=0)
  return out
