"""On BBQ items, prefix sharing and packing compute at most 0.35 of the naive pairwise tokens."""

import pathlib

import pytest

import scoring_fixtures as fx
import socialrm_jax
from socialrm_jax.base import records, tables
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.orchestrators import convert
from socialrm_jax.scoring import engine, run_report

BUNDLED = pathlib.Path(socialrm_jax.__file__).parent / "bundled"
NUM_ITEMS = 120
MAX_RATIO = 0.35


@pytest.fixture(scope="module")
def bbq_folder(tmp_path_factory):
  folder = tmp_path_factory.mktemp("bbq")
  converted = convert.convert_all(BUNDLED, ["bbq"])
  convert.write(converted, folder / "converted", "parquet")
  return folder / "converted"


def test_pairs_implied_by_item_labels_match_the_pairs_table(bbq_folder):
  items = tables.read_rows(bbq_folder, "items")
  from_table = run_report.pairs_from_table(bbq_folder)
  for item in items:
    assert sorted(records.item_pairs(item)) == sorted(from_table.get(item["item_id"], []))


@pytest.mark.slow
def test_bbq_tokens_computed_at_most_035_of_naive(bbq_folder, tmp_path):
  fx.make_llama(tmp_path / "rm")
  items = engine.select_items(tables.read_rows(bbq_folder, "items"), ["bbq"], NUM_ITEMS)
  run = engine.score_items(
      load_reward_model(tmp_path / "rm"), items, tmp_path / "scores", items_path=bbq_folder,
      options=engine.ScoringOptions(max_length=512, tokens_per_batch=2048))
  assert run["pairs"] == 2 * NUM_ITEMS
  assert run["tokens_computed"] <= MAX_RATIO * run["tokens_naive"], run
  # Padding included, the model still runs fewer than 0.35 of the naive tokens.
  assert run["token_slots"] <= MAX_RATIO * run["tokens_naive"], run
