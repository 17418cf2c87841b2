"""Bootstrap intervals: seeded and repeatable, containing the estimate, resampling items."""

import numpy as np
import pytest

from scipy import stats

from socialrm_jax.analysis import evaluate
from socialrm_jax.analysis.metrics import accuracy
from socialrm_jax.analysis.resampling import bootstrap, estimates
from socialrm_jax.analysis.tables import pairs
from socialrm_jax.analysis.tables.reward_tables import Scores
from socialrm_jax.orchestrators import audit, convert



def make_items(rewards_per_item, subsets=None):
  """Gold items with one +1 candidate (index 0) and the rest -1; a gold pair per -1 candidate."""
  items, pair_rows, ids, candidates, rewards = [], [], [], [], []
  for i, item_rewards in enumerate(rewards_per_item):
    k = len(item_rewards)
    item_id = f"it{i}"
    items.append({"item_id": item_id, "domain": "morality", "dataset": "ethics",
                  "subset": subsets[i] if subsets else "deontology", "context_condition": None,
                  "candidates": [f"c{j}" for j in range(k)], "roles": ["reasonable"] +
                  ["unreasonable"] * (k - 1), "desirability": [1] + [-1] * (k - 1),
                  "attributes": {}})
    pair_rows += [{"item_id": item_id, "chosen_index": 0, "rejected_index": j,
                   "label_source": "gold"} for j in range(1, k)]
    ids += [item_id] * k
    candidates += list(range(k))
    rewards += list(item_rewards)
  scores = Scores.of(np.asarray(ids, dtype=object), np.asarray(candidates),
                     np.asarray(rewards, float), "test")
  return items, pair_rows, scores


def test_same_seed_same_intervals_other_seed_other_intervals():
  rng = np.random.default_rng(1)
  items, pair_rows, scores = make_items(rng.normal(size=(60, 3)).round(1),
                                        subsets=["deontology", "justice"] * 30)
  first, again, other = (
      evaluate.compute_metrics(items, pair_rows, scores, evaluate.Options(seed=s))
      for s in (7, 7, 8))
  assert first == again
  assert first["datasets"]["ethics"]["ci95"] != other["datasets"]["ethics"]["ci95"]
  for node in (first["domains"]["morality"], first["datasets"]["ethics"],
               *first["datasets"]["ethics"]["subsets"].values()):
    low, high = node["ci95"]
    assert low <= node["accuracy"] <= high and low < high
  low, high = first["datasets"]["ethics"]["group_accuracy_ci95"]
  assert low <= first["datasets"]["ethics"]["group_accuracy"] <= high


def test_resamples_items_not_pairs():
  # Item A: 3 gold pairs, all won. Item B: 1 gold pair, lost. Accuracy 3/4.
  items, pair_rows, scores = make_items([[5.0, 1.0, 1.0, 1.0], [0.0, 1.0]])
  scored = pairs.join(items, pair_rows, scores, fields=pairs.no_fields)  # ETHICS: no hooks
  sums = bootstrap.stratified_sums(accuracy.item_columns(scored, np.arange(2)),
                                   {"subset": np.asarray(["deontology"] * 2)}, 4000,
                                   bootstrap.generator(0, "ethics"))
  rows = sums.total("gold_wins") / sums.total("gold_pairs")
  assert rows[0] == 0.75
  # Resampling items gives AA (1), AB or BA (3/4), BB (0), with chances 1/4, 1/2, 1/4.
  # Resampling pairs would also give 1/4 and 1/2, which never occur here.
  values, counts = np.unique(rows[1:], return_counts=True)
  assert list(values) == [0.0, 0.75, 1.0]
  np.testing.assert_allclose(counts / counts.sum(), [0.25, 0.5, 0.25], atol=0.03)


def test_strata_keep_their_size_and_resampled_sums_have_bootstrap_moments():
  rng = np.random.default_rng(0)
  n = 300
  values = rng.integers(0, 3, size=n) / 2.0                  # per-item values in {0, 1/2, 1}
  strata = {"subset": np.asarray(["a"] * 100 + ["b"] * 200)}
  sums = bootstrap.stratified_sums({"v": values, "one": np.ones(n)}, strata, 4000,
                                   np.random.default_rng(3))
  # Every resample draws exactly as many items as each stratum has.
  for subset, size in (("a", 100), ("b", 200)):
    assert np.all(sums.total("one", lambda s, subset=subset: s.subset == subset) == size)
  # The resampled sum of n draws with replacement has mean n * mean(x) and variance n * var(x).
  b = values[100:]
  resampled = sums.total("v", lambda s: s.subset == "b")[1:]
  assert resampled.mean() == pytest.approx(200 * b.mean(), rel=0.01)
  assert resampled.var() == pytest.approx(200 * b.var(), rel=0.1)
  assert sums.total("v")[0] == pytest.approx(values.sum())


def test_sums_made_a_chunk_at_a_time_are_the_sums_of_all_items():
  rng = np.random.default_rng(5)
  n = 500
  columns = {"v": rng.integers(0, 3, size=n) / 2.0, "w": rng.integers(0, 2, size=n) * 1.0}
  strata = {"subset": rng.choice(["a", "b", "c"], size=n), "group": rng.choice(["x", "y"], n)}
  whole = bootstrap.stratified_sums(columns, strata, 200, np.random.default_rng(9))
  cuts = [0, 1, 120, 121, 377, n]
  chunked = bootstrap.stratified_sums_in_chunks(
      [({k: v[a:b] for k, v in columns.items()}, {k: v[a:b] for k, v in strata.items()})
       for a, b in zip(cuts, cuts[1:])], 200, np.random.default_rng(9))
  # The same strata in the same order, the same multinomial draws: the same table.
  assert chunked.strata == whole.strata and chunked.columns == whole.columns
  np.testing.assert_allclose(chunked.table, whole.table, rtol=0, atol=1e-9)


def test_metrics_do_not_depend_on_the_chunk_size(monkeypatch):
  rng = np.random.default_rng(2)
  items, pair_rows, scores = make_items(rng.normal(size=(90, 3)).round(1),
                                        subsets=["deontology", "justice", "virtue"] * 30)
  options = evaluate.Options()
  whole = evaluate.compute_metrics(items, pair_rows, scores, options)
  monkeypatch.setattr(pairs, "CHUNK", 7)
  assert evaluate.compute_metrics(items, pair_rows, scores, options) == whole


def test_metrics_do_not_depend_on_the_pairs_tables_order():
  # Pairs are found per item by binary search: a table not in item order is put in it once.
  rng = np.random.default_rng(3)
  items, pair_rows, scores = make_items(rng.normal(size=(40, 4)).round(1),
                                        subsets=["deontology", "justice"] * 20)
  options = evaluate.Options()
  shuffled = [pair_rows[i] for i in rng.permutation(len(pair_rows))]
  assert evaluate.compute_metrics(items, shuffled, scores, options) == evaluate.compute_metrics(
      items, pair_rows, scores, options)


def test_continuous_values_resample_in_blocks_with_the_same_draws(monkeypatch):
  """Distinct continuous values (U = the items) draw their counts a block of resamples at a time:
  the same sums as drawing them all at once."""
  values = np.random.default_rng(3).standard_normal((500, 2))                  # [U, V]
  rows = [bootstrap.CellRows(values[None], np.ones((1, 500), dtype=np.int64))]
  cells = [bootstrap.Stratum("d", "s", "", "")]
  whole, _ = bootstrap.resample(cells, rows, 40, np.random.default_rng(7))
  monkeypatch.setattr(bootstrap, "_COUNTS_BLOCK", 500 * 3)  # 3 resamples a block
  blocked, _ = bootstrap.resample(cells, rows, 40, np.random.default_rng(7))
  np.testing.assert_allclose(blocked, whole, rtol=1e-12)
  assert whole.shape == (1, 41, 1, 2) and np.abs(whole[:, 1:]).sum() > 0


def cells(*spec):
  """Cells (domain, subset, condition, group) and their item counts from (subset, group, n)."""
  return ([bootstrap.Stratum("d", subset, "", group) for subset, group, _ in spec],
          [n for _, _, n in spec])


def test_small_cells_are_pooled_with_their_neighbours_first():
  strata, items = cells(("a", "", 40), ("b", "x", 5), ("b", "y", 20), ("b", "z", 8),
                        ("c", "", 3))
  pools = bootstrap.design(strata, items, min_stratum_items=30)
  # a stands alone; b's three groups pool (33 items) before anything reaches across subsets;
  # c's 3 items, left alone at the last level, join the pool sharing the most leading fields with
  # them (each shares the domain only) and of those the smallest: b's 33, not a's 40.
  assert sorted(p.cells for p in pools) == [(0,), (1, 2, 3, 4)]
  assert all(p.clusters is None for p in pools)


def test_clusters_are_drawn_whole_within_the_fields_no_cluster_spans():
  # Terms x (both types) and y (one type): the subset varies within x, so terms are drawn within
  # the domain only.
  strata = [bootstrap.Stratum("bias", "inter", "", "x"), bootstrap.Stratum("bias", "intra", "", "x"),
            bootstrap.Stratum("bias", "intra", "", "y")]
  pool, = bootstrap.design(strata, [1, 1, 1], clustered=True)
  assert pool.clusters == ((0, 1), (2,))
  values = np.asarray([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0]])           # (wins, pairs) per cell
  rows = [bootstrap.CellRows(v[None, None], np.ones((1, 1), dtype=np.int64)) for v in values]
  table, draws = bootstrap.resample(strata, rows, 2000, np.random.default_rng(0), clustered=True)
  table, draws = table[0], draws[0]
  assert np.all(draws[0] == 1)
  # Each resample draws two terms: x's two cells share x's draws; the draws add up to 2.
  np.testing.assert_array_equal(draws[:, 0], draws[:, 1])
  np.testing.assert_array_equal(draws[:, 0] + draws[:, 2], 2)
  # A cell's sums are its data's times its term's draws.
  np.testing.assert_allclose(table[:, :, 0], draws * values[:, 0])
  # Terms drawn with replacement, two from two: x twice, once, never with chances 1/4, 1/2, 1/4.
  _, counts = np.unique(draws[1:, 0], return_counts=True)
  np.testing.assert_allclose(counts / counts.sum(), [0.25, 0.5, 0.25], atol=0.03)


def test_a_mean_over_terms_weighs_each_term_by_its_draws():
  strata = [bootstrap.Stratum("bias", "t", "", g) for g in ("x", "y", "z")]
  table = np.asarray([[[1.0], [0.0], [1.0]], [[2.0], [0.0], [0.0]]])      # rows 0 and 1
  draws = np.asarray([[1.0, 1.0, 1.0], [2.0, 1.0, 0.0]])                 # row 1: x, x, y
  sums = bootstrap.StratifiedSums(tuple(strata), ("v",), table, draws)
  np.testing.assert_array_equal(sums.group_weights("group"), draws)
  assert sums.grouped("v", "group")[0] == ["x", "y", "z"]


def test_units_are_the_groups_where_groups_are_drawn_whole():
  # Term x in two cells (3 and 2 items), term y (4 items), a cell of no term (5 items), and a
  # term z with no items of the column.
  strata = (bootstrap.Stratum("bias", "inter", "", "x"), bootstrap.Stratum("bias", "intra", "", "x"),
            bootstrap.Stratum("bias", "intra", "", "y"), bootstrap.Stratum("bias", "intra", "", ""),
            bootstrap.Stratum("bias", "inter", "", "z"))
  table = np.asarray([[[3.0], [2.0], [4.0], [5.0], [0.0]]])               # control_items per cell
  draws = np.ones((1, 5))
  clustered = bootstrap.StratifiedSums(strata, ("control_items",), table, draws, clustered=True)
  assert clustered.units("control_items") == 2 + 5                     # x, y and five items
  assert clustered.units("control_items", lambda s: s.subset == "inter") == 1
  by_items = bootstrap.StratifiedSums(strata, ("control_items",), table, draws)
  assert by_items.units("control_items") == 14


def test_stereosets_control_accuracy_rests_on_its_terms():
  # The bundled StereoSet slice: 120 items in 63 target terms, drawn whole.
  conversion = convert.convert_all(audit.BUNDLED_DATA, "stereoset")
  items = list(conversion.items)
  ids = [item["item_id"] for item in items for _ in item["candidates"]]
  candidates = [k for item in items for k in range(len(item["candidates"]))]
  rewards = np.random.default_rng(0).standard_normal(len(ids))
  options = evaluate.Options(n_resamples=50)
  scored = pairs.join(items, list(conversion.pairs), Scores.of(ids, candidates, rewards, "m"),
                      fields=options.item_fields)
  node = evaluate.metrics_from_scored(scored, options)["datasets"]["stereoset"]
  assert node["verdicts"]["control_accuracy"]["units"] == node["n_terms"] < len(items)


def test_replicates_drawn_at_once_are_each_a_metrics_runs_draws():
  rng = np.random.default_rng(3)
  values = rng.integers(0, 3, size=(1, 50)).astype(np.float64)
  strata = {"subset": np.asarray(["a"] * 35 + ["b"] * 15)}
  one = bootstrap.stratified_sums({"v": values[0]}, strata, 300, np.random.default_rng(9))
  batched = bootstrap.resampled_sums_batched({"v": values}, strata, 300, np.random.default_rng(9))
  np.testing.assert_allclose(batched.table, one.table)


def test_expanded_percentile_levels_by_hand():
  # n = 10: z = sqrt(10 / 9) t_{0.975, 9} = 1.0541 * 2.2622 = 2.3846; Phi(-2.3846) = 0.855%.
  low, high = estimates.percentile_levels(10)
  assert low == pytest.approx(100 * stats.norm.sf(np.sqrt(10 / 9) * stats.t.ppf(0.975, 9)))
  assert low == pytest.approx(0.855, abs=0.001) and high == pytest.approx(100 - low)
  assert estimates.percentile_levels(None) == (2.5, 97.5)
  # Too few units: no interval, the value stays.
  rows = np.linspace(0, 1, 101)
  assert estimates.interval(rows, "none", estimates.MIN_INTERVAL_UNITS - 1)[1] == (
      estimates.Missing(estimates.too_few(estimates.MIN_INTERVAL_UNITS - 1)))
