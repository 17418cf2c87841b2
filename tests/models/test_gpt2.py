"""What only the GPT-2 family has; the checks every family shares are in test_family_parity.py."""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from socialrm_jax.models.reward_model import load_reward_model  # noqa: E402
from tests.helpers import model_fixtures as mf  # noqa: E402
from tests.helpers.family_cases import PAD_ID, SEQ_LEN, sequences  # noqa: E402


def test_base_model_checkpoint_without_prefix_loads(tiny_checkpoint, loaded_model, tmp_path):
  """openai-community/gpt2 saves its tensors without `transformer.` (`h.0.attn.c_attn.weight`);
  transformers adds the prefix on load, and so must we."""
  folder = tiny_checkpoint("GPT2LMHeadModel")[1]
  with safe_open(folder / "model.safetensors", framework="numpy") as f:
    bare = {name.removeprefix("transformer."): f.get_tensor(name) for name in f.keys()}
  assert not any(name.startswith("transformer.") for name in bare)
  (tmp_path / "bare").mkdir()
  save_file(bare, tmp_path / "bare" / "model.safetensors")
  (tmp_path / "bare" / "config.json").write_text((folder / "config.json").read_text())
  ids, mask = mf.pad_rows(sequences(seed=7), SEQ_LEN, "right", PAD_ID)
  np.testing.assert_array_equal(
      np.asarray(load_reward_model(tmp_path / "bare").token_logprobs(ids, mask)),
      np.asarray(loaded_model("GPT2LMHeadModel").token_logprobs(ids, mask)))
