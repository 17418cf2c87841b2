"""The fused attention paths against `xla_attention` on packed layouts, and `resolve`'s table.

No GPU or TPU here, so each fused path is checked as far as a CPU can:
- cudnn: the exact `jax.nn.dot_product_attention` call, made with implementation="xla" (only
  that string differs from what runs on a GPU);
- splash: the Pallas kernel itself, in interpret mode.
Layouts are random packed rows as the packer writes them: several segments a row, each a shared
prefix (sometimes empty) and 1-3 branches, a padding tail, and an all-padding row.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from socialrm_jax.models import attention  # noqa: E402
from tests.helpers.packed_rows import packed_rows  # noqa: E402
from tests.helpers.paths import REPO_ROOT  # noqa: E402

TOLERANCE = 1e-5
HEAD_DIM = 16
SCALE = HEAD_DIM ** -0.5


def random_case(seed: int, *, rows: int, length: int, heads: int, kv_heads: int, is_causal: bool):
  rng = np.random.default_rng(seed)
  segments, branches, positions = packed_rows(rng, rows, length, is_causal)
  layout = attention.Layout(jnp.asarray(segments), jnp.asarray(branches), is_causal)
  q = jnp.asarray(rng.normal(size=(rows, length, heads, HEAD_DIM)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(rows, length, kv_heads, HEAD_DIM)), jnp.float32)
          for _ in range(2))
  return q, k, v, layout, jnp.asarray(positions)


def reference(q, k, v, layout, positions, *, logit_cap=None, window=None):
  return attention.xla_attention(q, k, v, attention.dense_mask(layout, positions, window),
                                 scale=SCALE, logit_cap=logit_cap)


def max_diff(got, expected) -> float:
  assert np.isfinite(np.asarray(got)).all()
  return float(np.max(np.abs(np.asarray(got) - np.asarray(expected))))


@pytest.mark.parametrize("seed, length", [(1, 96), (2, 256)])
def test_packed_rows_cover_the_cases_the_kernels_must_handle(seed, length):
  """The causal layouts the kernel tests below draw (same seeds and lengths)."""
  _, _, _, layout, _ = random_case(seed, rows=3, length=length, heads=4, kv_heads=2,
                                   is_causal=True)
  segments, branches = np.asarray(layout.segment_ids), np.asarray(layout.branch_ids)
  assert (segments[-1] == 0).all() and (segments[:-1, -1] == 0).all()  # padding row and tails
  assert segments[0].max() >= 3  # several segments a row
  assert segments[0, 0] == 1 and branches[0, 0] == 1  # an item with an empty shared prefix
  assert branches.max() >= 3


@pytest.mark.parametrize("is_causal, window", [(True, None), (True, 6), (False, None)])
def test_cudnn_call_arguments_through_xla(is_causal, window):
  """The cuDNN call with implementation="xla": same mask, GQA, scale, causality and window."""
  q, k, v, layout, positions = random_case(1, rows=3, length=96, heads=6, kv_heads=2,
                                           is_causal=is_causal)
  got = jax.jit(lambda q, k, v, layout, positions: attention.dense_fused_attention(
      q, k, v, layout, positions, scale=SCALE, window=window, implementation="xla"))(
          q, k, v, layout, positions)
  diff = max_diff(got, reference(q, k, v, layout, positions, window=window))
  print(f"cudnn arguments through xla, causal={is_causal} window={window}: max abs diff {diff:.2e}")
  assert diff <= TOLERANCE


def test_a_traced_scale_reaches_every_implementation():
  """A scanned layer's own scale (GPT-2's `scale_attn_by_inverse_layer_idx`) is a traced scalar:
  xla multiplies the logits by it, the fused call (its constant scale) takes it on the queries."""
  q, k, v, layout, positions = random_case(3, rows=3, length=96, heads=4, kv_heads=4,
                                           is_causal=True)
  want = reference(q, k, v, layout, positions)
  for implementation in ("xla", "cudnn_through_xla"):
    def run(scale, q, k, v, layout, positions, implementation=implementation):
      if implementation == "xla":
        return attention.attend(q, k, v, layout, positions, scale=scale)
      return attention.dense_fused_attention(q, k, v, layout, positions, scale=scale,
                                             implementation="xla")
    got = jax.jit(run)(jnp.float32(SCALE), q, k, v, layout, positions)
    assert max_diff(got, want) <= TOLERANCE, implementation


@pytest.mark.parametrize("is_causal, kv_heads, logit_cap", [
    (True, 2, None),   # GQA, two passes merged
    (True, 1, 30.0),   # MQA with Gemma 2's soft-cap
    (False, 4, None),  # an encoder: one pass
])
def test_splash_interpreted_matches_xla(is_causal, kv_heads, logit_cap):
  """Rows of two 128-blocks, so the causal kernel skips a block and merges across them."""
  q, k, v, layout, positions = random_case(2, rows=3, length=256, heads=4, kv_heads=kv_heads,
                                           is_causal=is_causal)
  got = jax.jit(lambda q, k, v, layout: attention.splash_attention(
      q, k, v, layout, scale=SCALE, logit_cap=logit_cap, block=128, interpret=True))(
          q, k, v, layout)
  diff = max_diff(got, reference(q, k, v, layout, positions, logit_cap=logit_cap))
  print(f"splash interpreted, causal={is_causal} kv_heads={kv_heads} cap={logit_cap}: "
        f"max abs diff {diff:.2e}")
  assert diff <= TOLERANCE


@pytest.mark.parametrize("logit_cap, traced_scale", [(None, False), (3.0, True)])
def test_softmax_attentions_own_backward_equals_jaxs_differentiation(logit_cap, traced_scale):
  """`softmax_attention`'s FlashAttention backward (probabilities recomputed from the kept row
  statistics, row sums from the output) against JAX differentiating the plain softmax (the
  additive-bias path, given a zero bias): packed rows with an all-padding row, GQA, soft-capping,
  a scale traced as a scanned layer's is."""
  q, k, v, layout, positions = random_case(6, rows=3, length=40, heads=4, kv_heads=2,
                                           is_causal=True)
  mask = attention.dense_mask(layout, positions)
  weights = jnp.asarray(np.random.default_rng(7).normal(size=q.shape), jnp.float32)
  zero_bias = jnp.zeros((3, 4, 40, 40), jnp.float32)

  def loss(q, k, v, scale, bias):
    out = attention.xla_attention(q, k, v, mask, scale=scale, logit_cap=logit_cap, bias=bias)
    return jnp.sum(weights * out)

  scale = jnp.float32(SCALE) if traced_scale else SCALE
  got = jax.jit(jax.value_and_grad(loss, (0, 1, 2)))(q, k, v, scale, None)
  expected = jax.jit(jax.value_and_grad(loss, (0, 1, 2)))(q, k, v, scale, zero_bias)
  diffs = [max_diff(a, b) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected))]
  print(f"softmax_attention, cap {logit_cap}: loss and d q, k, v max abs diff {diffs}")
  assert max(diffs) <= TOLERANCE


@pytest.mark.parametrize("length, window, logit_cap", [(200, None, None), (256, 6, 30.0)])
def test_causal_blocks_of_queries_match_the_dense_attention(length, window, logit_cap):
  """Blocks of 64 queries against the keys up to each block's end (the last block shorter when
  64 does not divide the row): the dense result, GQA, window and soft-cap included."""
  q, k, v, layout, positions = random_case(4, rows=3, length=length, heads=4, kv_heads=2,
                                           is_causal=True)
  mask = attention.dense_mask(layout, positions, window)
  got = jax.jit(lambda q, k, v, mask: attention.blocked_attention(
      q, k, v, mask, scale=SCALE, logit_cap=logit_cap, block=64))(q, k, v, mask)
  diff = max_diff(got, reference(q, k, v, layout, positions, logit_cap=logit_cap, window=window))
  print(f"causal query blocks, length {length}: max abs diff {diff:.2e}")
  assert diff <= TOLERANCE


@pytest.mark.parametrize("is_causal, window, logit_cap, picked", [
    (True, None, None, 40), (True, 6, 30.0, 200), (False, None, None, 40)])
def test_queries_at_picked_tokens_give_those_rows_of_the_whole_attention(is_causal, window,
                                                                          logit_cap, picked):
  """`attend(..., query_index=)` with the queries of some tokens (anywhere in the row, repeated,
  in any order; more than a block of them too): the rows of the attention of every query."""
  q, k, v, layout, positions = random_case(5, rows=3, length=256, heads=4, kv_heads=2,
                                           is_causal=is_causal)
  index = jnp.asarray(np.random.default_rng(6).integers(0, 256, size=(3, picked)), jnp.int32)
  picked_q = jnp.take_along_axis(q, index[:, :, None, None], axis=1)
  got = jax.jit(lambda q, index: attention.attend(
      q, k, v, layout, positions, scale=SCALE, logit_cap=logit_cap, window=window,
      query_index=index))(picked_q, index)
  whole = reference(q, k, v, layout, positions, logit_cap=logit_cap, window=window)
  diff = max_diff(got, jnp.take_along_axis(whole, index[:, :, None, None], axis=1))
  print(f"{picked} picked queries: max abs diff {diff:.2e}")
  assert diff <= TOLERANCE


# Gradients against xla's: both sum the same float32 products in other orders (splash by blocks
# of keys, its passes merged), so they differ by rounding that grows with the terms a gradient
# entry sums (G x T products of unit-scale operands, here at most 2 x 128) times float32's
# epsilon (1.2e-7), about 3e-5 in the worst case; a parameter's gradient sums B x T tokens'
# worth of such terms, whose rounding errors mostly cancel (random signs). 1e-4 leaves room for
# that and no more: a wrong term in the backward pass is of the gradient's own size (~1).
GRADIENT_TOLERANCE = 1e-4


def values_and_gradients(attend, q, k, v):
  """attend(q, k, v) [B, T, N, H] and the gradients of a fixed random projection of it."""
  weights = jnp.asarray(np.random.default_rng(8).normal(size=q.shape), jnp.float32)
  out, pullback = jax.vjp(attend, q, k, v)
  return out, pullback(weights)


def assert_close(got, expected, label):
  (out, grads), (want, want_grads) = got, expected
  diffs = [max_diff(out, want)] + [max_diff(a, b) for a, b in zip(grads, want_grads)]
  print(f"{label}: out, d q, d k, d v max abs diff {diffs}")
  assert diffs[0] <= TOLERANCE and max(diffs[1:]) <= GRADIENT_TOLERANCE, diffs


@pytest.mark.parametrize("is_causal, kv_heads, logit_cap", [
    (True, 1, 30.0),   # packed prefix + branches: two passes merged; GQA (2 heads a group)
    (False, 2, None),  # an encoder: one pass
])
def test_splash_gradients_interpreted_match_xla(is_causal, kv_heads, logit_cap):
  """Splash's backward kernels from the merged passes' output and log-sum-exp: values and
  gradients of q, k and v equal xla's, on packed rows with a padding tail and an all-padding
  row."""
  q, k, v, layout, positions = random_case(7, rows=3, length=128, heads=2, kv_heads=kv_heads,
                                           is_causal=is_causal)
  splash = lambda q, k, v: attention.splash_attention(q, k, v, layout, scale=SCALE,
                                                      logit_cap=logit_cap, interpret=True)
  xla = lambda q, k, v: reference(q, k, v, layout, positions, logit_cap=logit_cap)
  assert_close(jax.jit(functools.partial(values_and_gradients, splash))(q, k, v),
               values_and_gradients(xla, q, k, v),
               f"splash gradients, causal={is_causal} kv_heads={kv_heads} cap={logit_cap}")


def test_splash_under_a_scanned_window_matches_xla():
  """A traced window (a scanned layer's own) among the model's windows: one that covers the row
  (Gemma 2's 4096 against rows of 128) runs splash, a shorter one (6 positions, in segments of
  about 18 tokens) xla, in one program; both equal xla's windowed attention, values and gradients,
  soft-capped and GQA."""
  q, k, v, layout, positions = random_case(7, rows=3, length=128, heads=2, kv_heads=1,
                                           is_causal=True)
  windows = (6, 4096)

  @jax.jit
  def windowed(q, k, v, window):
    return values_and_gradients(lambda q, k, v: attention.attend(
        q, k, v, layout, positions, scale=SCALE, logit_cap=30.0, window=window, windows=windows,
        implementation="splash"), q, k, v)

  program = str(jax.make_jaxpr(windowed)(q, k, v, jnp.int32(6)))
  assert "cond" in program and "pallas_call" in program
  for window in windows:
    xla = lambda q, k, v, window=window: reference(q, k, v, layout, positions, logit_cap=30.0,
                                                   window=window)
    assert_close(windowed(q, k, v, jnp.int32(window)), values_and_gradients(xla, q, k, v),
                 f"splash under window {window}")


def test_splash_merge_gives_an_empty_pass_no_weight():
  """A query whose prefix pass saw nothing (splash's lse is then about its mask value, and its
  output an average of masked values) takes the other pass's output exactly, NaN or not."""
  out_b = jnp.arange(4.0).reshape(1, 1, 1, 4)  # [B, N, T, H]
  lse_b = jnp.full((1, 1, 1), 3.0)
  for junk in (1e3, jnp.nan):
    out_a = jnp.full((1, 1, 1, 4), junk)
    merged, lse = attention._merge_by_logsumexp(out_a, jnp.full((1, 1, 1), -2.38e38), out_b,
                                                lse_b)
    np.testing.assert_array_equal(np.asarray(merged), np.asarray(out_b))
    np.testing.assert_array_equal(np.asarray(lse), np.asarray(lse_b))


def test_splash_falls_back_to_xla_when_rows_are_not_block_multiples():
  q, k, v, layout, positions = random_case(3, rows=2, length=40, heads=4, kv_heads=2,
                                           is_causal=True)
  got = attention.attend(q, k, v, layout, positions, scale=SCALE, implementation="splash")
  np.testing.assert_array_equal(np.asarray(got),
                                np.asarray(reference(q, k, v, layout, positions)))


def test_attend_refuses_what_a_kernel_cannot_compute():
  q, k, v, layout, positions = random_case(4, rows=2, length=128, heads=2, kv_heads=2,
                                           is_causal=True)
  with pytest.raises(ValueError, match="soft-capping"):
    attention.attend(q, k, v, layout, positions, scale=SCALE, logit_cap=50.0,
                     implementation="cudnn")
  with pytest.raises(ValueError, match="traced sliding window needs `windows`"):
    jax.jit(lambda window: attention.attend(q, k, v, layout, positions, scale=SCALE,
                                            window=window, implementation="splash"))(4)
  with pytest.raises(ValueError, match="unknown attention implementation"):
    attention.attend(q, k, v, layout, positions, scale=SCALE, implementation="auto")


_MODEL = dict(logit_cap=None, has_windows=False, is_causal=True)


@pytest.mark.parametrize("backend, dtype, model, expected", [
    ("gpu", jnp.bfloat16, {}, "cudnn"),
    ("gpu", jnp.float16, dict(is_causal=False), "cudnn"),
    ("gpu", jnp.bfloat16, dict(has_windows=True), "cudnn"),  # windows go into the dense mask
    ("gpu", jnp.float32, {}, "xla"),  # cuDNN refuses float32
    ("gpu", jnp.bfloat16, dict(logit_cap=50.0), "xla"),  # Gemma 2's soft-cap
    ("tpu", jnp.bfloat16, {}, "splash"),
    ("tpu", jnp.float32, dict(is_causal=False), "splash"),
    ("tpu", jnp.bfloat16, dict(logit_cap=50.0), "splash"),
    ("tpu", jnp.bfloat16, dict(has_windows=True), "splash"),  # xla where a window is shorter
    ("cpu", jnp.bfloat16, {}, "xla"),
    ("cpu", jnp.float32, {}, "xla"),
])
def test_resolve_auto(backend, dtype, model, expected):
  assert attention.resolve("auto", backend=backend, dtype=dtype, **{**_MODEL, **model}) == expected


@pytest.mark.parametrize("implementation, backend, dtype, model, error", [
    ("cudnn", "gpu", jnp.float32, {}, "needs bfloat16 or float16, not float32"),
    ("cudnn", "gpu", jnp.bfloat16, dict(logit_cap=50.0), "no logit soft-capping"),
    ("cudnn", "tpu", jnp.bfloat16, {}, "runs on gpu, not tpu"),
    ("splash", "gpu", jnp.bfloat16, {}, "TPU kernel"),
    ("flash", "gpu", jnp.bfloat16, {}, "unknown attention implementation 'flash'"),
])
def test_resolve_refuses_an_explicit_choice_that_cannot_run(implementation, backend, dtype, model,
                                                           error):
  with pytest.raises(ValueError, match=error):
    attention.resolve(implementation, backend=backend, dtype=dtype, **{**_MODEL, **model})


@pytest.mark.parametrize("implementation, backend, dtype", [
    ("xla", "gpu", jnp.float32), ("cudnn", "gpu", jnp.bfloat16), ("splash", "tpu", jnp.float32),
    ("splash", "cpu", jnp.float32),  # interpreted: how the tests run it
])
def test_resolve_keeps_an_explicit_choice_that_can_run(implementation, backend, dtype):
  assert attention.resolve(implementation, backend=backend, dtype=dtype, **_MODEL) == implementation


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_splash_under_a_mesh_runs_per_device():
  """On 4 fake devices (data 2 x model 2) with the mesh set, splash runs under shard_map (rows over
  data; whole head groups over model when the key/value heads divide, else all heads on each) and
  still equals xla. A fresh process: the device count is fixed when jax starts."""
  script = textwrap.dedent("""
      import jax, numpy as np
      from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
      from socialrm_jax.models import attention
      from tests.models.test_attention import SCALE, random_case, reference
      mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
      put = lambda x: jax.device_put(x, NamedSharding(mesh, P("data")))
      splash = jax.jit(lambda q, k, v, layout: attention.splash_attention(
          q, k, v, layout, scale=SCALE, interpret=True))
      for kv_heads in (2, 1):
        q, k, v, layout, positions = random_case(5, rows=4, length=128, heads=4,
                                                 kv_heads=kv_heads, is_causal=True)
        args = (put(q), put(k), put(v), jax.tree.map(put, layout))
        with jax.set_mesh(mesh):
          assert "shard_map" in str(jax.make_jaxpr(splash)(*args))
          got = splash(*args)
        expected = reference(q, k, v, layout, positions)
        print(float(np.max(np.abs(np.asarray(got) - np.asarray(expected)))))
  """)
  # The repository first: `import tests` must find its tests package, not the site-packages one
  # the rewardbench wheel ships.
  env = {**os.environ, "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
         "PYTHONPATH": os.pathsep.join(
             p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
  done = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO_ROOT, capture_output=True,
                        text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  diffs = [float(line) for line in done.stdout.split()]
  assert len(diffs) == 2 and max(diffs) <= TOLERANCE, diffs


def test_scanned_layers_keep_attentions_output_as_the_output_projection_reads_it():
  """Under the default remat policy the backward pass transposes nothing it recomputes:
  attention's output is kept token-major, as the output projection reads it, so that projection's
  input is the kept blocks joined."""
  from socialrm_jax.models import trunk
  q, _, _, layout, positions = random_case(2, rows=1, length=256, heads=4, kv_heads=2,
                                           is_causal=True)
  width = 4 * HEAD_DIM
  rng = np.random.default_rng(3)
  weights = jnp.asarray(rng.normal(size=(3, 2, width, width)) / width, jnp.float32)
  x = q.reshape(1, 256, width)

  @functools.partial(jax.checkpoint, policy=trunk.checkpoint_policy("auto"), prevent_cse=False)
  def layer(x, layer_weights):
    kv = (x @ layer_weights[0]).reshape(1, 256, 4, HEAD_DIM)[:, :, :2]
    out = attention.attend(x.reshape(1, 256, 4, HEAD_DIM), kv, kv, layout, positions,
                           scale=SCALE)  # by blocks of queries: 256 > CAUSAL_QUERY_BLOCK
    return x + out.reshape(1, 256, width) @ layer_weights[1], None

  def loss(x, weights):
    return jnp.square(jax.lax.scan(layer, x, weights)[0]).sum()

  program = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, weights).compile().as_text()
  assert "rematted_computation" in program  # the policy recomputes what it does not keep
  assert "rematted_computation/transpose" not in program


def test_a_windowed_decoder_trains_with_splash_as_with_xla():
  """Gemma 2's alternating layers (a window of 4 positions, then full attention) scanned, on
  packed rows of 128: with splash, the local layers run xla and the global ones splash (chosen per
  layer by the scanned window), and the rewards and the parameters' gradients equal the xla
  model's."""
  from flax import nnx
  from socialrm_jax.models import decoder
  config = decoder.Config(
      architecture="Gemma2ForSequenceClassification", head="score", num_labels=1,
      pad_token_id=0, variant="gemma2", vocab_size=64, hidden_size=32, intermediate_size=64,
      num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, rms_norm_eps=1e-6,
      activation="gelu_pytorch_tanh", unit_offset_norm=True, sandwich_norms=True,
      attn_logit_softcap=50.0, layer_windows=(4, None))
  _, _, _, layout, positions = random_case(7, rows=2, length=128, heads=2, kv_heads=1,
                                           is_causal=True)
  ids = jnp.asarray(np.random.default_rng(9).integers(1, 64, size=(2, 128)), jnp.int32)

  def rewards_and_gradients(implementation):
    graphdef, state = nnx.split(decoder.Model(config, attention=implementation))

    def loss(state):
      model = nnx.merge(graphdef, state)
      rewards = model.head(model(ids, positions, layout))  # [B, T, 1]
      return jnp.sum(jnp.sin(rewards)), rewards

    step = jax.value_and_grad(loss, has_aux=True)
    program = str(jax.make_jaxpr(step)(state))
    assert ("pallas_call" in program and "cond" in program) == (implementation == "splash")
    (_, rewards), grads = jax.jit(step)(state)
    return rewards, jax.tree.leaves(grads)

  (got, got_grads), (want, want_grads) = (rewards_and_gradients(name) for name in ("splash", "xla"))
  diffs = [max_diff(got, want)] + [max_diff(a, b) for a, b in zip(got_grads, want_grads)]
  print(f"windowed decoder, splash against xla: rewards and gradients max abs diff {max(diffs):.2e}")
  assert diffs[0] <= TOLERANCE and max(diffs[1:]) <= GRADIENT_TOLERANCE, diffs
