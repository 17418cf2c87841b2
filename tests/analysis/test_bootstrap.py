"""Bootstrap intervals: seeded and repeatable, containing the estimate, resampling items."""

import numpy as np
import pytest

from socialrm_jax.analysis import accuracy, bootstrap, evaluate, pairs
from socialrm_jax.analysis.reward_tables import Scores



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
