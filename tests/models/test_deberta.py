"""What only the DeBERTa-v2/v3 family has: its log buckets, its refusals, its attention and its
SentencePiece tokenizer. The checks every family shares are in test_family_parity.py; DeBERTa
through the scoring engine is in tests/scoring/test_engine_families.py."""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from socialrm_jax.base.errors import InputError  # noqa: E402
from socialrm_jax.models import attention, deberta, tokenizer  # noqa: E402
from socialrm_jax.models.reward_model import load_reward_model  # noqa: E402
from tests.helpers import model_fixtures as mf  # noqa: E402
from tests.helpers import scoring_fixtures as fx  # noqa: E402


@pytest.mark.parametrize("bucket_size, max_position", [(256, 512), (8, 512), (128, 24528)])
def test_log_buckets_match_transformers_at_every_distance(bucket_size, max_position):
  """The host table of bucketed relative positions equals HF's float32 computation everywhere
  (its ceil would move a bucket if the float steps differed)."""
  from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position
  distance = 4096
  theirs = make_log_bucket_position(torch.arange(-(distance - 1), distance), bucket_size,
                                    max_position).long().numpy()
  np.testing.assert_array_equal(deberta.log_bucket_table(distance, bucket_size, max_position),
                                theirs)


def test_deberta_convolution_is_refused(tiny_checkpoint, tmp_path):
  folder = mf.with_config_changes(tiny_checkpoint("DebertaV2ForSequenceClassification")[1],
                                  tmp_path / "conv", conv_kernel_size=3)
  with pytest.raises(InputError, match="conv_kernel_size"):
    load_reward_model(folder)


def test_deberta_runs_xla_attention_only(tiny_checkpoint, loaded_model):
  """Its relative-position bias is added on the xla path; the kernels take none."""
  assert loaded_model("DebertaV2ForSequenceClassification").attention == "xla"
  for kernel in ("splash", "cudnn"):
    with pytest.raises(InputError, match="relative-position bias|cudnn attention runs on gpu"):
      load_reward_model(tiny_checkpoint("DebertaV2ForSequenceClassification")[1],
                        attention=kernel)
  assert attention.resolve("auto", backend="gpu", dtype=jnp.bfloat16, logit_cap=None,
                           has_windows=False, is_causal=False, has_position_bias=True) == "xla"
  assert attention.resolve("auto", backend="tpu", dtype=jnp.bfloat16, logit_cap=None,
                           has_windows=False, is_causal=False, has_position_bias=True) == "xla"


def test_deberta_v3_tokenizer_json_loads_as_transformers_encodes(tmp_path):
  tok = mf.deberta_v3_tokenizer(tmp_path, fx.item_texts(fx.all_items()))
  ours = tokenizer.load_tokenizer(tmp_path).backend_tokenizer
  for item in fx.all_items():
    question = item["prompt"][0]["content"]
    for answer in item["candidates"]:
      theirs = tok(question, answer)
      encoding = ours.encode(question, answer)
      assert encoding.ids == theirs["input_ids"]
      assert encoding.type_ids == theirs["token_type_ids"]
  assert ours.token_to_id("\u2581[UNK]") is None and tok.unk_token_id == 1


def test_deberta_folder_with_only_its_sentencepiece_model_is_refused_saying_so(tmp_path):
  (tmp_path / "spm.model").write_bytes(b"not read")
  with pytest.raises(InputError, match="no tokenizer.json.*it holds spm.model"):
    tokenizer.check_tokenizer_files(tmp_path)
