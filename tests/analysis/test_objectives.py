"""A score head with several outputs (a multi-objective reward model): the whole vector is kept in
`rewards`, `--objective` / `--objective_weights` reduce it to `reward` as asked (recorded in the
manifest), and the metrics break accuracy down per objective."""

import dataclasses
import json

import numpy as np
import pytest

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import engine
from tests.helpers import scoring_fixtures as fx


TOLERANCE = 1e-4
NUM_OBJECTIVES = 3
OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=512, chunk_size=4,
                                smallest_bucket=64)


@pytest.fixture(scope="module")
def three_output_rm(tmp_path_factory):
  folder = tmp_path_factory.mktemp("rm3")
  torch_model, tokenizer = fx.make_llama(folder, head="score", num_labels=NUM_OBJECTIVES)
  return folder, torch_model, tokenizer


def torch_vectors(model, tokenizer, items) -> dict[tuple[str, int], np.ndarray]:
  import torch
  out = {}
  with torch.no_grad():
    for item in items:
      for c, ids in enumerate(fx.reference_sequences(tokenizer, item)[0]):
        out[(item["item_id"], c)] = model(torch.tensor([ids])).logits[0].double().numpy()  # [3]
  return out


@pytest.mark.parametrize("objective, weights", [(None, ()), (2, ()), (None, (0.5, -1.0, 2.0))])
def test_the_vector_is_kept_and_reduced_as_asked(three_output_rm, tmp_path, objective, weights):
  folder, torch_model, tokenizer = three_output_rm
  items = fx.all_items()
  options = dataclasses.replace(OPTIONS, objective=objective, objective_weights=weights)
  run = engine.score_items(load_reward_model(folder), items, tmp_path, options=options)
  got = fx.scores_by_key(tables.read_rows(tmp_path, "scores"))
  expected = torch_vectors(torch_model, tokenizer, items)
  for key, vector in expected.items():
    np.testing.assert_allclose(got[key]["rewards"], vector, atol=TOLERANCE)
    scalar = vector @ np.asarray(weights) if weights else vector[objective or 0]
    assert got[key]["reward"] == pytest.approx(scalar, abs=TOLERANCE)
  assert np.std([v[2] - v[0] for v in expected.values()]) > 0.05  # the outputs differ
  settings = json.loads((tmp_path / "manifest.json").read_text())["settings"]
  assert settings["objective"] == objective and settings["objective_weights"] == list(weights)
  assert run["objective"] == objective and run["objective_weights"] == list(weights)


def test_objectives_the_head_cannot_give_are_refused(three_output_rm, tmp_path):
  folder, _, _ = three_output_rm
  model = load_reward_model(folder)
  for options, message in (
      (dataclasses.replace(OPTIONS, objective=3), r"--objective=3 is out of range: the score head "
                                                   r"has 3 output\(s\)"),
      (dataclasses.replace(OPTIONS, objective_weights=(1.0, 2.0)), "2 weights, but the score "
                                                                   "head has 3"),
      (dataclasses.replace(OPTIONS, objective=1, objective_weights=(1.0, 2.0, 3.0)),
       "not both"),
      (dataclasses.replace(OPTIONS, objective_weights=("1", "x", "2")), "must be numbers"),
  ):
    with pytest.raises(InputError, match=message):
      engine.score_items(model, fx.bbq_items(), tmp_path / "never", options=options)
  assert not (tmp_path / "never" / "manifest.json").exists()


def test_metrics_break_accuracy_down_per_objective(three_output_rm, tmp_path):
  from socialrm_jax.analysis import evaluate, runner
  from socialrm_jax.orchestrators import convert, audit
  folder, _, _ = three_output_rm
  converted = tmp_path / "converted"
  convert.write(convert.convert_all(audit.BUNDLED_DATA, "bbq,crows_pairs"), converted)
  items = engine.select_items(tables.read_rows(converted, "items"), ["bbq", "crows_pairs"])
  options = dataclasses.replace(OPTIONS, max_length=512, tokens_per_batch=4096, chunk_size=512,
                                objective=2)
  engine.score_items(load_reward_model(folder), items, tmp_path / "scores", options=options)
  models = runner.evaluate_all(str(converted), [str(tmp_path / "scores")], str(tmp_path / "report"),
                               ["rm3"], evaluate.Options(n_resamples=50))
  per_objective = models["rm3"]["objectives"]
  assert sorted(per_objective) == ["0", "1", "2"]
  # Each objective's accuracy, by hand from the vectors: gold pairs won by output j (ties 1/2).
  vectors = {(r["item_id"], int(r["candidate"])): r["rewards"]
             for r in tables.read_rows(tmp_path / "scores", "scores")}
  pairs = [p for p in tables.read_rows(converted, "pairs") if p["dataset"] == "bbq"]
  for j in range(NUM_OBJECTIVES):
    chosen = np.asarray([vectors[(p["item_id"], p["chosen_index"])][j] for p in pairs])
    rejected = np.asarray([vectors[(p["item_id"], p["rejected_index"])][j] for p in pairs])
    by_hand = np.mean((chosen > rejected) + 0.5 * (chosen == rejected))
    assert per_objective[str(j)]["datasets"]["bbq"]["accuracy"] == pytest.approx(by_hand)
    assert per_objective[str(j)]["datasets"]["crows_pairs"]["stereotype_rate"] is not None
  # The scalar the run kept is objective 2, so the main metrics are objective 2's.
  assert models["rm3"]["domains"]["bias"]["accuracy"] == per_objective["2"]["domains"]["bias"][
      "accuracy"]
  assert models["rm3"]["domains"]["bias"]["ci95"] == per_objective["2"]["domains"]["bias"]["ci95"]
  report = (tmp_path / "report" / "report.md").read_text()
  assert "## Per objective" in report and "| bias | " in report and "objective 2" in report


def test_reward_vectors_are_read_from_json_lines_and_checked(tmp_path):
  from socialrm_jax.analysis.tables import reward_tables
  rows = [{"item_id": "a", "candidate": 0, "reward": 1.0, "rewards": [1.0, 2.0]},
          {"item_id": "a", "candidate": 1, "reward": 0.5, "rewards": [0.5, 3.0]}]
  tables.write_rows(tmp_path / "ok" / "scores.jsonl", rows)
  np.testing.assert_array_equal(reward_tables.read_scores(tmp_path / "ok").rewards, [[1, 2], [0.5, 3]])
  tables.write_rows(tmp_path / "scalar" / "scores.jsonl", [
      {k: v for k, v in row.items() if k != "rewards"} for row in rows])
  assert reward_tables.read_scores(tmp_path / "scalar").rewards is None
  rows[1]["rewards"] = [0.5]
  tables.write_rows(tmp_path / "bad" / "scores.jsonl", rows)
  with pytest.raises(InputError, match=r"scores.jsonl, row 2: rewards has 1 values here but 2"):
    reward_tables.read_scores(tmp_path / "bad")
