"""A reward does not depend on which batch, row or row length its item was scored in."""

import numpy as np
import pytest

from socialrm_jax.base import tables
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import engine
from tests.helpers import scoring_fixtures as fx

# Different batch compositions: rows of other lengths, other row counts, other shard cuts, and
# the items in reverse order (so every item shares its rows with other neighbours).
SETTINGS = [
    dict(max_length=256, tokens_per_batch=512, chunk_size=4, smallest_bucket=64),
    dict(max_length=512, tokens_per_batch=4096, chunk_size=16, smallest_bucket=128),
    dict(max_length=256, tokens_per_batch=256, chunk_size=1, smallest_bucket=256),
]


@pytest.mark.parametrize("head", ["score", "lm"])
def test_rewards_are_invariant_to_batch_composition_and_row_length(tmp_path, head):
  fx.make_llama(tmp_path / "model", head=head)
  model = load_reward_model(tmp_path / "model")
  items = fx.all_items()
  runs = []
  for i, settings in enumerate(SETTINGS):
    ordered = items[::-1] if i % 2 else items
    out = tmp_path / f"scores{i}"
    engine.score_items(model, ordered, out, options=engine.ScoringOptions(**settings))
    runs.append({k: r["reward"] for k, r in fx.scores_by_key(tables.read_rows(out, "scores")).items()})
  for other in runs[1:]:
    assert other.keys() == runs[0].keys()
    assert fx.max_abs_diff(runs[0], other) <= 1e-5
  assert np.std(list(runs[0].values())) > 0.01  # Not vacuous: rewards differ between candidates.
