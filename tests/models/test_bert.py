"""What only the BERT family has; the checks every family shares are in test_family_parity.py
(a bare `BertModel`'s call, the pooler's output, is among them)."""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from socialrm_jax.models import attention, masks  # noqa: E402
from tests.helpers import model_fixtures as mf  # noqa: E402
from tests.helpers.family_cases import PAD_ID, SEQ_LEN, sequences  # noqa: E402
from tests.helpers import packed_rows  # noqa: E402

TOLERANCE = 1e-4


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_bert_encoder_states_and_pooled_output_match_transformers(tiny_checkpoint, loaded_model,
                                                                  padding_side):
  """Every real token's last hidden state, and the pooler at [CLS] wherever padding put it."""
  hf_model, _ = tiny_checkpoint("BertModel")
  rows = sequences(seed=3)
  ids, mask = mf.pad_rows(rows, SEQ_LEN, padding_side, PAD_ID)

  reward_model = loaded_model("BertModel")
  hidden = np.asarray(packed_rows.hidden(
      reward_model.module, jnp.asarray(ids), masks.positions_from_mask(jnp.asarray(mask)),
      attention.from_padding_mask(jnp.asarray(mask), is_causal=False)))  # [B, T, D]
  first_real = np.asarray(masks.first_real_index(jnp.asarray(mask)))  # [B]: where [CLS] sits
  pooled = np.asarray(reward_model.module.head(
      jnp.asarray(hidden[np.arange(len(rows)), first_real])))  # [B, D]

  for row, seq in enumerate(rows):
    reference = mf.hf_alone(hf_model, seq)
    real = mask[row].astype(bool)
    np.testing.assert_allclose(hidden[row, real], reference.last_hidden_state[0].numpy(),
                               rtol=0, atol=TOLERANCE)
    # A bare encoder's "reward" is HF's pooler_output: tanh(dense([CLS] hidden)).
    np.testing.assert_allclose(pooled[row], reference.pooler_output[0].numpy(),
                               rtol=0, atol=TOLERANCE)
