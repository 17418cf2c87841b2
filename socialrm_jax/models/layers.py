"""Building blocks shared by the model families: norms, rotary embeddings, projections, MLPs.

Attention itself (masks, kernels, soft-capping, matmul precision) lives in `attention.py`.

Each block mirrors the HuggingFace PyTorch reference it is loaded from, down to where the
float32 upcasts happen, so fp32 outputs match to ~1e-6 and bf16 outputs drift the same way.
Einsum letters: B batch, T query time, S key time, D model width, N query heads, K key/value
heads, G query heads per key/value head, H head width, F MLP width, V vocabulary.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from socialrm_jax.models import attention

_normal_init = nnx.initializers.normal(stddev=0.02)


def activation(name: str) -> Callable[[jnp.ndarray], jnp.ndarray]:
  """HF `hidden_act` / `hidden_activation` name -> function."""
  table = {
      "silu": jax.nn.silu,
      "swish": jax.nn.silu,
      "gelu": lambda x: jax.nn.gelu(x, approximate=False),
      "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
      "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
      "gelu_fast": lambda x: jax.nn.gelu(x, approximate=True),
      "relu": jax.nn.relu,
  }
  if name not in table:
    raise ValueError(f"unsupported activation {name!r}; supported: {', '.join(sorted(table))}")
  return table[name]


def take_positions(hidden: jax.Array, index: jax.Array | None) -> jax.Array:
  """hidden [B, T, ...] at index [B, P] -> [B, P, ...]; all of it when `index` is None."""
  if index is None:
    return hidden
  return jnp.take_along_axis(hidden, index.reshape(*index.shape, *[1] * (hidden.ndim - 2)), axis=1)


class RMSNorm(nnx.Module):
  """RMS norm over the last axis (or the last two, for a `dim` of two axes), computed in float32.

  `unit_offset=False` (Llama, Mistral, Qwen): cast back to the input dtype, then multiply by `scale`.
  `unit_offset=True` (Gemma): multiply by `1 + scale` in float32, then cast (HF PR 29402).
  `scale_in_float32=True` (OLMo 2): multiply by `scale` in float32, then cast.
  A `dim` of (N, H) normalises each token's N heads together (OLMo 2's q/k norms span the whole
  projection), with a scale per head and width.
  """

  def __init__(self, dim: int | tuple[int, ...], eps: float, *, unit_offset: bool, dtype,
               param_dtype, scale_in_float32: bool = False):
    init = jnp.zeros if unit_offset else jnp.ones
    shape = (dim,) if isinstance(dim, int) else tuple(dim)
    self.scale = nnx.Param(init(shape, dtype=param_dtype))
    self.eps = eps
    self.unit_offset = unit_offset
    self.scale_in_float32 = scale_in_float32
    self.dtype = dtype

  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    # Over [rows, features]: the leading axes (and a `dim` of two axes) flattened, free reshapes.
    scale = self.scale[...].reshape(-1)
    x32 = x.reshape(-1, scale.shape[0]).astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    if self.unit_offset:
      out = (normed * (1.0 + scale.astype(jnp.float32))).astype(x.dtype)
    elif self.scale_in_float32:
      out = (scale.astype(jnp.float32) * normed).astype(x.dtype)
    else:
      out = scale.astype(self.dtype) * normed.astype(x.dtype)
    return out.reshape(x.shape)


class Embedder(nnx.Module):
  """Token embedding table [V, D]; also the tied LM head."""

  def __init__(self, vocab_size: int, dim: int, *, dtype, param_dtype, rngs: nnx.Rngs):
    self.embedding = nnx.Param(_normal_init(rngs.params(), (vocab_size, dim), param_dtype))
    self.dtype = dtype

  def __call__(self, input_ids: jnp.ndarray) -> jnp.ndarray:
    return jnp.take(self.embedding[...].astype(self.dtype), input_ids, axis=0)  # [B, T, D]

  def attend(self, hidden: jnp.ndarray) -> jnp.ndarray:
    return attention.einsum("...D,VD->...V", hidden, self.embedding[...].astype(self.dtype))


class Projection(nnx.Module):
  """A linear map named by an einsum over its axes (`equation`, e.g. "BTD,NHD->BTNH"), with an
  optional bias, computed as one matrix product that JAX differentiates.

  `kernel_shape` follows the einsum's second operand, its output axes first, then its input axes
  (the input's trailing axes, in order): a HF Linear's [out, in] layout, so that a checkpoint's
  matrices are the kernels as they are stored (reshaped, never transposed, `weights.py`), and XLA
  contracts them so as fast as the transpose. `bias_shape` follows the output's trailing axes.
  """

  def __init__(self, equation: str, kernel_shape: tuple[int, ...], bias_shape: tuple[int, ...] | None,
               *, dtype, param_dtype, rngs: nnx.Rngs):
    self.equation = equation
    self.output_axes, _ = kernel_axes(equation)
    self.kernel = nnx.Param(_normal_init(rngs.params(), kernel_shape, param_dtype))
    self.bias = None if bias_shape is None else nnx.Param(jnp.zeros(bias_shape, param_dtype))
    self.dtype = dtype
    # LoRA's adapters, A [in, r] and (alpha / r) B [r, out] over the flattened input and output
    # axes, where training attaches them (training.trainable.init_lora); None: a plain projection.
    self.lora_a: nnx.Param | None = nnx.data(None)
    self.lora_b: nnx.Param | None = nnx.data(None)

  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    # One matrix product, [rows, in] x [out, in]: the leading axes and the kernel's output and
    # input axes each flattened (free reshapes of row-major arrays), so that every product of
    # the backward pass, too, contracts a single axis.
    kernel = self.kernel[...].astype(self.dtype)
    outputs, inputs = kernel.shape[:self.output_axes], kernel.shape[self.output_axes:]
    leading = x.shape[:x.ndim - len(inputs)]
    rows = x.astype(self.dtype).reshape(-1, math.prod(inputs))  # [rows, in]
    y = attention.einsum("RI,OI->RO", rows, kernel.reshape(math.prod(outputs), math.prod(inputs)))
    if self.lora_a is not None:
      # x W + (x A) B, as PEFT's LoraLayer computes it: the backward pass forms the gradients of
      # the small A and B and of x, never the frozen kernel's (a product as large as W's).
      low_rank = _named(attention.einsum("RI,IK->RK", rows,
                                         self.lora_a[...].astype(self.dtype)))
      y = y + attention.einsum("RK,KO->RO", low_rank, self.lora_b[...].astype(self.dtype))
    # Named once, the sum, so that a remat policy that keeps projections keeps one buffer: named
    # apart, x W and (x A) B would each be kept where the backward pass reads only their sum.
    y = _named(y).reshape(*leading, *outputs)
    if self.bias is not None:
      y = y + self.bias[...].astype(self.dtype)
    return y


# The name a projection gives its output (and LoRA's x A), for the remat policies that keep
# projections (`trunk.REMAT_POLICIES`): a plain dot's output is not always the value the backward
# pass reads (with LoRA it is the sum x W + (x A) B).
PROJECTION_OUTPUT = "projection_output"
# The name of RoPE's cosines and sines (`apply_rope`), kept by those policies the same way.
ROTARY_TABLES = "rotary_tables"


def _named(x: jax.Array) -> jax.Array:
  return jax.ad_checkpoint.checkpoint_name(x, PROJECTION_OUTPUT)


def kernel_axes(equation: str) -> tuple[int, int]:
  """(output axes, input axes) of a projection's kernel, from its einsum `x,kernel->y`, checking
  that it is a matrix product with the kernel [out..., in...]: x = leading axes + the kernel's
  input (trailing) axes in order, y = the same leading axes + its output (leading) axes."""
  operands, output = equation.split("->")
  x, kernel = operands.split(",")
  x = x.replace("...", "")
  output = output.replace("...", "")
  count = sum(1 for axis in kernel if axis in x)
  kept, contracted = kernel[:len(kernel) - count], kernel[len(kernel) - count:]
  leading = x[:len(x) - count]
  if not (x.endswith(contracted) and output == leading + kept and not set(leading) & set(kernel)):
    raise ValueError(f"{equation!r} is not a product over the kernel's trailing axes")
  return len(kept), count


def rope_inverse_frequencies(head_dim: int, theta: float, rope_type: str, factor: float,
                             low_freq_factor: float, high_freq_factor: float,
                             original_max_positions: int) -> np.ndarray:
  """[H/2] float32 inverse frequencies, as transformers' `ROPE_INIT_FUNCTIONS` compute them."""
  exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
  inv_freq = (1.0 / (np.float32(theta) ** exponents)).astype(np.float32)
  if rope_type == "default":
    return inv_freq
  if rope_type == "linear":
    return (inv_freq / np.float32(factor)).astype(np.float32)
  if rope_type == "llama3":
    # Llama 3.1: long wavelengths are divided by `factor`, short ones kept, the band between
    # interpolated smoothly.
    low_freq_wavelen = original_max_positions / low_freq_factor
    high_freq_wavelen = original_max_positions / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_positions / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, scaled).astype(np.float32)
  raise ValueError(f"unsupported rope type {rope_type!r}; supported: default, linear, llama3")


def apply_rope(x: jnp.ndarray, positions: jnp.ndarray, inv_freq: np.ndarray | jax.Array) -> jnp.ndarray:
  """Rotates x [B, T, N, H] by its positions [B, T] (HF's rotate-half layout, not interleaved).

  `inv_freq` [R/2]: with R < H (partial rotary, Phi-3), only the first R dims rotate and the rest
  pass through, as HF's `apply_rotary_pos_emb` does.
  """
  rotary = 2 * inv_freq.shape[-1]
  if rotary < x.shape[-1]:
    return jnp.concatenate([apply_rope(x[..., :rotary], positions, inv_freq), x[..., rotary:]],
                           axis=-1)
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B, T, H/2]
  angles = jnp.concatenate([angles, angles], axis=-1)  # [B, T, H]
  # Named, so that a remat policy may keep them rather than recompute them in the backward pass.
  cos, sin = jax.ad_checkpoint.checkpoint_name(
      (jnp.cos(angles).astype(x.dtype)[:, :, None, :],  # [B, T, 1, H]
       jnp.sin(angles).astype(x.dtype)[:, :, None, :]), ROTARY_TABLES)
  first, second = jnp.split(x, 2, axis=-1)
  rotated = jnp.concatenate([-second, first], axis=-1)
  return x * cos + rotated * sin


class GatedMLP(nnx.Module):
  """down(act(gate(x)) * up(x)): SwiGLU for Llama-likes, GeGLU (tanh) for Gemma."""

  def __init__(self, dim: int, hidden_dim: int, act: str, use_bias: bool, *, dtype, param_dtype,
               rngs: nnx.Rngs):
    bias = (hidden_dim,) if use_bias else None
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.gate_proj = Projection("BTD,FD->BTF", (hidden_dim, dim), bias, **kw)
    self.up_proj = Projection("BTD,FD->BTF", (hidden_dim, dim), bias, **kw)
    self.down_proj = Projection("BTF,DF->BTD", (dim, hidden_dim), (dim,) if use_bias else None, **kw)
    self.act_name = act

  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    return self.down_proj(activation(self.act_name)(self.gate_proj(x)) * self.up_proj(x))


class BiasedSelfAttention(nnx.Module):
  """Multi-head self-attention with biased q/k/v/o projections (GPT-2, BERT) under a packed
  `attention.Layout`. Every head has its own keys and values."""

  def __init__(self, hidden_size: int, num_heads: int, head_dim: int, *, scale: float,
               implementation: str, dtype, param_dtype, rngs: nnx.Rngs):
    """`implementation`: a concrete `attention.attend` implementation ("xla", "cudnn", ...)."""
    d, n, h = hidden_size, num_heads, head_dim
    self.scale = scale
    self.implementation = implementation
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.q_proj = Projection("BTD,NHD->BTNH", (n, h, d), (n, h), **kw)
    self.k_proj = Projection("BTD,NHD->BTNH", (n, h, d), (n, h), **kw)
    self.v_proj = Projection("BTD,NHD->BTNH", (n, h, d), (n, h), **kw)
    self.o_proj = Projection("BTNH,DNH->BTD", (d, n, h), (d,), **kw)

  def __call__(self, x: jax.Array, positions: jax.Array, layout: attention.Layout,
               scale: jax.Array | None = None) -> jax.Array:
    """`scale`: the logit scale of this call (a scanned layer's own) in place of `self.scale`."""
    q = self.q_proj(x)  # [B, T, N, H]
    k = self.k_proj(x)  # [B, S, N, H]
    v = self.v_proj(x)  # [B, S, N, H]
    attended = attention.attend(q, k, v, layout, positions,
                                scale=self.scale if scale is None else scale,
                                implementation=self.implementation)  # [B, T, N, H]
    return self.o_proj(attended)  # [B, T, D]


class DenseMLP(nnx.Module):
  """Position-wise feed-forward with biases (GPT-2, BERT): D -> F -> D."""

  def __init__(self, hidden_size: int, intermediate_size: int, activation_name: str, *, dtype,
               param_dtype, rngs: nnx.Rngs):
    d, f = hidden_size, intermediate_size
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.activation = activation(activation_name)
    self.up = Projection("BTD,FD->BTF", (f, d), (f,), **kw)
    self.down = Projection("BTF,DF->BTD", (d, f), (d,), **kw)

  def __call__(self, x: jax.Array) -> jax.Array:
    return self.down(self.activation(self.up(x)))  # [B, T, D]
