"""InternLM2 in PyTorch, rewritten from its published modelling code, as the reference for our decoder.

transformers does not ship InternLM2: its checkpoints (internlm2-chat-*, internlm2-*-reward) carry
`modeling_internlm2.py` as remote code, which this project never runs. This module restates what
that code computes in eager mode, with the published tensor names and config fields, so a tiny
random checkpoint saved from it (`save_tiny_internlm2`) reads exactly as a real one does:

- `model.tok_embeddings`, then per layer `attention_norm` -> `attention` (a fused `wqkv` whose rows
  are grouped per key/value head, [q x G, k, v] in each group, then `wo`) and `ffn_norm` ->
  `feed_forward` (`w2(silu(w1 x) * w3 x)`), pre-norm residuals; `model.norm` at the end;
- RMSNorm as Llama's (float32 statistics, cast back, then times the weight);
- RoPE over positions 0..T-1 of the padded batch (no shift for left padding), rotate-half layout;
  "linear" divides positions by the factor, "dynamic" raises the base once T exceeds
  `max_position_embeddings`;
- `InternLM2ForCausalLM`: `output` maps hidden states to logits;
- `InternLM2ForRewardModel`: `v_head` [1, D] read at each row's last real token.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import types

import torch
from torch import nn


def default_config(**overrides) -> dict:
  """A tiny InternLM2 config.json, with the fields the published ones carry."""
  config = dict(
      architectures=["InternLM2ForRewardModel"], model_type="internlm2",
      auto_map={"AutoConfig": "configuration_internlm2.InternLM2Config",
                "AutoModel": "modeling_internlm2.InternLM2ForRewardModel"},
      vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
      max_position_embeddings=64, rms_norm_eps=1e-6, initializer_range=0.02, use_cache=True,
      pad_token_id=127, bos_token_id=1, eos_token_id=2, reward_token_id=126,
      tie_word_embeddings=False, bias=False, rope_theta=1000.0, rope_scaling=None,
      attn_implementation="eager", torch_dtype="float32")
  config.update(overrides)
  return config


class RMSNorm(nn.Module):

  def __init__(self, dim: int, eps: float):
    super().__init__()
    self.weight = nn.Parameter(torch.ones(dim))
    self.eps = eps

  def forward(self, x):
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
    return self.weight * x32.to(x.dtype)


def _rotate_half(x):
  half = x.shape[-1] // 2
  return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):

  def __init__(self, c: types.SimpleNamespace):
    super().__init__()
    self.c = c
    self.num_heads, self.num_kv_heads = c.num_attention_heads, c.num_key_value_heads
    self.groups = self.num_heads // self.num_kv_heads
    self.head_dim = c.hidden_size // self.num_heads
    rows = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
    self.wqkv = nn.Linear(c.hidden_size, rows, bias=c.bias)
    self.wo = nn.Linear(self.num_heads * self.head_dim, c.hidden_size, bias=c.bias)

  def rotary(self, seq_len: int, dtype):
    """cos, sin [T, H] for positions 0..T-1, as the published rotary classes cache them."""
    dim, base, scaling = self.head_dim, self.c.rope_theta, self.c.rope_scaling or {}
    kind, factor = scaling.get("type"), scaling.get("factor", 1.0)
    if kind == "dynamic" and seq_len > self.c.max_position_embeddings:
      base = base * ((factor * seq_len / self.c.max_position_embeddings) - (factor - 1)) ** (
          dim / (dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    t = torch.arange(seq_len, dtype=inv_freq.dtype)
    if kind == "linear":
      t = t / factor
    freqs = torch.einsum("i,j->ij", t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)

  def forward(self, x, mask):
    b, t, _ = x.shape
    qkv = self.wqkv(x).view(b, t, self.num_kv_heads, self.groups + 2, self.head_dim)
    q = qkv[..., :self.groups, :].reshape(b, t, self.num_heads, self.head_dim).transpose(1, 2)
    k = qkv[..., -2, :].transpose(1, 2)  # [B, K, T, H]
    v = qkv[..., -1, :].transpose(1, 2)
    cos, sin = self.rotary(t, v.dtype)  # [T, H], positions 0..T-1
    q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
    k = k.repeat_interleave(self.groups, dim=1)
    v = v.repeat_interleave(self.groups, dim=1)
    weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim) + mask
    weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, -1)
    return self.wo(out)


class MLP(nn.Module):

  def __init__(self, c):
    super().__init__()
    self.w1 = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
    self.w3 = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
    self.w2 = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

  def forward(self, x):
    return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class DecoderLayer(nn.Module):

  def __init__(self, c):
    super().__init__()
    self.attention = Attention(c)
    self.feed_forward = MLP(c)
    self.attention_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
    self.ffn_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

  def forward(self, x, mask):
    x = x + self.attention(self.attention_norm(x), mask)
    return x + self.feed_forward(self.ffn_norm(x))


class InternLM2Model(nn.Module):

  def __init__(self, c):
    super().__init__()
    self.tok_embeddings = nn.Embedding(c.vocab_size, c.hidden_size, c.pad_token_id)
    self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c.num_hidden_layers)])
    self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

  def forward(self, input_ids, attention_mask):
    x = self.tok_embeddings(input_ids)
    t = input_ids.shape[1]
    # The published `_prepare_decoder_attention_mask`: causal, and padding keys masked, additive.
    allowed = torch.tril(torch.ones(t, t, dtype=torch.bool))[None] & attention_mask.bool()[:, None, :]
    mask = torch.zeros(allowed.shape, dtype=x.dtype).masked_fill(~allowed, torch.finfo(x.dtype).min)
    for layer in self.layers:
      x = layer(x, mask[:, None])
    return self.norm(x)


class InternLM2ForCausalLM(nn.Module):

  def __init__(self, c):
    super().__init__()
    self.model = InternLM2Model(c)
    self.output = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

  def forward(self, input_ids, attention_mask=None):
    if attention_mask is None:
      attention_mask = torch.ones_like(input_ids)
    return types.SimpleNamespace(logits=self.output(self.model(input_ids, attention_mask)))


class InternLM2ForRewardModel(nn.Module):

  def __init__(self, c):
    super().__init__()
    self.model = InternLM2Model(c)
    self.v_head = nn.Linear(c.hidden_size, 1, bias=False)

  def forward(self, input_ids, attention_mask=None):
    """-> logits [B, 1]: `v_head` at each row's last real token (the published `eos_indices`)."""
    if attention_mask is None:
      attention_mask = torch.ones_like(input_ids)
    values = self.v_head(self.model(input_ids, attention_mask)).squeeze(-1)  # [B, T]
    last = attention_mask.size(1) - 1 - attention_mask.long().fliplr().argmax(dim=1, keepdim=True)
    return types.SimpleNamespace(logits=values.gather(dim=1, index=last))


CLASSES = {"InternLM2ForRewardModel": InternLM2ForRewardModel,
           "InternLM2ForCausalLM": InternLM2ForCausalLM}


def save_tiny_internlm2(folder: str | os.PathLike, architecture: str = "InternLM2ForRewardModel",
                        *, seed: int = 0, weight_std: float = 0.2, **overrides) -> nn.Module:
  """A random InternLM2 of `architecture` saved as config.json + model.safetensors in `folder`
  (the published names); returns it in eval mode, as the reference."""
  from safetensors.torch import save_file  # pylint: disable=import-outside-toplevel
  config = default_config(architectures=[architecture], **overrides)
  torch.manual_seed(seed)
  model = CLASSES[architecture](types.SimpleNamespace(**config)).eval()
  with torch.no_grad():
    for name, param in model.named_parameters():
      param.normal_(0.0, weight_std)
      if name.endswith("norm.weight"):
        param.add_(1.0)  # around 1, as trained norms are
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "config.json").write_text(json.dumps(config, indent=2))
  save_file({k: v.contiguous() for k, v in model.state_dict().items()},
            str(folder / "model.safetensors"), metadata={"format": "pt"})
  return model
