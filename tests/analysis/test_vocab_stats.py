"""The vocabulary scan's statistics against scipy.stats and hand cases, and a planted model whose
score head favours one lexicon category's tokens."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import wordfreq

from socialrm_jax.analysis.studies import vocab_stats
from socialrm_jax.orchestrators import probe, vocab_scan
from socialrm_jax.scoring import engine


def test_rank_statistics_by_hand():
  # x = 1..5, y = 2 1 4 3 5: sum d^2 = 4, rho = 1 - 6 * 4 / (5 * 24) = 0.8; its p from
  # t = rho sqrt(3 / (1 - rho^2)) = 2.3094 on 3 degrees of freedom.
  result = vocab_stats.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
  assert result["rho"] == pytest.approx(0.8) and result["n"] == 5
  assert result["p_value"] == pytest.approx(0.1041, abs=1e-4)
  assert vocab_stats.spearman([1, 2, 3], [3, 2, 1])["rho"] == pytest.approx(-1)
  assert math.isnan(vocab_stats.spearman([1, 2, 3], [2, 2, 2])["rho"])
  # 5 concordant pairs, 1 discordant: tau = 4/6.
  assert vocab_stats.kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
  # Ties: x = 1 1 2 3, y = 1 2 2 3: 4 concordant, none discordant, one pair tied in x only and
  # one in y only: tau-b = 4 / sqrt(5 * 5).
  assert vocab_stats.kendall_tau([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8)


def test_mann_whitney_by_hand():
  # Every x above every y: U = n1 n2 = 4, rank-biserial +1; mean 2, variance 4 * 5 / 12, so
  # z = (2 - 0.5) / sqrt(5/3) with the continuity correction.
  result = vocab_stats.mann_whitney([3, 4], [1, 2])
  assert result["u"] == 4 and result["rank_biserial"] == 1
  z = 1.5 / math.sqrt(5 / 3)
  assert result["p_value"] == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-9)
  assert vocab_stats.mann_whitney([1, 2], [3, 4])["rank_biserial"] == -1


def test_ranks_words_and_tails_by_hand():
  # Ranks: highest first, ties by token id; percentiles 100 .. 0.
  rank, percentile = vocab_stats.rank_and_percentile(np.array([1.0, 3.0, 3.0, 0.0]),
                                                     np.array([10, 11, 12, 13]))
  assert rank.tolist() == [3, 1, 2, 4]
  np.testing.assert_allclose(percentile, [100 / 3, 100, 200 / 3, 0])
  # Words found as written, capitalised, with or without a leading space.
  found = vocab_stats.lexicon_tokens({"warmth": ["honest", "kind", "nice"]},
                                     ["honest", " Kind", "x", " honest"])
  assert found == {"warmth": {"honest": [0, 3], "kind": [1]}}
  # A token is a word when, less one leading space, it is letters that wordfreq knows.
  texts = [" the", "the", "  the", "Ich", "xqzvw", "12", "don't", " Monteneg"]
  zipf = vocab_stats.zipf_frequencies(texts)
  assert zipf[0] == zipf[1] == wordfreq.zipf_frequency("the", "en") == pytest.approx(7.73)
  assert np.isnan(zipf[[2, 4, 5, 6, 7]]).all() and zipf[3] > 0
  # Tails of 6 tokens: rewards 5..0 best first; the top 100 is the whole list here.
  rewards = np.array([5.0, 4, 3, 2, 1, 0])
  order = np.arange(6)
  tails = vocab_stats.tail_summary(rewards, order, np.array([7, np.nan, 5, 3, np.nan, np.nan]),
                                   {"warmth": {0, 5}, "competence": set()})
  top = tails["top_6"]
  assert top["spread"] == 5 and top["spread_sd"] == pytest.approx(5 / rewards.std())
  assert top["word_share"] == 0.5 and top["median_zipf"] == 5.0
  assert top["lexicon_tokens"] == {"warmth": 2, "competence": 0}


def test_agreement_within_the_tails_by_hand():
  a = np.array([5.0, 4, 3, 2, 1, 0])
  b = np.array([5.0, 3, 4, 0, 1, 2])
  tails = vocab_stats._tail_agreement(a, b, 2)  # pylint: disable=protected-access
  # Top 2: {0, 1} and {0, 2}; on their union a = 5 4 3, b = 5 3 4: 2 concordant, 1 discordant.
  assert tails["top_overlap"] == 0.5 and tails["top_tau_b"] == pytest.approx(1 / 3)
  # Bottom 2: {4, 5} and {3, 4}; on their union a = 2 1 0, b = 0 1 2: reversed.
  assert tails["bottom_overlap"] == 0.5 and tails["bottom_tau_b"] == pytest.approx(-1)
  node = vocab_stats.agreement(*vocab_stats.align_scans({
      "m1": ({"p": np.arange(300.0)}, np.arange(300), [f"t{i}" for i in range(300)]),
      "m2": ({"p": -np.arange(300.0)}, np.arange(300), [f"t{i}" for i in range(300)])}))
  pair = node["pairs"][0]
  assert node["unit"] == "token" and node["n"] == 300
  assert pair["spearman"] == pytest.approx(-1) and pair["tails"]["100"]["top_overlap"] == 0


def test_scans_of_other_tokenizers_are_aligned_by_word():
  first = ({"p": np.array([1.0, 3.0, 9.0, 2.0])}, np.arange(4), [" love", "Love", "12", " hate"])
  second = ({"p": np.array([4.0, 5.0, 6.0])}, np.arange(3), ["love", " war", "hate"])
  unit, keys, rewards = vocab_stats.align_scans({"a": first, "b": second})
  assert unit == "word" and keys == ["hate", "love"]
  np.testing.assert_allclose(rewards["a"]["p"], [2.0, 2.0])  # love: the mean of its two tokens
  np.testing.assert_allclose(rewards["b"]["p"], [6.0, 4.0])


def test_family_contrast_by_hand():
  # Four models a family, every first-family value above every second's: of the C(8, 4) = 70
  # splits only this one and its mirror are as extreme: p = 2/70, the smallest possible.
  differences = {f"m{i}": {"p": {"c": v}} for i, v in enumerate([10, 11, 12, 13, 0, 1, 2, 3])}
  families = {f"m{i}": "llama" if i < 4 else "gemma" for i in range(8)}
  (row,) = vocab_stats.family_contrasts(differences, families, n_permutations=1000, seed=0)
  assert row["families"] == ["llama", "gemma"] and row["difference"] == 10
  assert row["p_value"] == pytest.approx(2 / 70) and row["smallest_p"] == pytest.approx(2 / 70)


# A planted model: the answer is the last token (the template writes nothing after it), every
# layer's output projections are zero (the residual stream is the embedding), and the score head
# reads one direction, which only the planted tokens carry, each with its own weight.
EMPTY_SUFFIX_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}"
    "{% if m['role'] == 'user' %}<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
SPECIALS = ["<pad>", "<unk>", "<|user|>", "<|assistant|>", "<|end|>"]


def _planted_model(folder, planted: dict[str, float], others: list[str], seed: int = 0,
                   fillers: int = 40):
  import tokenizers  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  words = SPECIALS + list(planted) + others + [f"filler{i}" for i in range(fillers)]
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
  torch.manual_seed(seed)
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
    for i, weight in enumerate(planted.values(), start=len(SPECIALS)):
      embed[i, 0] = weight
    model.score.weight.copy_(direction[None])
  model.save_pretrained(folder, safe_serialization=True)


def test_planted_category_is_at_the_top_and_the_contrast_says_so(tmp_path):
  lexicons = probe.load_lexicons()
  warmth = [w for w in lexicons["warmth"] if w.isalpha()][:25]
  competence = [w for w in lexicons["competence"] if w.isalpha() and w not in warmth][:25]
  _planted_model(tmp_path / "rm", dict.fromkeys(warmth, 1.0), competence)
  options = engine.ScoringOptions(max_length=256, tokens_per_batch=2048, chunk_size=64,
                                  compilation_cache="")
  result = vocab_scan.run(str(tmp_path / "rm"), tmp_path / "scan", options,
                          vocab_scan.ScanOptions(n_resamples=200, n_permutations=2000))
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


ONE_PROMPT = vocab_scan.PromptSet("planted", "1", ("What, in one word, is best?",))


def _quick_scan(folder, out, cache, **kwargs) -> dict:
  """A scan of one prompt, few resamples; models of one shape share the compilation cache."""
  options = engine.ScoringOptions(max_length=256, tokens_per_batch=2048, chunk_size=256,
                                  compilation_cache=str(cache))
  return vocab_scan.run(str(folder), out, options,
                        vocab_scan.ScanOptions(n_resamples=50, n_permutations=500),
                        prompts=ONE_PROMPT, **kwargs)


def test_planted_frequency_preference_is_found(tmp_path):
  """Reward rises with the word's Zipf frequency by construction: rho > 0.5, p < 1e-3."""
  ranked = wordfreq.top_n_list("en", 30_000)
  words = [w for w in ranked[::500] if w.isalpha()][:50]
  zipf = {w: wordfreq.zipf_frequency(w, "en") for w in words}
  assert max(zipf.values()) - min(zipf.values()) > 3  # frequent to rare
  _planted_model(tmp_path / "rm", {w: z / 8 for w, z in zipf.items()}, [], fillers=0)
  result = _quick_scan(tmp_path / "rm", tmp_path / "scan", tmp_path / "cache")
  (node,) = result["statistics"]["prompts"].values()
  rho = node["frequency"]["spearman_reward_zipf"]
  assert rho["n"] == len(words) and rho["rho"] > 0.5 and rho["p_value"] < 1e-3
  bins = [b["mean_percentile"] for b in node["frequency"]["zipf_bins"]]
  assert bins[-1] > bins[0]
  assert "Spearman rho(reward, Zipf frequency)" in (tmp_path / "scan" / "vocab_scan.md").read_text()


@pytest.mark.slow
def test_planted_family_contrast_is_found_and_none_within_a_family(tmp_path):
  """Two families of four tiny models each: one rewards warmth words, the other competence words
  (strengths and noise differ by model). The communion - agency contrast, family against family,
  is found (p = 2/70 < 0.05); families mixed across the two, or two models of one, show none."""
  lexicons = probe.load_lexicons()
  warmth = [w for w in lexicons["warmth"] if w.isalpha()][:15]
  competence = [w for w in lexicons["competence"] if w.isalpha() and w not in warmth][:15]
  names, scans = [], []
  for i in range(8):
    family = "warm" if i < 4 else "competent"
    strength = 0.7 + 0.1 * (i % 4)
    planted = dict.fromkeys(warmth if family == "warm" else competence, strength)
    others = competence if family == "warm" else warmth
    names.append(f"{family}{i % 4}")
    _planted_model(tmp_path / "models" / names[-1], planted, others, seed=i, fillers=10)
    if i < 7:
      _quick_scan(tmp_path / "models" / names[-1], tmp_path / "scans" / names[-1],
                  tmp_path / "cache")
      scans.append(str(tmp_path / "scans" / names[-1]))
  # A label per scan: this one (the last model) first, then each --compare_with scan in order.
  families = [name.rstrip("0123") for name in (names[-1], *names[:-1])]
  result = _quick_scan(tmp_path / "models" / names[-1], tmp_path / "scans" / names[-1],
                       tmp_path / "cache", compare_with=scans, families=families)
  # The two families order their tokens differently: compared over the 30 lexicon words.
  assert result["agreement"]["unit"] == "word" and result["agreement"]["n"] == 30
  assert len(result["agreement"]["pairs"]) == 28
  (row,) = [r for r in result["family_contrasts"] if r["contrast"].startswith("communion")]
  assert row["families"] == ["competent", "warm"] and row["difference"] < -20
  assert row["p_value"] == pytest.approx(2 / 70) and row["p_value"] < 0.05
  assert "# Families" in (tmp_path / "scans" / names[-1] / "vocab_scan.md").read_text()
  differences = {name: vocab_scan.vocab_stats.contrast_differences(json.loads(
      (tmp_path / "scans" / name / "scan.json").read_text())["statistics"]) for name in names}
  mixed = {name: "a" if int(name[-1]) < 2 else "b" for name in names}  # two of each family
  for labels in (mixed, {"warm0": "a", "warm1": "b"}):
    chosen = {name: differences[name] for name in labels}
    for r in vocab_stats.family_contrasts(chosen, labels, n_permutations=500, seed=0):
      assert r["p_value"] > 0.05, r
