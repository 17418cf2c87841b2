"""The implicit (DPO) reward through the engine equals transformers' PyTorch computation: per-token
log-probs of the policy and the reference from one packed, prefix-shared pass, and the rewards
(sum and length-normalised); a reference with another tokenizer is refused."""

import collections
import dataclasses
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.runtime import global_arrays
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.scoring import engine, packing
from tests.helpers import scoring_fixtures as fx

TOLERANCE = 1e-4
OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=512, chunk_size=4,
                                smallest_bucket=64, proxy="implicit")


@pytest.fixture(scope="module")
def policy_and_ref(tmp_path_factory):
  """Two tiny random Llama LMs with the same (deterministically trained) tokenizer."""
  policy = tmp_path_factory.mktemp("policy")
  ref = tmp_path_factory.mktemp("ref")
  return (policy, *fx.make_llama(policy, head="lm", seed=1)), (ref, *fx.make_llama(ref, head="lm",
                                                                                  seed=2))


def torch_token_logprobs(model, tokenizer, items) -> dict[tuple[str, int], np.ndarray]:
  """Each candidate's response-token log-probs, its full sequence run alone. [n_tokens] each"""
  import torch
  out = {}
  with torch.no_grad():
    for item in items:
      sequences, starts = fx.reference_sequences(tokenizer, item)
      for c, (ids, start) in enumerate(zip(sequences, starts)):
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)  # [T, V]
        token_logp = logp[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()
        out[(item["item_id"], c)] = token_logp[start - 1:]
  return out


def test_packed_per_token_logprobs_of_policy_and_reference_equal_pytorch(policy_and_ref):
  (policy_dir, policy_torch, tokenizer), (ref_dir, ref_torch, _) = policy_and_ref
  items = fx.all_items()
  policy, ref = load_reward_model(policy_dir), load_reward_model(ref_dir)
  mesh = mesh_lib.make_mesh()
  scorer = engine.make_scorer(policy, mesh, dataclasses.replace(OPTIONS, ref_model=str(ref_dir)),
                              ref_model=ref)
  encoded, _ = scorer.proxy.encode(scorer.templater, 0, items)
  offsets = packing.candidate_offsets(encoded)
  keys = [(enc.item_id, c) for enc in encoded for c in range(enc.num_candidates)]
  got = collections.defaultdict(list)  # owner -> [(policy, ref)] in token order
  real_tokens = 0
  for batch in packing.make_batches(encoded, is_causal=True, readout="loglik",
                                    buckets=scorer.batcher.buckets, batch_tokens=512):
    out = global_arrays.fetch(scorer.step(scorer.step.put(batch)))  # [B, S, 2]
    assert out.shape[-1] == 2
    real_tokens += batch.real_tokens
    for r, s in np.argwhere(batch.readout_owner >= 0):
      got[int(batch.readout_owner[r, s])].append(out[r, s])
  assert len(got) == offsets[-1]
  expected_policy = torch_token_logprobs(policy_torch, tokenizer, items)
  expected_ref = torch_token_logprobs(ref_torch, tokenizer, items)
  for owner, key in enumerate(keys):
    values = np.asarray(got[owner])  # [n_tokens, 2]
    np.testing.assert_allclose(values[:, 0], expected_policy[key], atol=TOLERANCE)
    np.testing.assert_allclose(values[:, 1], expected_ref[key], atol=TOLERANCE)
  # Prefix sharing was on: fewer tokens went through the models than the full sequences hold.
  full = sum(len(s) for item in items for s in fx.reference_sequences(tokenizer, item)[0])
  assert real_tokens < 0.6 * full


@pytest.mark.parametrize("length_normalize", [False, True])
def test_implicit_rewards_equal_pytorch(policy_and_ref, tmp_path, length_normalize):
  (policy_dir, policy_torch, tokenizer), (ref_dir, ref_torch, _) = policy_and_ref
  items = fx.all_items()
  options = dataclasses.replace(OPTIONS, ref_model=str(ref_dir), length_normalize=length_normalize)
  run = engine.score_items(load_reward_model(policy_dir), items, tmp_path, options=options,
                           ref_model=load_reward_model(ref_dir))
  got = fx.scores_by_key(tables.read_rows(tmp_path, "scores"))
  policy = torch_token_logprobs(policy_torch, tokenizer, items)
  ref = torch_token_logprobs(ref_torch, tokenizer, items)
  ratio = {k: float(policy[k].sum() - ref[k].sum()) for k in policy}
  expected = {k: v / len(policy[k]) if length_normalize else v for k, v in ratio.items()}
  assert fx.max_abs_diff(expected, {k: r["reward"] for k, r in got.items()}) <= TOLERANCE
  assert fx.max_abs_diff(ratio, {k: r["reward_sum"] for k, r in got.items()}) <= TOLERANCE
  assert fx.max_abs_diff({k: float(v.sum()) for k, v in ref.items()},
                         {k: r["ref_logprob_sum"] for k, r in got.items()}) <= TOLERANCE
  assert all(got[k]["n_tokens"] == len(v) for k, v in policy.items())
  assert np.std(list(expected.values())) > 0.05  # not vacuous
  # Both models in one program per batch shape.
  assert run["proxy"] == "implicit" and run["length_normalize"] == length_normalize
  assert run["compilations"] == len(run["batch_shapes"]) <= packing.MAX_BUCKETS
  manifest = json.loads((tmp_path / "manifest.json").read_text())
  assert manifest["settings"]["ref_model"]["path"] == str(ref_dir.resolve())


def _with_tokenizer_edit(source, target, edit):
  shutil.copytree(source, target)
  path = target / "tokenizer.json"
  data = json.loads(path.read_text())
  edit(data)
  path.write_text(json.dumps(data))
  return target


def _swap_two_tokens(data):
  vocab = data["model"]["vocab"]
  a, b = "a", "b"  # byte-level alphabet tokens: always there
  vocab[a], vocab[b] = vocab[b], vocab[a]


def _no_chat_template(target):
  config = json.loads((target / "tokenizer_config.json").read_text())
  config.pop("chat_template", None)
  (target / "tokenizer_config.json").write_text(json.dumps(config))
  (target / "chat_template.jinja").unlink(missing_ok=True)


def test_a_reference_with_another_tokenizer_is_refused(policy_and_ref, tmp_path):
  (policy_dir, _, _), (ref_dir, _, _) = policy_and_ref
  policy, mesh = load_reward_model(policy_dir), mesh_lib.make_mesh()
  swapped = _with_tokenizer_edit(ref_dir, tmp_path / "swapped", _swap_two_tokens)
  with pytest.raises(InputError, match=r"--ref_model's tokenizer differs .*vocabularies"):
    engine.make_scorer(policy, mesh, dataclasses.replace(OPTIONS, ref_model=str(swapped)),
                       ref_model=load_reward_model(swapped))
  plain = _with_tokenizer_edit(ref_dir, tmp_path / "plain", lambda data: None)
  _no_chat_template(plain)
  with pytest.raises(InputError, match="renders a probe conversation to other token ids"):
    engine.make_scorer(policy, mesh, dataclasses.replace(OPTIONS, ref_model=str(plain)),
                       ref_model=load_reward_model(plain))


def test_the_command_line_refuses_a_mismatched_reference_in_one_line(policy_and_ref, tmp_path):
  (policy_dir, _, _), (ref_dir, _, _) = policy_and_ref
  swapped = _with_tokenizer_edit(ref_dir, tmp_path / "swapped", _swap_two_tokens)
  tables.write_rows(tmp_path / "items" / "items.jsonl", fx.all_items())
  result = subprocess.run(
      fx.score_command(policy_dir, tmp_path / "items", tmp_path / "scores", "--proxy=implicit",
                       f"--ref_model={swapped}"),
      env=fx.subprocess_env(), capture_output=True, text=True, timeout=600)
  assert result.returncode == 2, result.stderr[-2000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("socialrm-score:")]
  assert len(errors) == 1 and str(swapped) in errors[0] and "--ref_model" in errors[0]
  assert not (tmp_path / "scores" / "manifest.json").exists()


def test_implicit_options_are_checked():
  with pytest.raises(InputError, match="--proxy=implicit needs --ref_model"):
    engine.ScoringOptions(proxy="implicit").validate()
  with pytest.raises(InputError, match="--ref_model is used by --proxy=implicit only"):
    engine.ScoringOptions(proxy="loglik", ref_model="x").validate()
  with pytest.raises(InputError, match="--length_normalize"):
    engine.ScoringOptions(length_normalize=True).validate()
