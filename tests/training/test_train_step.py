"""The train step's loss and gradients against TRL's RewardTrainer itself.

From the same initial weights (a tiny random Llama and Gemma 2 sequence classifier) and the same
pairs, TRL's own `RewardTrainer.compute_loss` on the transformers model (its collator pads chosen
and rejected as two full sequences) and our step on the prefix-shared packed rows give the same
loss, and every parameter's gradient agrees within 1e-5 of that tensor's largest entry (fp32),
with and without TRL's `margin` column and `center_rewards_coefficient`. The torch gradient of
each HF tensor is laid out as ours by the family's own `weight_sources` transform.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import datasets
import trl
from trl.trainer.reward_trainer import DataCollatorForPreference

import transformers

pytestmark = pytest.mark.usefixtures("one_torch_thread")
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.scoring.item_tokens import EncodedItem
from socialrm_jax.training import loss as loss_lib
from socialrm_jax.training import pair_batches, trainable
from socialrm_jax.training import train_step as train_step_lib
from tests.helpers.model_fixtures import PAD_TOKEN_ID, hf_reference, save_tiny_hf_model, save_tiny_tokenizer

ARCHITECTURES = ("LlamaForSequenceClassification", "Gemma2ForSequenceClassification")
MARGINS = [0.5, -0.25, 1.0]


def random_pairs(seed: int = 0):
  """Three (prompt, chosen, rejected) token lists; the responses differ from their first token
  on, prompts and responses of several lengths, no pad token inside."""
  rng = np.random.default_rng(seed)
  out = []
  for prompt_len, chosen_len, rejected_len in ((5, 3, 4), (9, 2, 2), (3, 6, 1)):
    prompt = rng.integers(3, PAD_TOKEN_ID, prompt_len).tolist()
    chosen = rng.integers(3, PAD_TOKEN_ID, chosen_len).tolist()
    rejected = rng.integers(3, PAD_TOKEN_ID, rejected_len).tolist()
    rejected[0] = chosen[0] + 1 if chosen[0] + 1 < PAD_TOKEN_ID else 3
    out.append((prompt, chosen, rejected))
  return out


def trl_loss_and_grads(model, folder, pairs, margin, center, tmp_path):
  """TRL's RewardTrainer (its collator and compute_loss) on the torch model:
  (loss, {name: gradient})."""
  examples = [{"chosen_ids": p + c, "rejected_ids": p + r} for p, c, r in pairs]
  args = trl.RewardConfig(output_dir=str(tmp_path / "trl"), report_to="none", use_cpu=True,
                          center_rewards_coefficient=center)
  trainer = trl.RewardTrainer(model=model, args=args,
                              train_dataset=datasets.Dataset.from_list(examples),
                              processing_class=transformers.AutoTokenizer.from_pretrained(folder))
  if margin:
    examples = [dict(e, margin=m) for e, m in zip(examples, MARGINS)]
  inputs = DataCollatorForPreference(pad_token_id=PAD_TOKEN_ID)(examples)
  trainer.model.train()
  trainer.model.zero_grad()
  loss = trainer.compute_loss(trainer.model, inputs)
  loss.backward()
  grads = {name: p.grad.detach().numpy().copy() for name, p in trainer.model.named_parameters()}
  return float(loss.detach()), grads


_STEPS = {}


def our_loss_and_grads(folder, pairs, margin, center):
  """Our step's loss and gradients; one model and step per (model, centering), compiled once."""
  if (folder, center) not in _STEPS:
    mesh = mesh_lib.make_mesh(None)
    model = trainable.load_base(str(folder), dtype="float32", mesh=mesh, seed=0)
    _STEPS[folder, center] = model, train_step_lib.TrainStep(
        model, optax.sgd(0.0), mesh, dtype=np.float32, center_rewards_coefficient=center)
  model, step = _STEPS[folder, center]
  items = [EncodedItem(i, f"p{i}", (np.array(p + c, np.int32), np.array(p + r, np.int32)),
                       (len(p), len(p)), None, 0) for i, (p, c, r) in enumerate(pairs)]
  margins = MARGINS if margin else [0.0] * len(pairs)
  # Rows of 16 tokens: one pair a row, in blocks of two rows, so the sums run over two blocks.
  blocks = pair_batches.pack_pairs(items, margins, buckets=(16, 32), row_length=16,
                                   rows_per_block=2)
  assert [b.input_ids.shape for b in blocks] == [(2, 16), (1, 16)]
  trained, frozen = trainable.split_trainable(model.params, lora=False)
  (loss, _), grads = step.loss_and_grads(trained, frozen, [b.arrays() for b in blocks])
  return model, float(loss), {p: np.asarray(g) for p, g in grads.items()}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
  root = tmp_path_factory.mktemp("trl_parity")
  out = {arch: save_tiny_hf_model(root, arch, seed=3) for arch in ARCHITECTURES}
  for folder in out.values():
    save_tiny_tokenizer(folder)
  return out


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("margin,center", [(False, None), (True, 0.1)])
def test_loss_and_every_gradient_equal_trls_reward_trainer(folders, architecture, margin, center,
                                                           tmp_path):
  folder = folders[architecture]
  pairs = random_pairs()
  torch.manual_seed(0)
  want_loss, want = trl_loss_and_grads(hf_reference(folder, architecture), folder, pairs, margin,
                                       center, tmp_path)
  model, loss, got = our_loss_and_grads(folder, pairs, margin, center)
  assert abs(loss - want_loss) <= 1e-5 * max(1.0, abs(want_loss)), (loss, want_loss)
  sources = model.sources
  assert set(got) == set(sources)
  compared = set()
  for path, source in sources.items():
    layers = list(zip(source.hf_names, got[path])) if source.stacked else [
        (source.hf_name, got[path])]
    for name, ours in layers:
      expected = np.asarray(source.transform(want[name]))
      scale = np.abs(expected).max()
      assert scale > 0, name  # every tensor gets a gradient
      assert np.abs(ours - expected).max() <= 1e-5 * scale, (path, name)
      compared.add(name)
  assert compared == set(want), set(want) - compared


def test_bfloat16_lora_on_cpu_widens_the_frozen_layers_one_at_a_time(tmp_path):
  """The step's programs run the layers under `trunk.compiler_options`, as scoring's do: with a
  bfloat16 frozen base on CPU the value-and-gradient program holds temporaries under a float32
  copy of the frozen layer stack, where compiled without the options it holds that copy whole
  (XLA:CPU widens bfloat16; hoisted out of the layer loop, the widening is the whole stack's).
  Both give the same gradients."""
  folder = save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification", seed=3,
                              num_hidden_layers=8, hidden_size=256, intermediate_size=1024)
  mesh = mesh_lib.make_mesh(None)
  model = trainable.load_base(str(folder), dtype="bfloat16", mesh=mesh, seed=0)
  trained, frozen = trainable.split_trainable(model.params, lora=True)
  trained.update(trainable.init_lora(model, trainable.lora_targets(model, ["q_proj", "v_proj"]),
                                     4, 0))
  step = train_step_lib.TrainStep(model, optax.sgd(0.0), mesh, dtype=jnp.bfloat16)
  items = [EncodedItem(i, f"p{i}", (np.array(p + c, np.int32), np.array(p + r, np.int32)),
                       (len(p), len(p)), None, 0) for i, (p, c, r) in enumerate(random_pairs())]
  block, = pair_batches.pack_pairs(items, [0.0] * len(items), buckets=(16,), row_length=16,
                                   rows_per_block=len(items))
  hoisting = jax.jit(step.accumulate.__wrapped__, donate_argnums=(0, 1))  # no options
  with jax.set_mesh(mesh):
    arrays = step.put(block.arrays())
    fresh = lambda: (step.zeros(trained), step.replicated(loss_lib.no_sums()))  # noqa: E731
    programs = {name: program.lower(*fresh(), trained, frozen, arrays).compile()
                for name, program in [("ours", step.accumulate), ("hoisting", hoisting)]}
    grads = {name: program(*fresh(), trained, frozen, arrays)[0]
             for name, program in programs.items()}
  temporaries = {name: p.memory_analysis().temp_size_in_bytes for name, p in programs.items()}
  widened = sum(v.size * 4 for path, v in frozen.items() if path.startswith("layers/"))
  assert temporaries["ours"] < widened < temporaries["hoisting"], (temporaries, widened)
  for path in grads["ours"]:
    np.testing.assert_array_equal(np.asarray(grads["ours"][path]),
                                  np.asarray(grads["hoisting"][path]), err_msg=path)
