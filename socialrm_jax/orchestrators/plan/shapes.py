"""Real model shapes to plan for without their files: each a HF `config.json` as the release
publishes it, made a reward model (a sequence-classification head with one output, as Skywork's
and most reward models are), read by the same `config_from_hf` as a real checkpoint.

Published sizes, for the language-model form (LM head included where it is not tied), checked in
tests/orchestrators/test_plan.py from these configs: Llama 3.2 1B 1.24B, Llama 3.1 8B 8.03B, Llama
3.1 70B 70.6B, Gemma 2 27B 27.2B, Qwen3 0.6B 0.6B (0.44B without embeddings), Qwen3 8B 8.2B (6.95B
without embeddings). As reward models the LM head gives way to a [1, D] score head.
"""

from __future__ import annotations

from typing import Any

from socialrm_jax.base.errors import InputError

_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

# name -> config.json (meta-llama/Llama-3.2-1B, meta-llama/Llama-3.1-8B, meta-llama/Llama-3.1-70B,
# google/gemma-2-27b, Qwen/Qwen3-0.6B, Qwen/Qwen3-8B), without the fields no shape depends on.
MODEL_SHAPES: dict[str, dict[str, Any]] = {
    "llama3.2-1b": {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192,
        "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "vocab_size": 128256, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0},
        "max_position_embeddings": 131072, "tie_word_embeddings": True},
    "llama3.1-8b": {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 128256, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 8.0},
        "max_position_embeddings": 131072, "tie_word_embeddings": False},
    "llama3.1-70b": {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 128256, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 8.0},
        "max_position_embeddings": 131072, "tie_word_embeddings": False},
    "gemma2-27b": {
        "architectures": ["Gemma2ForCausalLM"], "hidden_size": 4608, "intermediate_size": 36864,
        "num_hidden_layers": 46, "num_attention_heads": 32, "num_key_value_heads": 16,
        "head_dim": 128, "vocab_size": 256000, "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 144,
        "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
        "rope_theta": 10000.0, "max_position_embeddings": 8192, "tie_word_embeddings": True},
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024, "intermediate_size": 3072,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 151936, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "tie_word_embeddings": True},
    "qwen3-8b": {
        "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "intermediate_size": 12288,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 151936, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "rope_theta": 1000000.0, "max_position_embeddings": 40960,
        "tie_word_embeddings": False},
}


def reward_model_config(name: str) -> dict[str, Any]:
  """The config.json of shape `name` as a reward model: `<Family>ForSequenceClassification`
  with one output. An unknown name is an InputError naming --model_shape."""
  if name not in MODEL_SHAPES:
    raise InputError(f"--model_shape={name!r}: unknown shape; known: {', '.join(MODEL_SHAPES)}")
  config = dict(MODEL_SHAPES[name])
  family = config["architectures"][0].removesuffix("ForCausalLM")
  config["architectures"] = [f"{family}ForSequenceClassification"]
  config["num_labels"] = 1
  return config
