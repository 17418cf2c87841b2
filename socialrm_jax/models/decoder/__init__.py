"""Decoder-only transformers: Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3 (text), OLMo 2,
Phi-3 and InternLM2, in one Model: the decoder family (`families.ModelFamily`).

The variants differ in a handful of switches recorded in `Config` (biases, q/k norms, Gemma's
`1 + w` norms and scaled embeddings, Gemma 2's sandwich norms, soft-capping and alternating sliding
windows, Gemma 3's local RoPE base, OLMo 2's post-norms and whole-projection q/k norms, Phi-3's
partial rotary, RoPE scaling). Split as gemma splits its transformer, imports one way:
- `config`: `Config`, and `config_from_hf` reading it from a HF `config.json` dict;
- `modules`: attention, the block and the `Model`, from a `Config`;
- `weight_map`: which HF tensors feed which parameters (`weight_sources`), from a `Config`.

The blocks are one stacked module (every parameter with a leading [L] axis) run under
`jax.lax.scan` (`trunk.scan_layers`), so the traced program holds one layer and compile time does
not grow with depth. What differs between layers is data, not code: each layer's sliding window
(and, for Gemma 3, its RoPE frequencies) is scanned with its parameters.
"""

from __future__ import annotations

from socialrm_jax.models.decoder.config import (ARCHITECTURES, REFUSED_ARCHITECTURES, Config,
                                                config_from_hf)
from socialrm_jax.models.decoder.modules import (FULL_WINDOW, Model, layer_rope_array,
                                                 layer_window_array, rope_inverse_frequencies)
from socialrm_jax.models.decoder.weight_map import is_saved_buffer, weight_sources

IS_CAUSAL = True
HAS_POSITION_BIAS = False
# Every class keeps the trunk under `model.` (a reward class under another prefix:
# `heads.HeadSpec.trunk_prefix`).
BASE_MODEL_PREFIX = ""

__all__ = ["ARCHITECTURES", "BASE_MODEL_PREFIX", "Config", "FULL_WINDOW", "HAS_POSITION_BIAS",
           "IS_CAUSAL", "Model", "REFUSED_ARCHITECTURES", "config_from_hf", "is_saved_buffer",
           "layer_rope_array", "layer_window_array", "rope_inverse_frequencies", "weight_sources"]
