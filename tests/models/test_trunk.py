"""Every family runs its layers through `trunk.scan_layers`: one stacked module, one traced layer
whatever the depth. Outputs against PyTorch are in test_family_parity.py; the decoder's own scanned
data (windows, RoPE) in test_decoder_scan.py."""

from __future__ import annotations

import dataclasses
import json
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

from socialrm_jax.models import attention, families, masks, weights  # noqa: E402
from socialrm_jax.models.reward_model import load_reward_model  # noqa: E402
from tests.helpers import model_fixtures as mf  # noqa: E402
from tests.helpers.family_cases import CASES, PAD_ID, SEQ_LEN, sequences  # noqa: E402

# One case of each family (GPT-2's with a logit scale of its own per layer, scanned with it).
ONE_PER_FAMILY = ["LlamaForSequenceClassification", "GPT2ForSequenceClassification-layer-scaled",
                  "BertForSequenceClassification", "GPTNeoXForSequenceClassification",
                  "DebertaV2ForSequenceClassification"]


def family_config(tiny_checkpoint, case: str, num_layers: int):
  _, folder = tiny_checkpoint(case)
  architecture = CASES[case].architecture
  family = families.family_for(architecture)
  config = family.config_from_hf(json.loads((folder / "config.json").read_text()), architecture)
  if hasattr(config, "layer_windows"):  # the decoder keeps one window per layer
    config = dataclasses.replace(config, layer_windows=(None,) * num_layers)
  return family, dataclasses.replace(config, num_layers=num_layers)


def lowered_forward(family, config) -> str:
  """StableHLO text of the hidden states of a [2, 8] batch."""
  graphdef, state = nnx.split(family.Model(config))

  def hidden(state, input_ids, attention_mask):
    layout = attention.from_padding_mask(attention_mask, is_causal=family.IS_CAUSAL)
    return nnx.merge(graphdef, state)(input_ids, masks.positions_from_mask(attention_mask), layout)

  ids = jnp.ones((2, 8), jnp.int32)
  return jax.jit(hidden).lower(state, ids, jnp.ones_like(ids)).as_text()


@pytest.mark.parametrize("case", ONE_PER_FAMILY)
def test_every_family_traces_one_layer_whatever_the_depth(tiny_checkpoint, case):
  family, shallow = family_config(tiny_checkpoint, case, 2)
  _, deep = family_config(tiny_checkpoint, case, 6)
  shallow_program, deep_program = lowered_forward(family, shallow), lowered_forward(family, deep)
  assert shallow_program.count("dot_general") == deep_program.count("dot_general") > 0
  assert deep_program.count("stablehlo.while") == 1
  kernels = [v.get_value().shape for p, v in weights.param_paths(
      nnx.eval_shape(lambda: family.Model(deep))).items() if p.startswith("layers/")]
  assert kernels and all(shape[0] == 6 for shape in kernels)  # every layer parameter [L, ...]


@pytest.mark.parametrize("case, family", [("GPT2ForSequenceClassification", "gpt2"),
                                          ("BertForSequenceClassification", "bert")])
def test_format_2_checkpoints_of_per_layer_families_still_load(loaded_model, tmp_path, case,
                                                                family):
  model = loaded_model(case)
  mf.save_native_per_layer(tmp_path / "format_2", model, family, format_version=2)
  ids, mask = mf.pad_rows(sequences(seed=3), SEQ_LEN, "right", PAD_ID)
  np.testing.assert_array_equal(np.asarray(load_reward_model(tmp_path / "format_2")(ids, mask)),
                                np.asarray(model(ids, mask)))
