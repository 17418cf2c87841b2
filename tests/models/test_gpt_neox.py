"""What only the GPT-NeoX family (and OpenAssistant's GPTNeoXRewardModel) has: its old config
fields and its pooling. The checks every family shares are in test_family_parity.py; the
OpenAssistant reward model through the scoring engine is in tests/scoring/test_engine_families.py."""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

from socialrm_jax.base.errors import InputError  # noqa: E402
from socialrm_jax.models import gpt_neox  # noqa: E402
from socialrm_jax.models.reward_model import load_reward_model  # noqa: E402
from tests.helpers import model_fixtures as mf  # noqa: E402


def test_old_style_gpt_neox_config_fields_are_read():
  """Pythia's and oasst-rm-2.1's config.json predate `rope_parameters`: `rotary_pct`,
  `rotary_emb_base`."""
  hf = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
            vocab_size=96, rotary_pct=0.25, rotary_emb_base=5000, use_parallel_residual=True,
            pooling="last")
  config = gpt_neox.config_from_hf(hf, "GPTNeoXRewardModel")
  assert (config.rotary_dims, config.rope_theta, config.num_labels) == (4, 5000.0, 1)


def test_mean_pooling_is_refused_naming_the_field(tiny_checkpoint, tmp_path):
  folder = mf.with_config_changes(tiny_checkpoint("GPTNeoXRewardModel")[1], tmp_path / "mean",
                                  pooling="mean")
  with pytest.raises(InputError, match=r"`pooling`: 'mean' is not supported.*supported: last"):
    load_reward_model(folder)
