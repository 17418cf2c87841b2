"""RewardBench 2's result files (analysis/outputs/rewardbench2_results.py) on items worked by hand:
the model keys from run.json, the subsets' scores, the per-prompt columns with run_v2.py's
per-row result (1/k when the first candidate shares the top with k - 1 others), and where the
files go (tests/datasets/test_preference_rewardbench2.py compares them with the wheel's)."""

import json

from socialrm_jax.analysis.metrics import best_of_n
from socialrm_jax.analysis.outputs import rewardbench2_results as rb2
from tests.helpers.scored_fixtures import scored

ITEMS = [  # item i<p> at position p of the items table
    {"dataset": "rb2", "subset": "Math", "facts": "bon", "rewards": [5.0, 1.0, 5.0]},
    {"dataset": "rb2", "subset": "Focus", "facts": "bon", "rewards": [3.0, 1.0, 2.0, 0.0]},
    {"dataset": "rb2", "subset": "Ties", "facts": "bon", "rewards": [1.0, 2.0]},
    {"dataset": "other", "subset": "Math", "facts": "bon", "rewards": [1.0, 0.0]},
    {"dataset": "rb2", "subset": "Math", "facts": "", "rewards": [1.0, 0.0]},  # not best-of-N
]


def view():
  return scored([{**item, "roles": ["r"] * len(item["rewards"]),
                  "desirability": [1] + [-1] * (len(item["rewards"]) - 1)} for item in ITEMS])


def rows_of(ids):
  return [{"item_id": f"i{p}", "prompt": [{"role": "user", "content": f"q{p}"}],
           "candidates": [f"c{p}.{k}" for k in range(len(item["rewards"]))],
           "attributes": {"id": 100 + p, "num_correct": 1}}
          for p, item in enumerate(ITEMS) if f"i{p}" in ids]


def test_model_facts_from_run_json():
  hub = {"manifest": {"model": {"hub": {"id": "org/rm"}}, "chat_template": {"sha256": "ab"}}}
  assert rb2.model_facts(hub, "rm") == {"model": "org/rm", "model_type": "Seq. Classifier",
                                        "chat_template": "tokenizer"}
  plain = {"manifest": {"model": {}, "chat_template": {"sha256": None}}}
  assert rb2.model_facts(plain, "local")["model"] == "local"
  assert rb2.model_facts(plain, "local")["chat_template"] == "plain"
  assert rb2.model_facts(None, "local")["chat_template"] is None


def test_summary_keeps_the_subsets_with_a_score():
  node = {"subsets": {"Math": {best_of_n.SCORE: 0.25}, "Ties": {best_of_n.SCORE: 0.5},
                      "Empty": {"accuracy": 1.0}}}
  assert rb2.summary_file({"model": "m"}, node) == {"model": "m", "Math": 0.25, "Ties": 0.5}


def test_per_prompt_columns_by_hand():
  facts = {"model": "m", "model_type": rb2.MODEL_TYPE, "chat_template": None}
  columns = rb2.per_prompt_file(facts, view(), "rb2", rows_of)
  assert columns["id"] == ["100", "101", "102"]  # rb2's best-of-N items, in the table's order
  assert columns["subset"] == ["Math", "Focus", "Ties"]
  assert columns["scores"] == [[5.0, 1.0, 5.0], [3.0, 1.0, 2.0, 0.0], [1.0, 2.0]]
  # The first candidate: top with one other (1/2), alone at the top (1), below the top (0).
  assert columns["results"] == [0.5, 1.0, 0.0]
  assert columns["num_correct"] == [1, 1, 1]
  assert columns["text"][2] == [[{"role": "user", "content": "q2"},
                                 {"role": "assistant", "content": f"c2.{k}"}] for k in range(2)]
  assert {k: columns[k] for k in facts} == facts


def test_write_puts_both_files_under_the_models_hub_id(tmp_path):
  metrics = {"datasets": {"rb2": {best_of_n.SCORE: 0.5, "subsets": {"Math": {best_of_n.SCORE:
                                                                               0.5}}},
                          "other": {"accuracy": 1.0}}}
  run_json = {"manifest": {"model": {"hub": {"id": "org/rm"}}}}
  written = rb2.write(tmp_path, "rm", view(), metrics, run_json, rows_of)
  folder = tmp_path / "rewardbench2" / "rb2"
  assert written == [folder / "eval-set" / "org" / "rm.json",
                     folder / "eval-set-scores" / "org" / "rm.json"]
  summary = {"chat_template": None, "model": "org/rm", "model_type": rb2.MODEL_TYPE, "Math": 0.5}
  # save_to_hub's serialisation: indented by 4, keys sorted.
  assert written[0].read_text() == json.dumps(summary, indent=4, sort_keys=True)
  assert json.loads(written[1].read_text())["results"] == [0.5, 1.0, 0.0]
  assert rb2.write(tmp_path / "none", "rm", view(), {"datasets": {"other": {}}}, None,
                   rows_of) == []
  assert not (tmp_path / "none").exists()
