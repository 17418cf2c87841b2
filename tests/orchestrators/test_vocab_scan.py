"""The vocabulary scan's engine: the answer suffix of real templates, the tokens scanned, and the
rewards of one-token answers against transformers scoring each templated sequence alone."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_torch_thread")
from socialrm_jax.models import default_model
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.orchestrators import vocab_scan
from socialrm_jax.scoring import engine, item_source, item_tokens, vocab_rows
from tests.helpers import scoring_fixtures as fx

PROMPTS = list(zip(vocab_scan.DEFAULT_PROMPTS.ids, vocab_scan.DEFAULT_PROMPTS.texts))
OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=1024, chunk_size=48)
# Llama 3.1's template, shortened, with its default system block (the scan benchmark's).
LLAMA3_TEMPLATE = (fx.REPO_ROOT / "benchmarks" / "gpu" /
                   "llama3_like_chat_template.jinja").read_text()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  """A tiny Llama reward model, a tiny Llama LM and a second LM (the implicit reward's
  reference), all with the fixture chat tokenizer."""
  root = tmp_path_factory.mktemp("vocab_scan")
  out = {}
  for name, head, seed in (("rm", "score", 0), ("lm", "lm", 1), ("ref", "lm", 2)):
    (root / name).mkdir()
    out[name] = (root / name, *fx.make_llama(root / name, head=head, seed=seed))
  return out


def _templater(folder) -> item_tokens.Templater:
  return item_tokens.Templater(item_tokens.load_tokenizer(folder), is_causal=True, max_length=256)


def test_answer_suffix_of_a_chatml_template_is_its_end_of_turn():
  """SmolLM2 (ChatML, from the embedded GGUF's metadata): `<|im_end|>` then a newline."""
  templater = _templater(default_model.smollm2_gguf_path())
  prefix, suffix = vocab_rows.answer_suffix(templater, "What is best?")
  tokenizer = templater.tokenizer
  assert tokenizer.decode(suffix) == "<|im_end|>\n"
  assert len(suffix) == 2 and suffix[0] == tokenizer.convert_tokens_to_ids("<|im_end|>")
  assert tokenizer.decode(prefix).endswith("What is best?<|im_end|>\n<|im_start|>assistant\n")
  # A one-token answer's sequence is the finished conversation's, id for id, where the answer's
  # text is that token (" love" tokenizes alone to one id here).
  word = templater.tokenize("love")
  assert len(word) == 1
  full = templater.tokenize(templater.render(
      [{"role": "user", "content": "What is best?"}, {"role": "assistant", "content": "love"}],
      add_generation_prompt=False))
  np.testing.assert_array_equal(np.concatenate([prefix, word, suffix]), full)


def test_answer_suffix_of_a_llama3_template_is_eot(models, tmp_path):
  """A Llama-3-style template with its default system block: the suffix is `<|eot_id|>` alone,
  and the prefix holds the system block and the assistant header."""
  import transformers  # pylint: disable=import-outside-toplevel
  hf_tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(models["rm"][0])
  hf_tokenizer.add_special_tokens({"additional_special_tokens": [
      "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]})
  hf_tokenizer.chat_template = LLAMA3_TEMPLATE
  hf_tokenizer.save_pretrained(tmp_path)
  templater = _templater(tmp_path)
  prefix, suffix = vocab_rows.answer_suffix(templater, "What is best?")
  assert templater.tokenizer.decode(suffix) == "<|eot_id|>"
  text = templater.tokenizer.decode(prefix)
  assert "Today Date: 26 Jul 2024" in text
  assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_vocabulary_leaves_out_special_tokens_and_lists_them(models):
  folder = models["rm"][0]
  tokenizer = item_tokens.load_tokenizer(folder)
  vocab = vocab_rows.vocabulary(tokenizer)
  specials = {tokenizer.convert_tokens_to_ids(t) for t in fx.SPECIAL_TOKENS}
  assert {e["token_id"] for e in vocab.excluded} == specials
  assert all(e["reason"] == "special token" for e in vocab.excluded)
  assert len(vocab.ids) + len(vocab.excluded) == vocab.size == fx.VOCAB_SIZE
  assert not specials & set(vocab.ids.tolist())
  assert vocab.texts[5] == tokenizer.decode([int(vocab.ids[5])])
  first = vocab_rows.vocabulary(tokenizer, max_tokens=7)
  np.testing.assert_array_equal(first.ids, vocab.ids[:7])


def _reference_sequences(hf_tokenizer, token_ids):
  """Each (prompt, token) as transformers renders and tokenizes the templated prompt, then the
  token id, then the fixture template's end of turn `<|end|>\\n` tokenized alone."""
  suffix = hf_tokenizer("<|end|>\n", add_special_tokens=False)["input_ids"]
  out = {}
  for prompt_id, text in PROMPTS:
    prompt = hf_tokenizer(hf_tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True),
        add_special_tokens=False)["input_ids"]
    for token in token_ids:
      out[f"{prompt_id}/{token}"] = (prompt + [int(token)] + suffix, len(prompt))
  return out


def _torch_log_probs(model, ids, start):
  """log p of tokens start.. of one sequence scored alone, float64 [T - start]."""
  with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0].double()
  logp = torch.log_softmax(logits, -1)[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
  return logp.numpy()[start - 1:]


def _scan(models, tmp_path, name, options, token_ids, ref=None):
  folder = models[name][0]
  vocab = vocab_rows.vocabulary(item_tokens.load_tokenizer(folder))
  keep = np.isin(vocab.ids, token_ids)
  vocab = vocab_rows.Vocabulary(vocab.ids[keep], [t for t, k in zip(vocab.texts, keep) if k],
                                vocab.excluded, vocab.size)
  items = item_source.ItemSource(lambda: vocab_rows.scan_items(PROMPTS, vocab))
  run = engine.score_items(
      load_reward_model(folder), items, tmp_path / name, options=options,
      ref_model=None if ref is None else load_reward_model(models[ref][0]),
      make=vocab_rows.scorer_factory(PROMPTS))
  rows = {}
  for shard in sorted((tmp_path / name).glob("scores-*.parquet")):
    rows.update({r["item_id"]: r for r in pq.read_table(shard).to_pylist()})
  return run, rows


@pytest.fixture(scope="module")
def random_tokens(models):
  """64 random scannable token ids."""
  vocab = vocab_rows.vocabulary(item_tokens.load_tokenizer(models["rm"][0]))
  return np.sort(np.random.default_rng(0).choice(vocab.ids, 64, replace=False))


def test_score_head_rewards_equal_transformers_each_sequence_alone(models, random_tokens,
                                                                   tmp_path):
  _, model, hf_tokenizer = models["rm"]
  run, rows = _scan(models, tmp_path, "rm", OPTIONS, random_tokens)
  expected = {}
  with torch.no_grad():
    for key, (ids, _) in _reference_sequences(hf_tokenizer, random_tokens).items():
      expected[key] = float(model(torch.tensor([ids])).logits[0, 0])
  got = {k: r["reward"] for k, r in rows.items()}
  assert len(got) == 2 * 64
  assert fx.max_abs_diff(expected, got) <= 1e-4
  # The prompt is computed once per row, not once per token.
  assert run["tokens_computed"] <= 0.5 * run["tokens_naive"]
  assert run["compilations"] <= 2


def test_loglik_rewards_equal_transformers_each_sequence_alone(models, random_tokens, tmp_path):
  _, model, hf_tokenizer = models["lm"]
  run, rows = _scan(models, tmp_path, "lm", OPTIONS, random_tokens)
  expected, expected_sum = {}, {}
  for key, (ids, start) in _reference_sequences(hf_tokenizer, random_tokens).items():
    logp = _torch_log_probs(model, ids, start)
    assert len(logp) == 3  # the token, <|end|> and the newline
    expected[key], expected_sum[key] = float(logp.mean()), float(logp.sum())
  assert fx.max_abs_diff(expected, {k: r["reward"] for k, r in rows.items()}) <= 1e-4
  assert fx.max_abs_diff(expected_sum, {k: r["reward_sum"] for k, r in rows.items()}) <= 1e-4
  assert {r["n_tokens"] for r in rows.values()} == {3}
  assert run["proxy"] == "loglik"


def test_implicit_rewards_equal_transformers_each_sequence_alone(models, random_tokens, tmp_path):
  _, policy, hf_tokenizer = models["lm"]
  _, reference, _ = models["ref"]
  options = engine.ScoringOptions(max_length=256, tokens_per_batch=1024, chunk_size=48,
                                  proxy="implicit", ref_model=str(models["ref"][0]))
  _, rows = _scan(models, tmp_path, "lm", options, random_tokens, ref="ref")
  expected = {}
  for key, (ids, start) in _reference_sequences(hf_tokenizer, random_tokens).items():
    expected[key] = float(_torch_log_probs(policy, ids, start).sum()
                          - _torch_log_probs(reference, ids, start).sum())
  assert fx.max_abs_diff(expected, {k: r["reward"] for k, r in rows.items()}) <= 1e-4


def test_scan_writes_the_output_contract_and_resumes(models, tmp_path):
  folder = models["lm"][0]
  options = engine.ScoringOptions(max_length=256, tokens_per_batch=1024, chunk_size=30)
  scan_options = vocab_scan.ScanOptions(max_tokens=40, n_resamples=20, n_permutations=50)
  result = vocab_scan.run(str(folder), tmp_path / "scan", options, scan_options)
  table = pq.read_table(tmp_path / "scan" / "vocab_scores.parquet")
  assert table.column_names == list(vocab_scan.SCORES_COLUMNS)
  rows = table.to_pylist()
  assert len(rows) == 2 * 40
  for prompt_id, _ in PROMPTS:
    mine = sorted((r for r in rows if r["prompt_id"] == prompt_id), key=lambda r: r["rank"])
    assert [r["rank"] for r in mine] == list(range(1, 41))
    assert mine[0]["percentile"] == 100.0 and mine[-1]["percentile"] == 0.0
    assert all(a["reward"] >= b["reward"] for a, b in zip(mine, mine[1:]))
  scan = json.loads((tmp_path / "scan" / "scan.json").read_text())
  assert scan["tokens"]["scanned"] == 40 and scan["tokens"]["excluded"] == len(fx.SPECIAL_TOKENS)
  assert scan["scoring"]["tokens_computed_over_naive"] < 0.5
  assert set(scan["statistics"]["prompts"]) == {p for p, _ in PROMPTS}
  assert (tmp_path / "scan" / "vocab_scan.png").stat().st_size > 0
  assert "Vocabulary scan" in (tmp_path / "scan" / "vocab_scan.md").read_text()
  # A second run into the folder scores nothing again and gives the same table.
  again = vocab_scan.run(str(folder), tmp_path / "scan", options, scan_options)
  assert again["statistics"] == result["statistics"]
  assert pq.read_table(tmp_path / "scan" / "vocab_scores.parquet").equals(table)


def test_audit_stage_scans_each_model_and_compares_those_sharing_tokens(models, tmp_path):
  assert not vocab_scan.ScanStage().enabled  # off by default
  config = vocab_scan.ScanStage(enabled=True, options=vocab_scan.ScanOptions(
      max_tokens=30, n_resamples=20, n_permutations=50))
  options = engine.ScoringOptions(max_length=256, tokens_per_batch=1024)
  sections = vocab_scan.run_for_audit(
      config, [("rm", str(models["rm"][0]), options), ("lm", str(models["lm"][0]), options),
               ("judged", str(models["lm"][0]), engine.ScoringOptions(proxy="judge"))], tmp_path)
  text = "\n".join("\n".join(s) for s in sections)
  assert "# Vocabulary scan: rm" in text and "# Vocabulary scan: lm" in text
  assert "agreement between models" in text and "| rm | lm |" in text
  assert "Not scanned (the judge proxy" in text and "judged" in text
  for name in ("rm", "lm"):
    assert (tmp_path / "vocab_scan" / name / "vocab_scores.parquet").is_file()
