"""RewardBench 2's two result files for a model's scores, in the layout and names its
`scripts/run_v2.py` writes (through `rewardbench.utils.save_to_hub`, which dumps a dict with
`json.dumps(indent=4, sort_keys=True)` to `results/<sub_path><model>.json`):

- `eval-set/<model>.json`: `{"model", "model_type", "chat_template", <subset>: score}`, each
  subset's score as RewardBench 2 computes it (`analysis.best_of_n`: the Ties score for Ties,
  best-of-N accuracy for the rest), the values metrics.json holds.
- `eval-set-scores/<model>.json`: the per-prompt rows as columns (`Dataset.to_dict()` of the
  rerolled dataset): `text` (each candidate as the conversation scored, in RewardBench's custom
  dialogue form: the prompt's messages, then `{"role": "assistant", "content": candidate}`), `scores` (the rewards),
  `results` (`reroll_and_score_dataset`'s per-row result: 1/k when the first candidate shares
  the top reward with k - 1 others, 1 when it alone is top, else 0; Ties rows keep it too, since
  run_v2.py replaces them only in rows whose subset is "ties", which RewardBench 2's "Ties" is
  not), `subset`, `id`, `num_correct`; and the same three model keys.

`model` is the Hub id of a model scored by Hub id (run.json's manifest), else the display name;
a name with an organisation (`org/name`) makes a folder, as RewardBench's does. The files go under
`<output_dir>/rewardbench2/<dataset>/` (one pair per dataset with RewardBench 2 rows), so
`results/` of a leaderboard submission is that folder as it is.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Callable, Collection, Iterable, Mapping

import numpy as np

from socialrm_jax.analysis.metrics import best_of_n
from socialrm_jax.analysis.tables.pairs import Scored
from socialrm_jax.base import tables

FOLDER = "rewardbench2"
SUMMARY, PER_PROMPT = "eval-set", "eval-set-scores"
# RewardBench 2's `model_type` of a sequence classifier (REWARD_MODEL_CONFIG["default_v2"]).
MODEL_TYPE = "Seq. Classifier"
# `chat_template` when the tokenizer's own template formats the conversation, as run_v2.py writes.
TOKENIZER_TEMPLATE = "tokenizer"
PLAIN_FORMAT = "plain"  # no chat template: the scorer's plain format (scoring/item_tokens.py)
ITEM_COLUMNS = ("item_id", "prompt", "candidates", "attributes")


def model_facts(run_json: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
  """`model`, `model_type` and `chat_template` from the run.json beside the scores (None when
  the scores came without one)."""
  manifest = (run_json or {}).get("manifest") or {}
  hub = (manifest.get("model") or {}).get("hub") or {}
  template = manifest.get("chat_template")
  chat_template = None if template is None else (
      TOKENIZER_TEMPLATE if template.get("sha256") else PLAIN_FORMAT)
  return {"model": hub.get("id") or name, "model_type": MODEL_TYPE,
          "chat_template": chat_template}


def _datasets_with_scores(metrics: Mapping[str, Any]) -> list[str]:
  """The datasets whose metrics have RewardBench 2's score (`best_of_n.summary` wrote it)."""
  return [name for name, node in metrics.get("datasets", {}).items()
          if isinstance(node, Mapping) and best_of_n.SCORE in node]


def summary_file(facts: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
  """`eval-set/<model>.json` of one dataset's metrics node."""
  return {**facts, **{subset: n[best_of_n.SCORE] for subset, n in node["subsets"].items()
                      if best_of_n.SCORE in n}}


def per_prompt_file(facts: Mapping[str, Any], scored: Scored, dataset: str,
                    rows_of: Callable[[Collection[str]], Iterable[Mapping[str, Any]]]
                    ) -> dict[str, Any]:
  """`eval-set-scores/<model>.json` of one dataset: its best-of-N items, in the items table's
  order, as columns."""
  index = np.flatnonzero((scored.dataset == dataset) & ~(scored.facts == ""))
  ids = scored.ids_of(index)
  position = {item_id: k for k, item_id in enumerate(ids)}
  texts: dict[int, Mapping[str, Any]] = {}
  for row in rows_of(set(ids)):
    if row["item_id"] in position:
      texts[position[row["item_id"]]] = row
  columns: dict[str, list] = {key: [] for key in
                              ("text", "scores", "results", "subset", "id", "num_correct")}
  for k in np.argsort([scored.item[i] for i in index], kind="stable"):  # the table's order
    row, i = texts[int(k)], int(index[k])
    attributes = row["attributes"]
    columns["text"].append([[*row["prompt"], {"role": "assistant", "content": candidate}]
                            for candidate in row["candidates"]])
    rewards = scored.rewards[i][scored.valid[i]]                                 # [K_i]
    columns["scores"].append([float(r) for r in rewards])
    top = rewards.max()
    columns["results"].append(float(1 / np.sum(rewards == top)) if rewards[0] == top else 0.0)
    columns["subset"].append(str(scored.subset[i]))
    columns["id"].append(str(attributes["id"]))
    columns["num_correct"].append(int(attributes["num_correct"]))
  return {**columns, **facts}


def write(output_dir: str | pathlib.Path, name: str, scored: Scored, metrics: Mapping[str, Any],
          run_json: Mapping[str, Any] | None,
          rows_of: Callable[[Collection[str]], Iterable[Mapping[str, Any]]]
          ) -> list[pathlib.Path]:
  """Writes both files of every dataset with RewardBench 2 scores in `metrics`; returns their
  paths ([] when there is none). `rows_of(ids)`: the items table's rows of those ids."""
  facts = model_facts(run_json, name)
  written = []
  for dataset in _datasets_with_scores(metrics):
    node = metrics["datasets"][dataset]
    folder = pathlib.Path(output_dir) / FOLDER / dataset
    for sub, content in ((SUMMARY, summary_file(facts, node)),
                         (PER_PROMPT, per_prompt_file(facts, scored, dataset, rows_of))):
      path = folder / sub / f"{facts['model']}.json"
      # save_to_hub's own serialisation, so the bytes match a file RewardBench 2 writes.
      tables.atomic_write_bytes(path, json.dumps(content, indent=4, sort_keys=True).encode())
      written.append(path)
  return written
