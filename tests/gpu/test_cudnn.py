"""On a GPU only (skipped elsewhere, so `make test` on a CPU skips them): cuDNN's fused attention
against XLA's on the same device, at three levels, in bfloat16.

1. `attention.attend` on random packed rows (several segments a row, shared prefixes, branches,
   padding, grouped key/value heads): outputs and the gradients of q, k and v;
2. a reward model's rewards on the bundled-style items, scored by the engine (the packed
   prefix-shared rows, fixed shapes, the producer thread) with each kernel, and against the
   float32 XLA rewards;
3. training's loss and every parameter's gradient under each kernel.

Tolerances (docs/scoring.md, "bfloat16 on a GPU"): bf16 keeps 8 bits of mantissa, so two correct
kernels that sum in different orders differ by a few units in the last place of their largest
values. Attention outputs and gradients: the largest difference at most 1/32 of the tensor's
largest magnitude (8 bf16 ulps). Rewards: bf16 itself sets the scale, as the largest difference
between the XLA path's bf16 and float32 rewards: cuDNN's bf16 rewards differ from the float32 ones,
from XLA's bf16 ones, and between two batch compositions by at most 1.5 times that, with
correlation >= 0.99 to float32. Training: likewise, the loss and the whole gradient's relative
L2 error against float32 at most 1.5 times XLA's bf16 ones (the loss also within one bf16 ulp). Every test
prints its figures, so a run on a GPU gives them even when a bound fails.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(jax.default_backend() != "gpu",
                                reason="cuDNN attention runs on a GPU only")

# Head widths of real models (Llama 3.2 1B: 64, Llama 3.1 8B: 128), grouped key/value heads.
HEAD_DIMS = (64, 128)
OUTPUT_BOUND = 1 / 32
BF16_FACTOR = 1.5
MIN_CORRELATION = 0.99


def _relative_max_diff(got, want) -> float:
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  assert np.isfinite(got).all() and np.isfinite(want).all()
  return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("length", [256, 1024])
def test_attend_cudnn_matches_xla_in_the_packed_layout(head_dim, length):
  from socialrm_jax.models import attention
  from tests.helpers.packed_rows import packed_rows
  rng = np.random.default_rng(head_dim + length)
  rows, heads, kv_heads = 4, 8, 2
  segments, branches, positions = packed_rows(rng, rows, length, is_causal=True)
  layout = attention.Layout(jnp.asarray(segments), jnp.asarray(branches), True)
  q = jnp.asarray(rng.normal(size=(rows, length, heads, head_dim)), jnp.bfloat16)
  k, v = (jnp.asarray(rng.normal(size=(rows, length, kv_heads, head_dim)), jnp.bfloat16)
          for _ in range(2))
  cotangent = jnp.asarray(rng.normal(size=q.shape), jnp.bfloat16)
  real = jnp.asarray(segments > 0)[:, :, None, None]  # padding queries' outputs are never read

  def run(implementation):
    def loss(q, k, v):
      out = attention.attend(q, k, v, layout, jnp.asarray(positions), scale=head_dim ** -0.5,
                             implementation=implementation)
      return jnp.sum(jnp.where(real, out * cotangent, 0).astype(jnp.float32)), out
    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return jnp.where(real, out, 0), grads

  compiled = jax.jit(lambda q, k, v: attention.attend(
      q, k, v, layout, jnp.asarray(positions), scale=head_dim ** -0.5,
      implementation="cudnn")).lower(q, k, v).compile().as_text()
  assert "__cudnn$fmha" in compiled, "the program holds no cuDNN fused-attention call"
  out_c, grads_c = run("cudnn")
  out_x, grads_x = run("xla")
  diffs = [_relative_max_diff(out_c, out_x)] + [_relative_max_diff(a, b)
                                               for a, b in zip(grads_c, grads_x)]
  print(f"\ncudnn vs xla attention, head_dim {head_dim}, rows of {length}: out {diffs[0]:.2e}, "
        f"dq {diffs[1]:.2e}, dk {diffs[2]:.2e}, dv {diffs[3]:.2e} (of the largest magnitude)")
  assert max(diffs) <= OUTPUT_BOUND, diffs


@pytest.fixture(scope="module")
def gpu_llama(tmp_path_factory):
  """A small random Llama reward model with real head widths (64) and its tokenizer."""
  from tests.helpers import scoring_fixtures as fx
  folder = tmp_path_factory.mktemp("gpu") / "llama"
  fx.make_llama(folder, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
  return folder


def _rewards(folder, tmp_path, dtype, attention, **options):
  from socialrm_jax.base import tables
  from socialrm_jax.models.reward_model import load_reward_model
  from socialrm_jax.scoring import engine
  from tests.helpers import scoring_fixtures as fx
  model = load_reward_model(folder, dtype=dtype, attention=attention)
  assert model.attention == attention
  out = tmp_path / "-".join([dtype, attention, *map(str, options.values())])
  engine.score_items(model, fx.all_items() + fx.many_bbq_items(64), out,
                     options=engine.ScoringOptions(dtype=dtype, attention=attention, **options))
  return {k: r["reward"] for k, r in fx.scores_by_key(tables.read_rows(out, "scores")).items()}


def _compare(got: dict, want: dict) -> tuple[float, float]:
  assert got.keys() == want.keys()
  keys = sorted(want)
  a, b = np.array([got[k] for k in keys]), np.array([want[k] for k in keys])
  return float(np.abs(a - b).max() / b.std()), float(np.corrcoef(a, b)[0, 1])


@pytest.fixture(scope="module")
def references(gpu_llama, tmp_path_factory):
  """The XLA path's rewards in float32 and bfloat16: bf16's own rounding sets the scale."""
  tmp = tmp_path_factory.mktemp("references")
  return (_rewards(gpu_llama, tmp, "float32", "xla"), _rewards(gpu_llama, tmp, "bfloat16", "xla"))


def test_rewards_under_cudnn_match_xla_and_float32(gpu_llama, references, tmp_path):
  fp32, xla = references
  cudnn = _rewards(gpu_llama, tmp_path, "bfloat16", "cudnn")
  figures = {"cudnn vs xla (bf16)": _compare(cudnn, xla),
             "cudnn bf16 vs xla fp32": _compare(cudnn, fp32),
             "xla bf16 vs xla fp32": _compare(xla, fp32)}
  for name, (diff, r) in figures.items():
    print(f"\n{name}: max |diff| {diff:.4f} of the reward std, r {r:.6f} ({len(cudnn)} rewards)")
  # cuDNN's bf16 rewards are as close to float32 as XLA's bf16 rewards are (within half again).
  bf16_scale = figures["xla bf16 vs xla fp32"][0]
  assert figures["cudnn bf16 vs xla fp32"][0] <= BF16_FACTOR * bf16_scale
  assert figures["cudnn vs xla (bf16)"][0] <= BF16_FACTOR * bf16_scale
  assert figures["cudnn bf16 vs xla fp32"][1] >= MIN_CORRELATION


def test_bf16_cudnn_rewards_do_not_depend_on_batch_composition(gpu_llama, references, tmp_path):
  """The invariance test's settings on the GPU: other row lengths, batch sizes and shard cuts."""
  fp32, xla = references
  runs = [_rewards(gpu_llama, tmp_path, "bfloat16", "cudnn", **settings) for settings in (
      dict(max_length=512, tokens_per_batch=4096, chunk_size=16, smallest_bucket=128),
      dict(max_length=256, tokens_per_batch=512, chunk_size=4, smallest_bucket=64))]
  diff, r = _compare(runs[1], runs[0])
  bf16_scale = _compare(xla, fp32)[0]
  print(f"\nbf16 cudnn, two batch compositions: max |diff| {diff:.4f} of the reward std, r {r:.6f}"
        f" (bf16's own deviation from fp32: {bf16_scale:.4f})")
  assert diff <= BF16_FACTOR * bf16_scale and r >= MIN_CORRELATION


def test_training_loss_and_gradients_under_cudnn_match_xla(tmp_path):
  import optax
  from socialrm_jax.runtime import mesh as mesh_lib
  from socialrm_jax.scoring.item_tokens import EncodedItem
  from socialrm_jax.training import pair_batches, trainable
  from socialrm_jax.training import train_step as train_step_lib
  from tests.helpers.model_fixtures import PAD_TOKEN_ID, save_tiny_hf_model
  folder = save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification", seed=3,
                              hidden_size=256, intermediate_size=512, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=64, max_position_embeddings=512)
  rng = np.random.default_rng(0)
  items = []
  for i in range(12):
    prompt = rng.integers(3, PAD_TOKEN_ID, int(rng.integers(4, 40))).tolist()
    chosen = rng.integers(3, PAD_TOKEN_ID, int(rng.integers(1, 20))).tolist()
    rejected = rng.integers(3, PAD_TOKEN_ID, int(rng.integers(1, 20))).tolist()
    rejected[0] = chosen[0] + 1 if chosen[0] + 1 < PAD_TOKEN_ID else 3
    items.append(EncodedItem(i, f"p{i}", (np.array(prompt + chosen, np.int32),
                                          np.array(prompt + rejected, np.int32)),
                             (len(prompt), len(prompt)), None, 0))
  blocks = pair_batches.pack_pairs(items, [0.0] * len(items), buckets=(64, 128), row_length=64,
                                   rows_per_block=2)
  mesh = mesh_lib.make_mesh(None)
  results = {}
  for implementation, dtype in (("cudnn", "bfloat16"), ("xla", "bfloat16"), ("xla", "float32")):
    model = trainable.load_base(str(folder), dtype=dtype, mesh=mesh, seed=0,
                                attention=implementation)
    assert model.attention == implementation
    step = train_step_lib.TrainStep(model, optax.sgd(0.0), mesh, dtype=jnp.dtype(dtype))
    trained, frozen = trainable.split_trainable(model.params, lora=False)
    (loss, _), grads = step.loss_and_grads(trained, frozen, [b.arrays() for b in blocks])
    results[implementation, dtype] = float(loss), {p: np.asarray(g, np.float32)
                                                   for p, g in grads.items()}
  (loss_c, grads_c), (loss_x, grads_x), (loss_32, grads_32) = results.values()
  names = sorted(grads_32)
  flat = {key: np.concatenate([g[p].ravel() for p in names]) for key, (_, g) in results.items()}
  reference = flat["xla", "float32"]

  def relative(key):  # the whole gradient's relative L2 error against float32
    return float(np.linalg.norm(flat[key] - reference) / np.linalg.norm(reference))

  worst = max((_relative_max_diff(grads_c[p], grads_x[p]), p) for p in names)
  cosine = float(flat["cudnn", "bfloat16"] @ flat["xla", "bfloat16"]
                 / np.linalg.norm(flat["cudnn", "bfloat16"]) / np.linalg.norm(flat["xla", "bfloat16"]))
  print(f"\ntraining (bf16): loss cudnn {loss_c:.6f}, xla {loss_x:.6f}, float32 {loss_32:.6f}; "
        f"gradient L2 error against float32: cudnn {relative(('cudnn', 'bfloat16')):.2e}, xla "
        f"{relative(('xla', 'bfloat16')):.2e}; worst tensor cudnn vs xla {worst[0]:.2e} of its "
        f"largest entry ({worst[1]}); cosine cudnn vs xla {cosine:.6f}")
  # bf16 sets the scale, as for the rewards: cuDNN's bf16 loss and gradients are as close to the
  # float32 ones as XLA's bf16 ones are (within half again; the loss also within one bf16 ulp).
  assert abs(loss_c - loss_32) <= BF16_FACTOR * abs(loss_x - loss_32) + 2 ** -8 * abs(loss_32)
  assert relative(("cudnn", "bfloat16")) <= BF16_FACTOR * relative(("xla", "bfloat16"))
