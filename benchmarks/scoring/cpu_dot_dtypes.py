"""What a dot costs on this CPU in float32 and in bfloat16, by the dtype XLA is asked to return.

  JAX_PLATFORMS=cpu python -m benchmarks.scoring.cpu_dot_dtypes [--tokens=2048] [--hidden=512]
      [--layers=16]

Times one [tokens, hidden] x [hidden, 2 hidden] product (the 35M Llama's MLP shape) jitted three
ways: float32 operands; bfloat16 operands with a bfloat16 result (`x @ w`); bfloat16 operands with
a float32 result (`preferred_element_type=float32`, then rounded to bfloat16, as
`models.attention.einsum` computes every projection). Prints milliseconds (best of 10) and
GFLOP/s side by side. On a CPU with bfloat16 dot instructions (AVX512-BF16, AMX) XLA:CPU uses them
only for the third.

Then the third's product once per layer of `--layers`, each weight [2 hidden, hidden] as a Linear
stores it, two ways: the layers' weights stacked [layers, ...] and each sliced in a scan, as
`models.trunk` runs a model's layers (under its CPU compiler options), and each layer's weight a
buffer of its own, the layers unrolled. XLA:CPU copies a slice of the stack before its dot reads
it; the second has nothing to copy.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from socialrm_jax.main import command
from socialrm_jax.models import trunk

_TOKENS = flags.DEFINE_integer("tokens", 2048, "Rows of the left operand.")
_HIDDEN = flags.DEFINE_integer("hidden", 512, "Contracted size; the output has twice as many.")
_LAYERS = flags.DEFINE_integer("layers", 16, "Layers of the stacked-against-own-buffers table.")
_REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls; the best is printed.")


def best_seconds(fn, *args) -> float:
  jax.block_until_ready(fn(*args))  # compiled and warmed
  times = []
  for _ in range(_REPEATS.value):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return min(times)


def main(argv):
  del argv
  tokens, hidden = _TOKENS.value, _HIDDEN.value
  rng = np.random.default_rng(0)
  x = rng.standard_normal((tokens, hidden), np.float32)
  w = rng.standard_normal((hidden, 2 * hidden), np.float32)
  flops = 2 * tokens * hidden * 2 * hidden
  cases = [
      ("float32", jnp.float32, lambda x, w: x @ w),
      ("bfloat16, bfloat16 result", jnp.bfloat16, lambda x, w: x @ w),
      ("bfloat16, float32 result", jnp.bfloat16,
       lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32).astype(jnp.bfloat16)),
  ]
  print(f"{jax.devices()[0].device_kind}: [{tokens}, {hidden}] x [{hidden}, {2 * hidden}]")
  print(f"{'operands, result':<28} {'ms':>8} {'GFLOP/s':>9}")
  for name, dtype, fn in cases:
    seconds = best_seconds(jax.jit(fn), jnp.asarray(x, dtype), jnp.asarray(w, dtype))
    print(f"{name:<28} {1000 * seconds:>8.2f} {flops / seconds / 1e9:>9.1f}")
  layers_table(x, rng)


def layers_table(x: np.ndarray, rng: np.random.Generator) -> None:
  layers, (tokens, hidden) = _LAYERS.value, x.shape
  stack = jnp.asarray(0.02 * rng.standard_normal((layers, 2 * hidden, hidden), np.float32),
                      jnp.bfloat16)
  x = jnp.asarray(x, jnp.bfloat16)

  def layer(x, w):  # [T, D] x [2D, D] (RI,OI->RO) -> [T, D]: the first half of the product
    y = jnp.einsum("RI,OI->RO", x, w, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
    return y[:, :hidden]

  def stacked(stack, x):
    return jax.lax.scan(
        lambda x, i: (layer(x, jax.lax.dynamic_index_in_dim(stack, i, keepdims=False)), None),
        x, jnp.arange(layers))[0]

  def own_buffers(weights, x):
    for w in weights:
      x = layer(x, w)
    return x

  flops = 2 * tokens * hidden * 2 * hidden * layers
  print(f"\n{layers} layers of bfloat16 [{tokens}, {hidden}] x [{2 * hidden}, {hidden}]")
  print(f"{'weights':<28} {'ms':>8} {'GFLOP/s':>9}")
  for name, fn, weights in [
      ("stacked, sliced in a scan",
       jax.jit(stacked, compiler_options=trunk.compiler_options(stack)), stack),
      ("a buffer each, unrolled", jax.jit(own_buffers), list(stack))]:
    seconds = best_seconds(fn, weights, x)
    print(f"{name:<28} {1000 * seconds:>8.2f} {flops / seconds / 1e9:>9.1f}")


if __name__ == "__main__":
  command.run_command("benchmarks.scoring.cpu_dot_dtypes", main)
