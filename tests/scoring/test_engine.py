"""Packed, prefix-shared scoring equals PyTorch scoring each full sequence alone."""

import dataclasses

import numpy as np
import pytest

from socialrm_jax.base import records, tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import readout as readout_lib
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import chunks, engine, proxies
from tests.helpers import scoring_fixtures as fx

TOLERANCE = 1e-4
# Small buckets and budgets so the fixture items are packed several to a row, over several buckets.
OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=512, chunk_size=4,
                                smallest_bucket=64)


@pytest.fixture(scope="module")
def llama_rm(tmp_path_factory):
  folder = tmp_path_factory.mktemp("llama_rm")
  torch_model, tokenizer = fx.make_llama(folder, head="score")
  return folder, torch_model, tokenizer


@pytest.fixture(scope="module")
def llama_lm(tmp_path_factory):
  folder = tmp_path_factory.mktemp("llama_lm")
  torch_model, tokenizer = fx.make_llama(folder, head="lm", seed=1)
  return folder, torch_model, tokenizer


def _scores(folder):
  return fx.scores_by_key(tables.read_rows(folder, "scores"))


def test_score_head_matches_pytorch_on_full_sequences(llama_rm, tmp_path):
  folder, torch_model, tokenizer = llama_rm
  items = fx.all_items()
  run = engine.score_items(load_reward_model(folder), items, tmp_path, options=OPTIONS)
  got = {k: r["reward"] for k, r in _scores(tmp_path).items()}
  expected = fx.torch_rewards(torch_model, tokenizer, items)
  assert fx.max_abs_diff(expected, got) <= TOLERANCE
  assert np.std(list(expected.values())) > 0.05  # The check is not vacuous: rewards differ.
  # Prefix sharing and packing were on: fewer tokens than the candidates' full sequences.
  full = sum(len(s) for item in items for s in fx.reference_sequences(tokenizer, item)[0])
  assert run["tokens_computed"] < 0.6 * full
  assert run["batches"] < sum(len(it["candidates"]) for it in items)
  assert run["compilations"] <= len(engine.packing.length_buckets(256, 64)) <= 4
  assert run["proxy"] == "none" and run["truncated"] == 0
  # tokens_naive: each gold pair's chosen and rejected as two full sequences.
  naive = 0
  for item in items:
    sequences = fx.reference_sequences(tokenizer, item)[0]
    naive += sum(len(sequences[c]) + len(sequences[r])
                 for c, r, _ in records.gold_pairs(item["desirability"]))
  assert run["tokens_naive"] == naive


def test_loglik_proxy_matches_pytorch(llama_lm, tmp_path):
  folder, torch_model, tokenizer = llama_lm
  items = fx.all_items()
  run = engine.score_items(load_reward_model(folder), items, tmp_path, options=OPTIONS)
  assert run["proxy"] == "loglik"
  got = _scores(tmp_path)
  expected = fx.torch_logliks(torch_model, tokenizer, items)
  assert fx.max_abs_diff({k: v[0] for k, v in expected.items()},
                         {k: r["reward"] for k, r in got.items()}) <= TOLERANCE
  assert fx.max_abs_diff({k: v[1] for k, v in expected.items()},
                         {k: r["reward_sum"] for k, r in got.items()}) <= TOLERANCE * 10
  assert all(got[k]["n_tokens"] == v[2] for k, v in expected.items())


def test_encoder_pairs_match_pytorch(tmp_path):
  import torch
  torch_model, tokenizer = fx.make_bert(tmp_path / "bert")
  items = fx.all_items()
  engine.score_items(load_reward_model(tmp_path / "bert"), items, tmp_path / "scores",
                     options=OPTIONS)
  got = {k: r["reward"] for k, r in _scores(tmp_path / "scores").items()}
  expected = {}
  with torch.no_grad():
    for item in items:
      question = item["prompt"][0]["content"] if len(item["prompt"]) == 1 else "\n\n".join(
          f"{m['role'].capitalize()}: {m['content']}" for m in item["prompt"])
      for c, text in enumerate(item["candidates"]):
        enc = tokenizer(question, text, return_tensors="pt", return_token_type_ids=True)
        expected[(item["item_id"], c)] = float(torch_model(**enc).logits[0, 0])
  assert fx.max_abs_diff(expected, got) <= TOLERANCE


def test_truncated_items_are_counted_and_error_mode_names_them(llama_rm, tmp_path):
  folder, _, _ = llama_rm
  model = load_reward_model(folder)
  options = engine.ScoringOptions(max_length=64, tokens_per_batch=256, chunk_size=4,
                                  smallest_bucket=64)
  run = engine.score_items(model, fx.all_items(), tmp_path / "left", options=options)
  assert run["truncated"] > 0
  assert len(tables.read_rows(tmp_path / "left", "scores")) == sum(
      len(it["candidates"]) for it in fx.all_items())
  strict = engine.ScoringOptions(max_length=64, tokens_per_batch=256, chunk_size=4,
                                 smallest_bucket=64, truncation="error")
  with pytest.raises(InputError, match="item 'bbq-0001'.*--max_length=64"):
    engine.score_items(model, fx.all_items(), tmp_path / "error", options=strict)


def test_nan_reward_stops_the_run_naming_the_item(llama_rm, tmp_path):
  folder, _, _ = llama_rm
  model = load_reward_model(folder)
  kernel = model.module.score.kernel
  kernel.set_value(kernel.get_value() * np.nan)
  with pytest.raises(chunks.NonFiniteRewardError, match="item 'bbq-0000'"):
    engine.score_items(model, fx.all_items(), tmp_path, options=OPTIONS)
  assert not list(tmp_path.glob("scores-*"))


def test_another_model_or_item_set_in_the_folder_is_refused(llama_rm, llama_lm, tmp_path):
  rm_folder, _, _ = llama_rm
  model = load_reward_model(rm_folder)
  engine.score_items(model, fx.bbq_items(), tmp_path, options=OPTIONS)
  with pytest.raises(InputError, match="another item set"):
    engine.score_items(model, fx.all_items(), tmp_path, options=OPTIONS)
  with pytest.raises(InputError, match="another model"):
    engine.score_items(load_reward_model(llama_lm[0]), fx.bbq_items(), tmp_path,
                       options=dataclasses.replace(OPTIONS, proxy="loglik"))
  # The same model and items resume: nothing is redone (no shard rewritten; a complete folder
  # keeps its run.json), nothing duplicated.
  shards = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("scores-*")}
  first = (tmp_path / "run.json").read_text()
  engine.score_items(model, fx.bbq_items(), tmp_path, options=OPTIONS)
  assert {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("scores-*")} == shards
  assert (tmp_path / "run.json").read_text() == first
  assert len(tables.read_rows(tmp_path, "scores")) == 3 * len(fx.bbq_items())


def test_proxy_must_fit_the_head():
  assert proxies.resolve("score", None) == "none"
  assert proxies.resolve("lm", None) == "loglik"
  with pytest.raises(InputError, match="no reward head"):
    proxies.resolve("lm", "none")
  for proxy in ("loglik", "implicit", "judge"):
    with pytest.raises(InputError, match="language-model head"):
      proxies.resolve("score", proxy)


def test_select_items_by_dataset_and_limit():
  items = fx.all_items()
  assert [it["dataset"] for it in engine.select_items(items, ["hh_rlhf"])] == ["hh_rlhf"] * 3
  assert len(engine.select_items(items, None, 2)) == 2
  with pytest.raises(InputError, match="stereoset"):
    engine.select_items(items, ["stereoset"])


def test_plain_format_gpt2_with_two_labels_matches_pytorch(tmp_path):
  import torch
  from socialrm_jax.scoring import item_tokens
  torch_model, tokenizer = fx.make_gpt2(tmp_path / "gpt2", num_labels=2)
  items = fx.all_items()
  options = dataclasses.replace(OPTIONS, objective=1)
  engine.score_items(load_reward_model(tmp_path / "gpt2"), items, tmp_path / "scores",
                     options=options)
  got = _scores(tmp_path / "scores")
  templater = item_tokens.Templater(tokenizer, is_causal=True, max_length=256)
  with torch.no_grad():
    for item in items:
      for c, text in enumerate(item["candidates"]):
        rendered = templater.render(item["prompt"] + [{"role": "assistant", "content": text}], False)
        assert rendered.startswith("<s>User: ") and rendered.endswith(f"Assistant: {text}</s>")
        ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        expected = torch_model(torch.tensor([ids])).logits[0].numpy()  # [2]
        row = got[(item["item_id"], c)]
        np.testing.assert_allclose(row["rewards"], expected, atol=TOLERANCE)
        assert row["reward"] == row["rewards"][1]


def test_blocked_lm_head_log_probs_equal_the_full_log_softmax(llama_lm):
  import jax
  import jax.numpy as jnp
  module = load_reward_model(llama_lm[0]).module
  rng = np.random.default_rng(0)
  hidden = jnp.asarray(rng.normal(size=(3, 7, 32)), jnp.float32)  # [B, S, D]
  targets = jnp.asarray(rng.integers(0, 300, size=(3, 7)), jnp.int32)  # [B, S]
  full = jnp.take_along_axis(jax.nn.log_softmax(module.head(hidden), -1), targets[..., None], -1)
  blocked = readout_lib.target_log_probs(module, hidden, targets, block=5)  # 21 readouts: 5 blocks
  np.testing.assert_allclose(np.asarray(blocked), np.asarray(full[..., 0]), atol=1e-5)
  # Empty slots at the end of rows: 0 there, the rest unchanged, blocks of empty slots skipped.
  empty = jnp.asarray(np.arange(7)[None, :] >= np.array([[7], [2], [4]]))  # rows use 7, 2, 4 slots
  sparse = readout_lib.target_log_probs(
      module, hidden, jnp.where(empty, readout_lib.EMPTY_TARGET, targets), block=6)
  np.testing.assert_allclose(np.asarray(sparse), np.where(empty, 0.0, full[..., 0]), atol=1e-5)
