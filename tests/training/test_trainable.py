"""LoRA: only the adapters and the score head train, and the merged export scores as the unmerged
model.

The unmerged reference is transformers' own model of the base with the trained score head and, on
each target Linear of each layer, a forward hook adding (alpha / r) (x A) B: the adapter beside
the frozen weight, as PEFT runs it. Our export holds W + (alpha / r) A B; our scorer on the export
and the hooked torch model give the same rewards within 1e-5.
"""

import numpy as np
import optax
import pytest
import torch
import transformers
from safetensors.numpy import load_file

from socialrm_jax.models import reward_model
from socialrm_jax.scoring import item_tokens
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.training import hf_export, pair_batches, trainable
from socialrm_jax.training import train_step as train_step_lib
from tests.helpers.model_fixtures import pad_rows
from tests.helpers.scoring_fixtures import make_llama
from tests.helpers.tolerances import float32_tolerance

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RANK, ALPHA = 4, 8.0
PAIRS = [pair_batches.Pair(f"p{i}", [{"role": "user", "content": f"Tell me about the party {i}."}],
                           "Of course! It sounds great.", "Just order a pizza.") for i in range(4)]


def merged_lora_tolerance(model, params) -> float:
  """How far a reward may come out between LoRA beside the kernels and merged into them, in
  float32 (`tests/helpers/tolerances.py`): each layer's chain of projections (q/k/v and gate/up
  over the hidden size, o over the heads' width, down over the MLP's units, each r terms more
  through the adapter) adds its sums in another order, then the head's dot over the hidden size.
  The head reads the final RMSNorm's output x^ (|x^|_2 = sqrt(D)), so its terms sum to at most
  sqrt(D) |w * g|_2 (Cauchy-Schwarz, g the norm's scale): the magnitude."""
  c = model.config
  chain = c.num_layers * (2 * c.hidden_size + c.num_heads * c.head_dim + c.intermediate_size
                          + 4 * RANK) + c.hidden_size
  head = np.asarray(params["score/kernel"])[0] * np.asarray(params["final_norm/scale"])
  return float32_tolerance(chain, float(np.sqrt(c.hidden_size) * np.linalg.norm(head)))


def test_lora_trains_adapters_and_head_only_and_the_merged_export_scores_as_unmerged(tmp_path):
  make_llama(tmp_path / "base", head="lm", seed=1)
  folder = str(tmp_path / "base")
  mesh = mesh_lib.make_mesh(None)
  model = trainable.load_base(folder, dtype="float32", mesh=mesh, seed=0)
  trained, frozen = trainable.split_trainable(model.params, lora=True)
  targets = trainable.lora_targets(model, trainable.DEFAULT_LORA_TARGETS)
  assert len(targets) == 7
  trained.update(trainable.init_lora(model, targets, RANK, seed=0))
  frozen_before = trainable.host_params(frozen)
  trained_before = trainable.host_params(trained)
  step = train_step_lib.TrainStep(model, optax.adam(1e-2), mesh, dtype=np.float32,
                                  lora_scale=ALPHA / RANK)
  opt_state = step.init(trained)
  templater = item_tokens.Templater(item_tokens.load_tokenizer(folder), is_causal=True,
                                    max_length=128)
  encoded = pair_batches.encode_pairs(templater, PAIRS)
  blocks = [b.arrays() for b in pair_batches.pack_pairs(
      encoded, [0.0] * 4, buckets=(128,), row_length=128, rows_per_block=1)]
  for _ in range(3):
    trained, opt_state, _ = step.step(trained, opt_state, frozen, blocks)

  # Only the adapters and the head are trained, and each of them moved; the base stayed.
  assert set(trained) == {trainable.SCORE_KERNEL} | {
      f"{t}/{part}" for t in targets for part in (trainable.LORA_A, trainable.LORA_B)}
  for path, value in trainable.host_params(trained).items():
    assert np.abs(value - trained_before[path]).max() > 0, path
  for path, value in trainable.host_params(frozen).items():
    np.testing.assert_array_equal(value, frozen_before[path])

  scale = ALPHA / RANK
  merged = trainable.host_params(train_step_lib.merged_params(trained, frozen, scale, np.float32))
  export = hf_export.write(tmp_path / "export", merged, model.sources, base_path=folder,
                           base_config=model.hf_config, config=model.config,
                           pad_token_id=templater.tokenizer.pad_token_id)
  base_tensors, exported = load_file(f"{folder}/model.safetensors"), load_file(
      f"{export}/model.safetensors")
  adapted = {name for t in targets for name in model.sources[t].hf_names}
  for name, value in exported.items():
    if name in adapted:
      assert np.abs(value - base_tensors[name]).max() > 0, name
    elif name != "score.weight":
      np.testing.assert_array_equal(value, base_tensors[name], err_msg=name)

  # The unmerged model: transformers' base, the trained head, adapters in forward hooks.
  hf = transformers.LlamaForSequenceClassification.from_pretrained(
      folder, num_labels=1, dtype=torch.float32).eval()
  host = trainable.host_params(trained)
  with torch.no_grad():
    hf.score.weight.copy_(torch.tensor(host[trainable.SCORE_KERNEL]))
  for target in targets:
    for layer, name in enumerate(model.sources[target].hf_names):
      a = torch.tensor(host[f"{target}/{trainable.LORA_A}"][layer])
      b = torch.tensor(host[f"{target}/{trainable.LORA_B}"][layer])
      linear = hf.get_submodule(name.removesuffix(".weight"))
      linear.register_forward_hook(
          lambda module, inputs, output, a=a, b=b: output + scale * (inputs[0] @ a) @ b)
  sequences = [s for item in encoded for s in item.sequences]
  ids, mask = pad_rows(sequences, max(map(len, sequences)), "right",
                       templater.tokenizer.pad_token_id)
  with torch.no_grad():
    unmerged = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits[:, 0]
  ours = np.asarray(reward_model.load_reward_model(str(export))(ids, mask))
  assert np.abs(ours - unmerged.numpy()).max() <= 1e-5
  assert np.abs(ours).max() > 1e-3  # rewards that are not all zero


def test_the_steps_adapters_beside_the_kernels_give_the_merged_models_loss_and_gradients(tmp_path):
  """The step computes x W + (x A) (alpha / r) B in each target (`layers.Projection`); the
  reference differentiates the loss of the model whose kernels hold W + (alpha / r) A B (the merge
  the export writes), on a model without adapters. B is drawn non-zero so that A's gradients are
  not all zero."""
  import jax
  import jax.numpy as jnp
  from socialrm_jax.training import loss as loss_lib
  make_llama(tmp_path / "base", head="lm", seed=1)
  folder = str(tmp_path / "base")
  mesh = mesh_lib.make_mesh(None)
  model = trainable.load_base(folder, dtype="float32", mesh=mesh, seed=0)
  reference = trainable.load_base(folder, dtype="float32", mesh=mesh, seed=0)  # no adapters
  trained, frozen = trainable.split_trainable(model.params, lora=True)
  targets = trainable.lora_targets(model, trainable.DEFAULT_LORA_TARGETS)
  trained.update(trainable.init_lora(model, targets, RANK, seed=0))
  rng = np.random.default_rng(0)
  trained = {p: (jnp.asarray(rng.normal(0, 0.05, v.shape), jnp.float32)
                 if p.endswith(trainable.LORA_B) else v) for p, v in trained.items()}
  scale = ALPHA / RANK
  templater = item_tokens.Templater(item_tokens.load_tokenizer(folder), is_causal=True,
                                    max_length=128)
  blocks = [b.arrays() for b in pair_batches.pack_pairs(
      pair_batches.encode_pairs(templater, PAIRS), [0.0] * 4, buckets=(128,), row_length=128,
      rows_per_block=1)]
  step = train_step_lib.TrainStep(model, optax.sgd(0.0), mesh, dtype=np.float32,
                                  lora_scale=scale)
  (loss, _), grads = step.loss_and_grads(trained, frozen, blocks)

  def merged_loss(trained):
    lora = {p: v for p, v in trained.items() if p.endswith((trainable.LORA_A, trainable.LORA_B))}
    base = {**frozen, **{p: v for p, v in trained.items() if p not in lora}}
    params = trainable.apply_lora(base, lora, scale)
    total = pairs = 0.0
    for batch in blocks:
      rewards = train_step_lib.pair_rewards(reference, params, batch)
      sums = loss_lib.pair_sums(rewards[..., 0].reshape(-1), rewards[..., 1].reshape(-1),
                                jnp.asarray(batch["margin"]).reshape(-1),
                                jnp.asarray(batch["weight"]).reshape(-1))
      total, pairs = total + sums["loss"], pairs + sums["pairs"]
    return total / pairs

  with jax.set_mesh(mesh):
    expected_loss, expected = jax.jit(jax.value_and_grad(merged_loss))(trained)
  # Two computations: each target's x W + (x A) (s B) against x (W + s A B), so every layer's
  # projections add their terms in another order; the pair losses' slope in each reward is at
  # most 1, so the mean loss moves by at most the two rewards' bound.
  bound = 2 * merged_lora_tolerance(model, {**frozen, **trained})
  assert abs(float(loss) - float(expected_loss)) <= bound
  for path, value in expected.items():
    value, got = np.asarray(value), np.asarray(grads[path])
    assert np.abs(value).max() > 0, path
    np.testing.assert_allclose(got, value, rtol=0, atol=1e-5 * np.abs(value).max(), err_msg=path)
