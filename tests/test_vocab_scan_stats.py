"""The vocabulary scan's statistics against scipy.stats and hand cases, and a planted model whose
score head favours one lexicon category's tokens."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import stats

from socialrm_jax import value_probe, vocabulary_scan
from socialrm_jax.analysis import vocab_stats
from socialrm_jax.scoring import engine


def _samples(seed: int, n: int, distinct: int):
  rng = np.random.default_rng(seed)
  return rng.integers(0, distinct, n).astype(np.float64), rng.integers(0, distinct, n) * 0.5


@pytest.mark.parametrize("n,distinct", [(7, 3), (300, 40), (1500, 10**9)])
def test_ranks_spearman_and_kendall_equal_scipy(n, distinct):
  x, y = _samples(n, n, distinct)
  np.testing.assert_allclose(vocab_stats.average_ranks(x), stats.rankdata(x))
  assert vocab_stats.spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
  assert vocab_stats.kendall_tau(x, y) == pytest.approx(stats.kendalltau(x, y).statistic,
                                                        abs=1e-12)


def test_inversions_equal_brute_force_across_blocks():
  y = np.random.default_rng(1).integers(0, 50, 700)  # three blocks, ties among them
  brute = sum(int((y[i] > y[i + 1:]).sum()) for i in range(len(y)))
  assert vocab_stats.count_inversions(y) == brute


@pytest.mark.parametrize("n1,n2,distinct", [(12, 9, 5), (40, 55, 10**9)])
def test_mann_whitney_equals_scipy(n1, n2, distinct):
  rng = np.random.default_rng(n1)
  x, y = rng.integers(0, distinct, n1) + 0.5, rng.integers(0, distinct, n2).astype(float)
  ours = vocab_stats.mann_whitney(x, y)
  theirs = stats.mannwhitneyu(x, y, method="asymptotic")
  assert ours["u"] == theirs.statistic
  assert ours["p_value"] == pytest.approx(theirs.pvalue, rel=1e-9)


def test_hand_cases():
  # Every x above every y: U = n1 n2, rank-biserial +1; reversed: 0 and -1.
  assert vocab_stats.mann_whitney([3, 4], [1, 2])["u"] == 4
  assert vocab_stats.mann_whitney([3, 4], [1, 2])["rank_biserial"] == 1
  assert vocab_stats.mann_whitney([1, 2], [3, 4])["rank_biserial"] == -1
  # Ranks: highest first, ties by token id; percentiles 100 .. 0.
  rank, percentile = vocab_stats.rank_and_percentile(np.array([1.0, 3.0, 3.0, 0.0]),
                                                     np.array([10, 11, 12, 13]))
  assert rank.tolist() == [3, 1, 2, 4]
  np.testing.assert_allclose(percentile, [100 / 3, 100, 200 / 3, 0])
  assert vocab_stats.spearman([1, 2, 3], [3, 2, 1]) == -1
  assert vocab_stats.kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
  # Words found as written, capitalised, with or without a leading space.
  found = vocab_stats.lexicon_tokens({"warmth": ["honest", "kind", "nice"]},
                                     ["honest", " Kind", "x", " honest"])
  assert found == {"warmth": {"honest": [0, 3], "kind": [1]}}
  overlap = vocab_stats.compare_models({"p": np.arange(300.0)}, {"p": -np.arange(300.0)},
                                       np.arange(300))["p"]
  assert overlap["spearman"] == -1 and overlap["top_100_overlap"] == 0


# A planted model: the answer is the last token (the template writes nothing after it), every
# layer's output projections are zero (the residual stream is the embedding), and the score head
# reads one direction that only the planted category's tokens carry.
EMPTY_SUFFIX_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}"
    "{% if m['role'] == 'user' %}<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
SPECIALS = ["<pad>", "<unk>", "<|user|>", "<|assistant|>", "<|end|>"]


def _planted_model(folder, favoured: list[str], others: list[str]):
  import tokenizers  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  words = SPECIALS + favoured + others + [f"filler{i}" for i in range(40)]
  backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(
      {w: i for i, w in enumerate(words)}, unk_token="<unk>"))
  backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  hf = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>",
                                            unk_token="<unk>",
                                            additional_special_tokens=SPECIALS[2:])
  hf.chat_template = EMPTY_SUFFIX_TEMPLATE
  hf.save_pretrained(folder)
  config = transformers.LlamaConfig(
      vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, num_labels=1, pad_token_id=0)
  torch.manual_seed(0)
  model = transformers.LlamaForSequenceClassification(config).eval()
  direction = torch.zeros(32)
  direction[0] = 1.0
  with torch.no_grad():
    for name, param in model.named_parameters():
      if name.endswith(("o_proj.weight", "down_proj.weight")):
        param.zero_()
    embed = model.model.embed_tokens.weight
    embed.normal_(0, 0.1)
    embed[:, 0] = 0.0
    for i in range(len(SPECIALS), len(SPECIALS) + len(favoured)):
      embed[i, 0] = 1.0
    model.score.weight.copy_(direction[None])
  model.save_pretrained(folder, safe_serialization=True)


def test_planted_category_is_at_the_top_and_the_contrast_says_so(tmp_path):
  lexicons = value_probe.load_lexicons()
  warmth = [w for w in lexicons["warmth"] if w.isalpha()][:25]
  competence = [w for w in lexicons["competence"] if w.isalpha() and w not in warmth][:25]
  _planted_model(tmp_path / "rm", warmth, competence)
  options = engine.ScoringOptions(max_length=256, tokens_per_batch=2048, chunk_size=64,
                                  compilation_cache="")
  result = vocabulary_scan.run(str(tmp_path / "rm"), tmp_path / "scan", options,
                               n_resamples=200, n_permutations=2000)
  for node in result["statistics"]["prompts"].values():
    n = node["n_tokens"]  # 25 + 25 words and 40 fillers
    assert {row["token"] for row in node["top"]} == set(warmth)  # ranks 1 to 25
    assert node["categories"]["warmth"]["n_words"] == 25
    assert node["categories"]["warmth"]["median_percentile"] == pytest.approx(
        100 * (n - 13) / (n - 1))
    assert node["categories"]["competence"]["median_percentile"] < 70
    contrast = node["contrasts"]["communion - agency (warmth - competence)"]
    assert contrast["difference"] > 20 and contrast["ci95"][0] > 0
    assert contrast["p_value"] < 0.01
    assert contrast["mann_whitney"]["rank_biserial"] == 1.0
    assert contrast["mann_whitney"]["p_value"] < 1e-6
  written = json.loads((tmp_path / "scan" / "scan.json").read_text())
  assert written["statistics"] == json.loads(json.dumps(result["statistics"]))
