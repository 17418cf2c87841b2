"""Custom reward heads (models/heads.py) against their own PyTorch classes: for each head a tiny
random checkpoint saved by its class is scored through the scoring engine (templating, prefix
sharing, packing, the compiled step: what socialrm-score runs) on converted items, and every
output equals the class scoring each sequence alone, output 0 being the score its pipeline ranks
by. ArmoRM also goes through the `socialrm_jax.main.score` command, with its objectives named in
run.json and picked by --objective."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import numpy as np
import pytest
import torch

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import heads
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import engine, step as step_lib
from tests.helpers import reward_head_fixtures as rh
from tests.helpers import scoring_fixtures as fx

TOLERANCE = 1e-4
# Long enough for every fixture item under the byte-level Llama 3 tokenizer: nothing truncated,
# so each packed sequence is the one the class scores alone.
OPTIONS = engine.ScoringOptions(max_length=512, tokens_per_batch=2048, chunk_size=8,
                                smallest_bucket=128)


# Converted items: three BBQ questions (three candidates each) and two HH-RLHF pairs, one of them
# a multi-turn conversation (an earlier assistant header: the gate reads the last one).
ITEMS = fx.bbq_items()[:3] + fx.hh_items()[:2]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
  """Tiny models' forward passes: one thread is far faster than two on a busy 2-core machine."""
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  yield
  torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def armorm(tmp_path_factory):
  folder = tmp_path_factory.mktemp("armorm")
  reference, tokenizer = rh.make_armorm(folder)
  return folder, reference, tokenizer


def expected_outputs(reference, tokenizer, items) -> dict[tuple[str, int], np.ndarray]:
  out = {}
  for item in items:
    for c, ids in enumerate(fx.reference_sequences(tokenizer, item)[0]):
      out[(item["item_id"], c)] = reference(ids)
  return out


def check_scores(rows, expected: dict, num_outputs: int, objective: int = 0) -> None:
  """Every output within TOLERANCE; `reward` is output `objective` (0: the pipeline's score)."""
  got = fx.scores_by_key(rows)
  assert set(got) == set(expected)
  for key, vector in expected.items():
    assert len(vector) == num_outputs
    outputs = got[key]["rewards"] if num_outputs > 1 else [got[key]["reward"]]
    np.testing.assert_allclose(outputs, vector, atol=TOLERANCE, rtol=0, err_msg=str(key))
    assert got[key]["reward"] == pytest.approx(vector[objective], abs=TOLERANCE)
  scores = np.array([v[0] for v in expected.values()])
  assert np.ptp(scores) > 100 * TOLERANCE  # the check could fail: the scores differ


@pytest.mark.parametrize("name", [n for n in rh.HEADS if n != "armorm"])
def test_head_matches_its_class_through_the_scoring_engine(name, tmp_path):
  folder = tmp_path / "rm"
  folder.mkdir()
  reference, tokenizer = rh.HEADS[name](folder)
  model = load_reward_model(folder)
  spec = model.config.reward_head
  assert spec is not None and model.config.num_labels == spec.num_outputs
  items = ITEMS
  # A head without a gate adds nothing to packing: one row length (one compilation) suffices.
  options = OPTIONS if spec.gate_pattern else dataclasses.replace(OPTIONS, smallest_bucket=512)
  run = engine.score_items(model, items, tmp_path / "out", options=options)
  check_scores(tables.read_rows(tmp_path / "out", "scores"),
               expected_outputs(reference, tokenizer, items), spec.num_outputs)
  assert run["reward_head"]["outputs"] == list(spec.output_names)
  assert run["compilations"] <= 4


@pytest.mark.slow
def test_armorm_through_socialrm_score_gated_score_first_objectives_named(armorm, tmp_path):
  """The command on converted items: output 0 the gated score, the 19 objectives after it under
  ArmoRM's names in run.json; --objective=3 makes output 3 (helpsteer-coherence) the reward."""
  folder, reference, tokenizer = armorm
  items = ITEMS
  tables.write_rows(tmp_path / "items" / "items.jsonl", items)
  out = tmp_path / "out"
  subprocess.run(fx.score_command(folder, tmp_path / "items", out, "--max_length=512",
                                  "--objective=3"),
                 env=fx.subprocess_env(), check=True, timeout=300)
  check_scores(tables.read_rows(out, "scores"), expected_outputs(reference, tokenizer, items), 20,
               objective=3)
  run = json.loads((out / "run.json").read_text())
  assert run["reward_head"] == {"class": "LlamaForRewardModelWithGating", "kind": "gated",
                                "outputs": ["score", *heads.ARMORM_OBJECTIVES]}
  assert run["reward_head"]["outputs"][3] == "helpsteer-coherence" and run["objective"] == 3


def test_armorm_gate_is_read_in_the_shared_prompt(armorm):
  """The gate position is the prompt's end of turn, before the answer: in the prefix every
  candidate shares, so packing reads it there; the step of a standard head sends no gate."""
  folder, _, tokenizer = armorm
  model = load_reward_model(folder)
  item = fx.all_items()[0]
  sequences, starts = fx.reference_sequences(tokenizer, item)
  positions = [heads.gate_position(model.config.reward_head, np.array(s)) for s in sequences]
  assert len(set(positions)) == 1 and positions[0] == starts[0] - 5
  assert step_lib.is_gated(model)
  assert "gate_index" in step_lib.batch_fields("score", gated=True)
  assert "gate_index" not in step_lib.batch_fields("score")


def test_armorm_native_checkpoint_keeps_its_head(armorm, tmp_path):
  """socialrm-convert-checkpoint's native folder holds the head's description in its manifest
  and scores as the HF folder does: gated score and objectives."""
  from socialrm_jax.main import convert_checkpoint  # pylint: disable=import-outside-toplevel
  folder, reference, tokenizer = armorm
  convert_checkpoint.convert(str(folder), str(tmp_path / "native"))
  native = load_reward_model(tmp_path / "native")
  assert native.config.reward_head == load_reward_model(folder).config.reward_head
  ids = fx.reference_sequences(tokenizer, ITEMS[0])[0][1]
  got = np.asarray(native(np.array([ids]), np.ones((1, len(ids)), np.int32)))[0]
  np.testing.assert_allclose(got, reference(ids), atol=TOLERANCE, rtol=0)


def test_ldl_head_kept_in_pickles_is_refused_with_the_way_out(tmp_path):
  """LDL-Reward's own save_pretrained writes the Gemma 2 trunk as safetensors (`Gemma2Model`)
  and the head as pickles: never loaded, never scored without its head."""
  from transformers import Gemma2Config  # pylint: disable=import-outside-toplevel
  ldl = rh.wheel_module("ldlreward")
  tokenizer = fx.train_chat_tokenizer(tmp_path)
  model = ldl.LDLRewardModel27B(Gemma2Config(vocab_size=len(tokenizer), head_dim=8,
                                             num_objectives=30, **rh.TRUNK))
  model.regression_layer = ldl.MultiOutputNN(32, 30, hidden_dims=[16, 16])
  model.gating_layer = ldl.GatingNN(32, 3, hidden_dim=16)
  model.save_pretrained(str(tmp_path))
  with pytest.raises(InputError, match=r"gating_layer\.pt, regression_layer\.pt as pickles.*"
                                       r"PreTrainedModel\.save_pretrained"):
    load_reward_model(tmp_path)


def test_armorm_left_truncated_prompts_keep_the_gate(armorm, tmp_path):
  """Prompts cut from the left (--max_length below the items' lengths): the gate is found in
  what remains, and every output equals the class scoring the truncated sequence alone."""
  from socialrm_jax.scoring import item_tokens  # pylint: disable=import-outside-toplevel
  folder, reference, _ = armorm
  options = dataclasses.replace(OPTIONS, max_length=160)
  engine.score_items(load_reward_model(folder), ITEMS, tmp_path, options=options)
  templater = item_tokens.Templater(item_tokens.load_tokenizer(folder), is_causal=True,
                                    max_length=160)
  encoded = templater.encode_many(0, ITEMS)
  assert sum(enc.truncated_tokens > 0 for enc in encoded) >= 3  # most items were cut
  expected = {(enc.item_id, c): reference([int(t) for t in seq])
              for enc in encoded for c, seq in enumerate(enc.sequences)}
  check_scores(tables.read_rows(tmp_path, "scores"), expected, 20)
