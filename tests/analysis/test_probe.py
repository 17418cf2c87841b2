"""The value probe's statistics on hand-computed cases: the bootstrap over words and prompts, the
permutation test, and the lexicons it reads."""

import itertools

import numpy as np
import pytest

from socialrm_jax.analysis.studies import probe as probe_stats
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import probe
from socialrm_jax.sources import lexicons as lexicon_files


def test_permutation_p_value_by_hand():
  # x = {3, 4}, y = {1, 2}: of the 6 splits of {1, 2, 3, 4} into two pairs, the differences of
  # means are 2, 1, 0, 0, -1, -2. P(T >= 2) = 1/6, P(T <= 2) = 1, two-sided p = 2 * 1/6.
  p = probe_stats.permutation_p_value(np.array([3.0, 4.0]), np.array([1.0, 2.0]), 100,
                                 np.random.default_rng(0))
  assert p == pytest.approx(1 / 3)
  # x = {1, 2, 3}, y = {4} (one value: the pooled orders are permuted, 24 of them): the 4
  # splits give -2, -2/3, 2/3, 2; the observed -2 is the lowest: p = 2 * 1/4.
  p = probe_stats.permutation_p_value(np.array([1.0, 2.0, 3.0]), np.array([4.0]), 100,
                                 np.random.default_rng(0))
  assert p == pytest.approx(0.5)
  # More splits (C(16, 8) = 12,870) than permutations: 200 random ones, the observed split
  # counted once more. Every x above every y: only the observed split (and its mirror, on the
  # other side) is as extreme, so p = 2 (0 + 1) / (200 + 1) unless a draw repeats it.
  x, y = np.arange(10.0, 18.0), np.arange(8.0)
  p = probe_stats.permutation_p_value(x, y, 200, np.random.default_rng(0))
  assert p == pytest.approx(2 / 201)


def test_bootstrap_over_words_and_prompts_has_the_hand_computed_distribution():
  # Two prompts and two words, rewards R = [[0, 1], [2, 4]]. A resample draws prompt counts
  # (2,0), (1,1), (0,2) with probabilities 1/4, 1/2, 1/4, and word counts likewise,
  # independently; its mean is a.R.b / 4.
  rewards = np.array([[0.0, 1.0], [2.0, 4.0]])
  counts = [(np.array(c), p) for c, p in (((2, 0), .25), ((1, 1), .5), ((0, 2), .25))]
  exact: dict[float, float] = {}
  for (a, pa), (b, pb) in itertools.product(counts, counts):
    mean = float(a @ rewards @ b) / 4
    exact[mean] = exact.get(mean, 0.0) + pa * pb
  n = 40_000
  means = probe_stats.bootstrap_means(rewards, {"c": np.array([0, 1])}, n,
                                      np.random.default_rng(0))
  assert means["c"][0] == pytest.approx(7 / 4)  # row 0: the data's own mean
  got = {m: np.mean(np.isclose(means["c"][1:], m)) for m in exact}
  assert sum(got.values()) == pytest.approx(1.0)
  for m, p in exact.items():
    assert got[m] == pytest.approx(p, abs=0.01), m
  # Its 95% interval: the extremes here (each has probability 1/16 > 2.5%).
  assert probe_stats.interval(means["c"][1:]) == [0.0, 4.0]


def test_categories_share_the_prompt_draw_so_contrasts_get_intervals():
  rng = np.random.default_rng(1)
  rewards = rng.normal(size=(10, 8)) + np.arange(10)[:, None]  # a strong prompt effect
  categories = {"warmth": np.arange(4), "competence": np.arange(4, 8)}
  summary = probe_stats.summarise(rewards, categories, n_resamples=400, n_permutations=300,
                                  seed=0)
  contrast = summary["contrasts"][probe_stats.COMMUNION_AGENCY[0]]
  assert contrast["difference"] == pytest.approx(rewards[:, :4].mean() - rewards[:, 4:].mean())
  # The prompt effect cancels in the difference: its interval is narrower than a category's.
  width = np.diff(contrast["ci95"])[0]
  assert width < 0.6 * np.diff(summary["categories"]["warmth"]["ci95"])[0]
  assert 0 < contrast["p_value"] <= 1
  assert summary["categories"]["warmth"]["n_words"] == 4 and summary["n_prompts"] == 10
  # The same seed gives the same numbers.
  assert probe_stats.summarise(rewards, categories, n_resamples=400, n_permutations=300,
                          seed=0) == summary


def test_mfd_reading_keeps_single_words_of_one_category(tmp_path):
  dic = tmp_path / "mfd.dic"
  dic.write_text("%\n1\tcare.virtue\n2\tcare.vice\n%\nkindness\t1\ngolden rule\t1\nharm\t2\n"
                 "protect\t1\nprotect\t2\n")
  assert lexicon_files.read_mfd(dic) == {"care.virtue": ["kindness"], "care.vice": ["harm"]}
  dic.write_text("%\n1\tcare.virtue\n%\nkindness\t1\nharm\t7\n")
  with pytest.raises(InputError, match=r"mfd.dic, row 5: category '7' is not in the header"):
    lexicon_files.read_mfd(dic)


def test_the_bundled_lexicons_and_the_seeded_sample():
  lexicons = probe.load_lexicons()
  assert list(lexicons) == list(probe.CATEGORIES)
  # Distinct words: competence.txt lists "assertive" and "competent" twice (68 lines).
  assert len(lexicons["warmth"]) == 74 and len(lexicons["competence"]) == 66
  assert "compassion" in lexicons["care.virtue"]
  assert "golden rule" not in lexicons["fairness.virtue"]
  mfd = [w for c in probe.FOUNDATION_CATEGORIES for w in lexicons[c]]
  assert len(mfd) == len(set(mfd))  # no word in two MFD categories
  sample = probe.sample_words(lexicons, 5, seed=0)
  assert sample == probe.sample_words(lexicons, 5, seed=0)
  assert sample != probe.sample_words(lexicons, 5, seed=1)
  assert all(len(words) == 5 and set(words) <= set(lexicons[c]) for c, words in sample.items())
  assert probe.sample_words(lexicons, 0) == lexicons
  items = probe.probe_items(["honest", "kind"])
  assert len(items) == len(probe.PROMPTS) >= 10
  assert items[0]["candidates"] == ["Honest", "Kind"]
