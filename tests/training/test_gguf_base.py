"""A GGUF file as the training base: a tiny HF Llama written as a Q8_0 GGUF (its tokenizer, special
tokens and chat template in the metadata, as llama.cpp writes them), trained a few LoRA steps by
`orchestrators.train.run`, exported as a HF folder.

- transformers' AutoModelForSequenceClassification loads the export with no missing or unexpected
  keys, and its rewards equal the project's scorer's on the same folder within 1e-4 (fp32);
- transformers' AutoTokenizer on the export tokenizes and renders the chat template as the
  project's tokenizer of the GGUF file does;
- the tensors LoRA leaves alone are the GGUF's dequantized values, bit for bit; a target's differ.
"""

import json

import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

from socialrm_jax.base import settings
from socialrm_jax.models import gguf_import, reward_model
from socialrm_jax.models import tokenizer as tokenizer_lib
from socialrm_jax.orchestrators import train
from tests.helpers.gguf_fixtures import gguf_from_hf_llama
from tests.helpers.model_fixtures import pad_rows
from tests.helpers.preference_fixtures import write_learnable_pairs
from tests.helpers.scoring_fixtures import make_llama

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  root = tmp_path_factory.mktemp("gguf_base")
  make_llama(root / "hf", head="lm", seed=0)
  base = gguf_from_hf_llama(root / "hf", root / "base.gguf")
  data = write_learnable_pairs(root / "pairs.jsonl", 40)
  out = root / "run"
  train.run(settings.from_config(train.TrainConfig, dict(
      model=str(base), data=(f"preference:{data}",), output_dir=str(out), max_steps=4,
      batch_size=8, learning_rate=1e-3, seed=0, eval_fraction=0.2, log_every=1, max_length=128,
      lora_rank=4, lora_alpha=8.0, lora_targets=("q_proj", "v_proj"))))
  return base, data, out


def test_the_export_of_a_gguf_base_loads_in_transformers_and_scores_as_ours(run):
  base, data, out = run
  export = out / train.MODEL_DIR
  hf, info = transformers.AutoModelForSequenceClassification.from_pretrained(
      export, output_loading_info=True, dtype=torch.float32)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  assert hf.config.architectures == ["LlamaForSequenceClassification"]

  theirs = transformers.AutoTokenizer.from_pretrained(export)
  ours = tokenizer_lib.load_tokenizer(base)
  rows = [json.loads(line) for line in data.read_text().splitlines()][:6]
  conversations = [[{"role": "user", "content": r["prompt"]},
                    {"role": "assistant", "content": r[side]}]
                   for r in rows for side in ("chosen", "rejected")]
  sequences = []
  for conversation in conversations:
    want = ours.apply_chat_template(conversation, tokenize=False)
    assert theirs.apply_chat_template(conversation, tokenize=False) == want
    ids = theirs(want, add_special_tokens=False)["input_ids"]
    assert ids == ours(want, add_special_tokens=False)["input_ids"]
    sequences.append(ids)

  pad = hf.config.pad_token_id
  ids, mask = pad_rows(sequences, max(map(len, sequences)), "right", pad)
  with torch.no_grad():
    want = hf.eval()(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits[:, 0]
  scored = np.asarray(reward_model.load_reward_model(str(export))(ids, mask))
  assert np.abs(scored - want.numpy()).max() <= 1e-4


def test_untouched_tensors_are_the_ggufs_dequantized_values(run):
  base, _, out = run
  exported = load_file(str(out / train.MODEL_DIR / "model.safetensors"))
  tensors = gguf_import.read_gguf(base).tensors
  untouched = [n for n in exported if n != "score.weight" and not n.endswith(
      ("q_proj.weight", "v_proj.weight"))]
  assert "model.layers.0.mlp.down_proj.weight" in untouched
  for name in untouched:
    np.testing.assert_array_equal(exported[name], tensors.get(name), err_msg=name)
  changed = [n for n in exported if n.endswith("q_proj.weight")]
  assert any(not np.array_equal(exported[n], tensors.get(n)) for n in changed)
