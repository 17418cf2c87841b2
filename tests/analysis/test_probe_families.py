"""The probe's family comparison: ranks within a lexicon (ties averaged), Welch and the mixed model
equal to scipy's and statsmodels' own calls, and planted families found where planted."""

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats

from socialrm_jax.analysis.studies import probe_families
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import probe


def test_ranks_within_a_lexicon_average_ties_and_rank_the_highest_first():
  rewards = np.array([[0.5, 2.0, 2.0, -1.0, 2.0]])
  # 2.0 three times shares ranks 1, 2, 3 -> 2; then 0.5 is 4th and -1.0 5th.
  assert probe_families.within_lexicon_ranks(rewards).tolist() == [[4.0, 2.0, 2.0, 5.0, 2.0]]
  # A category's median rank is over its own words, ranked among the whole lexicon's.
  table = probe_families.rank_table(
      {"m": rewards}, {"m": "a"}, ["p"], ["positive"],
      {"lex": {"x": np.array([0, 3]), "y": np.array([1, 2, 4])}})
  assert table.set_index("category")["median_rank"].to_dict() == {"x": 4.5, "y": 2.0}


def _hand_table() -> pd.DataFrame:
  rng = np.random.default_rng(7)
  rows = []
  for family, models in (("g", ["g1", "g2", "g3"]), ("l", ["l1", "l2", "l3"])):
    for model in models:
      shift = rng.normal()
      for category in ("agency", "communion"):
        for framing in ("positive", "negative"):
          for prompt in range(4):
            rows.append((model, family, "lex", category, f"{framing}{prompt}", framing,
                         5 + shift + (category == "communion") * (family == "g")
                         + rng.normal()))
  return pd.DataFrame(rows, columns=["model", "family", "lexicon", "category", "prompt",
                                     "framing", "median_rank"])


def test_welch_and_the_mixed_model_equal_the_libraries_own_calls():
  table = _hand_table()
  study = probe_families.analyse(table, n_permutations=1000, seed=0)
  panels = study["lexicons"]["lex"]["panels"]
  assert len(panels) == 4
  for panel in panels:
    cell = table[(table.category == panel["category"]) & (table.framing == panel["framing"])]
    expected = stats.ttest_ind(cell[cell.family == "g"].median_rank,
                               cell[cell.family == "l"].median_rank, equal_var=False)
    assert panel["study"]["t"] == pytest.approx(expected.statistic, rel=1e-12)
    assert panel["study"]["p_value"] == pytest.approx(expected.pvalue, rel=1e-12)
    assert panel["study"]["p_bonferroni"] == pytest.approx(min(1, 4 * expected.pvalue))
    # Over models: each model's mean over the panel's prompts; 3 + 3 models, 20 relabellings.
    means = cell.groupby("model").median_rank.mean()
    assert panel["models"]["difference"] == pytest.approx(
        means[["g1", "g2", "g3"]].mean() - means[["l1", "l2", "l3"]].mean())
    assert panel["models"]["exact"] and panel["models"]["smallest_p"] == pytest.approx(2 / 20)
    exact = stats.permutation_test(
        (means[["g1", "g2", "g3"]].to_numpy(), means[["l1", "l2", "l3"]].to_numpy()),
        lambda x, y, axis: x.mean(axis) - y.mean(axis), permutation_type="independent",
        vectorized=True, n_resamples=1000)
    assert panel["models"]["p_value"] == pytest.approx(exact.pvalue)
  fit = smf.mixedlm("median_rank ~ family * category * framing", table,
                    groups=table["model"]).fit(reml=True)
  mixed = study["lexicons"]["lex"]["mixed_model"]
  assert mixed["formula"] == probe_families.FORMULA and mixed["n_models"] == 6
  assert list(mixed["fixed_effects"]) == list(fit.fe_params.index)
  for name, effect in mixed["fixed_effects"].items():
    assert effect["estimate"] == pytest.approx(fit.fe_params[name], rel=1e-9)
    assert effect["se"] == pytest.approx(fit.bse_fe[name], rel=1e-9)
    assert effect["p_value"] == pytest.approx(fit.pvalues[name], rel=1e-9)
  assert mixed["model_variance"] == pytest.approx(float(fit.cov_re.iloc[0, 0]), rel=1e-9)


def _planted_rewards(n_models: int, shift: float, seed: int):
  """Rewards of two families of `n_models` each on the bundled 54 prompts and 8 + 8 words
  (agency columns 0-7, communion 8-15): word effects shared by every model, independent noise
  per (model, prompt, word), and in family `g` the communion words raised by `shift` under the
  positive prompts only."""
  prompts = probe.load_prompts("superlatives").prompts
  positive = np.array([p.framing == "positive" for p in prompts])
  rng = np.random.default_rng(seed)
  word_effect = rng.normal(size=16)
  models, families = {}, {}
  for family in ("g", "l"):
    for k in range(n_models):
      rewards = word_effect + rng.normal(size=(len(prompts), 16))         # [P, W]
      if family == "g":
        rewards[np.ix_(positive, np.arange(8, 16))] += shift
      models[f"{family}{k}"], families[f"{family}{k}"] = rewards, family
  lexicons = {"bigtwo": {"agency": np.arange(8), "communion": np.arange(8, 16)}}
  return probe_families.rank_table(models, families, [p.id for p in prompts],
                                   [p.framing for p in prompts], lexicons)


def test_planted_families_are_found_in_the_planted_framing_and_nowhere_else():
  study = probe_families.analyse(_planted_rewards(5, shift=1.0, seed=0), n_permutations=10_000,
                                 seed=0)
  panels = {(p["category"], p["framing"]): p for p in study["lexicons"]["bigtwo"]["panels"]}
  # Ranks are within the lexicon: communion raised is agency lowered, so the positive framing's
  # two panels move together, in opposite directions; the negative framing's stay.
  planted = {("communion", "positive"), ("agency", "positive")}
  for key, panel in panels.items():
    for reading in ("study", "models"):
      assert probe_families.found(panel, reading) == (key in planted), (key, reading, panel)
  assert panels[("communion", "positive")]["study"]["difference"] < 0  # g ranks it higher
  assert panels[("agency", "positive")]["study"]["difference"] > 0
  # 5 + 5 models: 252 relabellings, every one counted; the smallest p, 2/252, x 4 panels < 0.05.
  assert panels[("communion", "positive")]["models"]["exact"]
  assert panels[("communion", "positive")]["models"]["p_value"] == pytest.approx(2 / 252)
  effects = study["lexicons"]["bigtwo"]["mixed_model"]["fixed_effects"]
  # The mixed model's three-way term carries the framing-specific shift.
  three_way = "family[T.l]:category[T.communion]:framing[T.positive]"
  assert effects[three_way]["p_value"] < 0.05 and effects[three_way]["estimate"] > 0
  assert effects["family[T.l]"]["p_value"] > 0.05


def test_no_planted_shift_finds_nothing():
  study = probe_families.analyse(_planted_rewards(4, shift=0.0, seed=1), n_permutations=10_000,
                                 seed=0)
  for panel in study["lexicons"]["bigtwo"]["panels"]:
    assert not probe_families.found(panel, "study") and not probe_families.found(panel, "models")


def test_the_family_comparison_needs_two_families():
  table = _hand_table()
  table.loc[table.model == "l3", "family"] = "q"
  with pytest.raises(InputError, match=r"needs two families, got 3 \(g, l, q\)"):
    probe_families.analyse(table, n_permutations=100, seed=0)


def test_the_section_labels_each_reading_with_its_unit():
  study = probe_families.analyse(_hand_table(), n_permutations=100, seed=0)
  text = "\n".join(probe_families.report_section(study))
  for node in (probe_families.STUDY_READING, probe_families.MODEL_LEVEL,
               probe_families.MIXED_MODEL):
    assert node["unit"] in text and node["assumes"] in text
  assert "| agency | positive |" in text and "`family[T.l]`" in text
