"""The decoder's `Config` and `config_from_hf`, which reads it from a HF `config.json` dict, new
style (`rope_parameters`, `layer_types`) or old style (`rope_theta` + `rope_scaling`, no
`layer_types`), following each family's own defaults."""

from __future__ import annotations

import dataclasses
from typing import Any

from socialrm_jax.models import hf_config as hf_config_lib

# Config.variant -> the HF class-name prefix of that family's `*ForSequenceClassification` and
# `*ForCausalLM`.
_PREFIX = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3",
           "gemma": "Gemma", "gemma2": "Gemma2", "olmo2": "Olmo2", "phi3": "Phi3"}

# HF architecture -> (Config.variant, head).
_VARIANTS: dict[str, tuple[str, str]] = {
    f"{prefix}{suffix}": (variant, head) for variant, prefix in _PREFIX.items()
    for suffix, head in (("ForSequenceClassification", "score"), ("ForCausalLM", "lm"))}
_VARIANTS.update({
    # transformers 5 names the text-only Gemma 3 classifier so; `Gemma3ForSequenceClassification`
    # is the multimodal one (a vision tower and a `text_config`), which is not implemented.
    "Gemma3TextForSequenceClassification": ("gemma3", "score"),
    "Gemma3ForCausalLM": ("gemma3", "lm"),
    # InternLM2's own (remote) code, never run: its reward model reads `v_head` at the last token.
    "InternLM2ForRewardModel": ("internlm2", "score"),
    "InternLM2ForCausalLM": ("internlm2", "lm"),
})

ARCHITECTURES: dict[str, str] = {name: head for name, (_, head) in _VARIANTS.items()}

# Architectures of these families that are refused, and why (`families.family_for` says so).
REFUSED_ARCHITECTURES: dict[str, str] = {
    name: ("multimodal Gemma 3 (a vision tower and a `text_config`) is not implemented; "
           "the text-only Gemma3TextForSequenceClassification and Gemma3ForCausalLM are")
    for name in ("Gemma3ForSequenceClassification", "Gemma3ForConditionalGeneration")}


@dataclasses.dataclass(frozen=True)
class Config(hf_config_lib.FamilyConfig):
  """Everything the decoder needs; hashable, so it can live in an nnx graph definition."""
  variant: str  # a key of _PREFIX
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rms_norm_eps: float
  activation: str
  rope_theta: float = 10000.0
  rope_type: str = "default"  # "default" | "linear" | "llama3"
  rope_factor: float = 1.0
  rope_low_freq_factor: float = 1.0
  rope_high_freq_factor: float = 4.0
  rope_original_max_positions: int = 8192
  # InternLM2's dynamic NTK RoPE is the plain one for sequences up to this many tokens (and
  # changes its base beyond): rows longer than this are refused. 0: no such limit.
  rope_max_positions: int = 0
  rotary_dim: int = 0  # Phi-3's partial rotary: the leading dims of each head that rotate; 0 = all
  # Gemma 3: the sliding layers' own RoPE base (plain RoPE), and which layers use it.
  local_rope_theta: float = 0.0
  local_rope_layers: tuple[bool, ...] = ()
  qkv_bias: bool = False
  out_bias: bool = False
  mlp_bias: bool = False
  qk_norm: bool = False  # Qwen3, Gemma 3: RMSNorm over each head's q and k before RoPE
  qk_norm_over_heads: bool = False  # OLMo 2: q/k norms span the whole projection (all heads)
  unit_offset_norm: bool = False  # Gemma: norms multiply by (1 + w)
  scale_embeddings: bool = False  # Gemma: embeddings times sqrt(hidden_size)
  sandwich_norms: bool = False  # Gemma 2, Gemma 3: norms before and after attention and MLP
  post_norms_only: bool = False  # OLMo 2: norms after attention and MLP only, none before
  query_scale: float = 0.0  # multiplies q.k; 0 means head_dim ** -0.5
  attn_logit_softcap: float | None = None
  final_logit_softcap: float | None = None
  layer_windows: tuple[int | None, ...] = ()  # per layer: sliding window or None (full)
  # InternLM2's reward models: their scorer (`get_score`) appends this token to the templated
  # conversation and reads `v_head` there; None for every other model.
  reward_token_id: int | None = None

  @property
  def attention_scale(self) -> float:
    return self.query_scale or self.head_dim ** -0.5

  @property
  def norm_scale_in_float32(self) -> bool:
    """OLMo 2's RMSNorm multiplies by its weight in float32, then casts (Llama's casts first)."""
    return self.variant == "olmo2"

  @property
  def attention_logit_cap(self) -> float | None:
    return self.attn_logit_softcap

  @property
  def has_sliding_windows(self) -> bool:
    return any(window is not None for window in self.layer_windows)

  @property
  def appended_token_ids(self) -> tuple[int, ...]:
    return () if self.reward_token_id is None else (self.reward_token_id,)


def _rope_settings(hf: dict, variant: str, default_theta: float = 10000.0) -> dict[str, Any]:
  """RoPE theta and scaling from `rope_parameters` (transformers >= 5) or `rope_scaling` (older)."""
  params = dict(hf.get("rope_parameters") or {})
  if not params and hf.get("rope_scaling"):
    params = dict(hf["rope_scaling"])
  theta = params.get("rope_theta", hf.get("rope_theta", default_theta))
  rope_type = params.get("rope_type", params.get("type", "default"))
  out: dict[str, Any] = {}
  if variant == "internlm2" and rope_type == "dynamic":
    # InternLM2's dynamic NTK raises the base only once a sequence is longer than
    # max_position_embeddings; up to there it is the plain RoPE, and longer rows are refused.
    out["rope_max_positions"] = int(hf["max_position_embeddings"])
    rope_type = "default"
  if rope_type not in ("default", "linear", "llama3"):
    why = ""
    if rope_type in ("longrope", "su"):
      why = (": Phi-3's long-context RoPE switches its frequencies with the length of the whole "
             "batch, which packed scoring cannot match")
    raise ValueError(f"unsupported rope type {rope_type!r}{why} (supported: default, linear, "
                     "llama3" + (", dynamic" if variant == "internlm2" else "") + ")")
  partial = params.get("partial_rotary_factor", 1.0)
  if variant == "phi3":  # older Phi-3 configs keep it beside the RoPE settings
    partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
  if partial != 1.0 and variant != "phi3":
    raise ValueError("partial_rotary_factor != 1 is not supported for this decoder")
  if partial != 1.0:
    head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    out["rotary_dim"] = int(head_dim * partial)
  out.update(rope_theta=float(theta), rope_type=rope_type)
  if rope_type in ("linear", "llama3"):
    out["rope_factor"] = float(params["factor"])
  if rope_type == "llama3":
    out["rope_low_freq_factor"] = float(params["low_freq_factor"])
    out["rope_high_freq_factor"] = float(params["high_freq_factor"])
    out["rope_original_max_positions"] = int(
        params.get("original_max_position_embeddings", hf.get("max_position_embeddings", 8192)))
  return out


def _gemma3_rope_settings(hf: dict) -> dict[str, Any]:
  """Gemma 3: full-attention layers' RoPE (possibly scaled) and the sliding layers' own base,
  from `rope_parameters` per layer type (transformers >= 5) or `rope_theta`, `rope_scaling` and
  `rope_local_base_freq` (older), with Gemma3TextConfig's defaults."""
  params = hf.get("rope_parameters") or {}
  if "full_attention" in params or "sliding_attention" in params:
    full = dict(params.get("full_attention") or {})
    local = dict(params.get("sliding_attention") or {})
  else:
    full = dict(hf.get("rope_scaling") or {})
    full.setdefault("rope_theta", hf.get("rope_theta", 1_000_000.0))
    local = {"rope_theta": hf.get("rope_local_base_freq", 10_000.0)}
  local_type = local.get("rope_type", local.get("type", "default"))
  if local_type != "default":
    raise ValueError(f"unsupported rope type {local_type!r} for Gemma 3's sliding layers "
                     "(supported: default)")
  out = _rope_settings({"rope_parameters": full, **{k: v for k, v in hf.items() if k not in (
      "rope_parameters", "rope_scaling", "rope_theta")}}, "gemma3", default_theta=1_000_000.0)
  out["local_rope_theta"] = float(local.get("rope_theta", 10_000.0))
  return out


def _layer_types(hf: dict, variant: str, num_layers: int) -> list[str] | None:
  """Each layer's "sliding_attention" or "full_attention" where the config says (`layer_types`)
  or the family implies it; None when every layer attends fully."""
  if hf.get("layer_types") is not None:
    return list(hf["layer_types"])
  if variant == "gemma3":
    pattern = hf.get("sliding_window_pattern", 6)  # Gemma3TextConfig's default: 5 local, 1 global
    return ["sliding_attention" if (i + 1) % pattern else "full_attention"
            for i in range(num_layers)]
  return None


def _layer_windows(hf: dict, variant: str, num_layers: int) -> tuple[int | None, ...]:
  """Per-layer sliding window, following each family's HF config logic."""
  window = hf.get("sliding_window", 4096 if variant == "gemma3" else None)
  if variant in ("mistral", "phi3"):
    # Mistral and Phi-3 slide on every layer whenever a window is set.
    return (window,) * num_layers if window else (None,) * num_layers
  if variant in ("qwen2", "qwen3") and not hf.get("use_sliding_window", False):
    window = None
  layer_types = _layer_types(hf, variant, num_layers)
  if layer_types is None:
    if variant == "gemma2":
      layer_types = ["sliding_attention" if (i + 1) % 2 else "full_attention"
                     for i in range(num_layers)]
    elif variant in ("qwen2", "qwen3") and window:
      first = hf.get("max_window_layers", 28)
      layer_types = ["sliding_attention" if i >= first else "full_attention"
                     for i in range(num_layers)]
    else:
      layer_types = ["full_attention"] * num_layers
  if variant in ("llama", "gemma", "olmo2", "internlm2"):
    window = None
  return tuple(window if (t == "sliding_attention" and window) else None for t in layer_types)


_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3"}
_GEMMA_LIKE = ("gemma", "gemma2", "gemma3")


def _activation(hf: dict, variant: str) -> str:
  """The MLP activation each HF family actually runs."""
  if variant in ("gemma2", "gemma3"):
    return hf.get("hidden_activation") or "gelu_pytorch_tanh"
  if variant == "gemma":
    act = hf.get("hidden_act") or "gelu_pytorch_tanh"
    # GemmaConfig rewrites the legacy "gelu" of the official releases to the tanh approximation.
    return "gelu_pytorch_tanh" if act == "gelu" else act
  return hf.get("hidden_act") or "silu"


def _reward_token_id(hf: dict, architecture: str) -> int | None:
  """The token InternLM2's reward model appends after the conversation and scores at."""
  if architecture != "InternLM2ForRewardModel":
    return None
  if not isinstance(hf.get("reward_token_id"), int):
    raise ValueError("InternLM2ForRewardModel needs an integer `reward_token_id` (the token its "
                     "scorer appends after the conversation and reads the score at)")
  return hf["reward_token_id"]


def config_from_hf(hf_config: dict, architecture: str) -> Config:
  """HF `config.json` dict + architecture name -> Config."""
  head_fields = hf_config_lib.head_fields(hf_config, architecture, ARCHITECTURES, "decoder")
  variant = _VARIANTS[architecture][0]
  hidden = hf_config["hidden_size"]
  num_heads = hf_config["num_attention_heads"]
  num_layers = hf_config["num_hidden_layers"]
  head_dim = hf_config.get("head_dim") or hidden // num_heads
  gemma_like = variant in _GEMMA_LIKE
  act = _activation(hf_config, variant)
  # As in transformers: `id2label` decides the label count when present.
  # InternLM2 names it `bias` (wqkv and wo alike).
  attention_bias = bool(hf_config.get("bias" if variant == "internlm2" else "attention_bias", False))
  if variant == "gemma3":
    if hf_config.get("use_bidirectional_attention"):
      raise ValueError("use_bidirectional_attention (Gemma 3 as an encoder) is not supported")
    rope = _gemma3_rope_settings(hf_config)
    rope["local_rope_layers"] = tuple(
        t == "sliding_attention" for t in _layer_types(hf_config, variant, num_layers))
  else:
    rope = _rope_settings(hf_config, variant)
  gemma_2_or_3 = variant in ("gemma2", "gemma3")
  if architecture == "InternLM2ForRewardModel":
    head_fields["num_labels"] = 1  # one `v_head` output whatever its config says
  return Config(
      **head_fields,
      reward_token_id=_reward_token_id(hf_config, architecture),
      variant=variant,
      vocab_size=hf_config["vocab_size"],
      hidden_size=hidden,
      intermediate_size=hf_config["intermediate_size"],
      num_layers=num_layers,
      num_heads=num_heads,
      num_kv_heads=hf_config.get("num_key_value_heads") or num_heads,
      head_dim=head_dim,
      rms_norm_eps=float(hf_config.get("rms_norm_eps", 1e-6)),
      activation=act,
      **rope,
      # Qwen2 always has q/k/v biases and no o bias; Mistral has none; the rest follow the flag.
      qkv_bias=variant == "qwen2" or (attention_bias and variant != "mistral"),
      out_bias=attention_bias and variant not in ("qwen2", "mistral"),
      mlp_bias=bool(hf_config.get("mlp_bias", False)) and variant == "llama",
      qk_norm=variant in ("qwen3", "gemma3", "olmo2"),
      qk_norm_over_heads=variant == "olmo2",
      unit_offset_norm=gemma_like,
      scale_embeddings=gemma_like,
      sandwich_norms=variant in ("gemma2", "gemma3"),
      post_norms_only=variant == "olmo2",
      query_scale=(float(hf_config.get("query_pre_attn_scalar", 256)) ** -0.5
                   if gemma_2_or_3 else 0.0),
      # Gemma 3 keeps `attn_logit_softcapping` in its config but its attention never applies it.
      attn_logit_softcap=hf_config.get("attn_logit_softcapping") if variant == "gemma2" else None,
      final_logit_softcap=hf_config.get("final_logit_softcapping") if gemma_2_or_3 else None,
      layer_windows=_layer_windows(hf_config, variant, num_layers),
      tie_word_embeddings=bool(hf_config.get("tie_word_embeddings", variant in _TIED_BY_DEFAULT)),
  )
