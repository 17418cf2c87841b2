"""`--format=hf`: items and pairs saved with `datasets.Dataset.save_to_disk`, read back by
`datasets.load_from_disk` unchanged, pairs in the columns TRL's RewardTrainer reads.

TRL's contract (trl/trainer/reward_trainer.py, `RewardTrainer._prepare_dataset`): a preference
dataset has `chosen` and `rejected` and, optionally, `prompt`; with a prompt, each example's
`prompt + chosen` and `prompt + rejected` are tokenized, through the chat template when the
example is conversational (`trl.data_utils.is_conversational`: a message list of dicts with
`role` and `content`). So prompt and responses must be lists of messages, and the joined lists
must be whole conversations ending with the assistant's response. TRL is not installed here; the
test checks that contract on the saved columns.
"""

import pathlib
import subprocess
import sys

import datasets
import pytest

from socialrm_jax.base import tables
from tests.helpers.paths import REPO_ROOT

BUNDLED = REPO_ROOT / "socialrm_jax" / "bundled"
TRL_COLUMNS = ("prompt", "chosen", "rejected")


def convert(out, *args):
  proc = subprocess.run([sys.executable, "-m", "socialrm_jax.main.convert", f"--output_dir={out}",
                         *args], capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr
  return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  root = tmp_path_factory.mktemp("export")
  return (convert(root / "hf", f"--data_dir={BUNDLED}", "--format=hf"),
          convert(root / "parquet", f"--data_dir={BUNDLED}", "--format=parquet"))


def is_message_list(value) -> bool:
  """TRL's `is_conversational` test on one column's value."""
  return (isinstance(value, list) and bool(value) and isinstance(value[0], dict)
          and "role" in value[0] and "content" in value[0])


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_pairs_load_with_the_columns_trls_reward_trainer_reads(exported):
  hf, _ = exported
  pairs = datasets.load_from_disk(str(hf / "pairs"))
  assert set(TRL_COLUMNS) <= set(pairs.column_names)
  message = {"role": datasets.Value("string"), "content": datasets.Value("string")}
  for column in TRL_COLUMNS:
    assert pairs.features[column] == datasets.List(message), column
  assert len(pairs) == 1143
  for row in pairs:
    assert all(is_message_list(row[c]) for c in TRL_COLUMNS)
    assert row["prompt"][-1]["role"] == "user"
    for response in ("chosen", "rejected"):
      assert len(row[response]) == 1 and row[response][0]["role"] == "assistant"
      conversation = row["prompt"] + row[response]  # what TRL tokenizes
      assert conversation[-1]["role"] == "assistant" and conversation[:-1] == row["prompt"]
    assert row["chosen"][0]["content"] != row["rejected"][0]["content"]


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_hf_tables_read_back_as_the_parquet_ones(exported):
  hf, parquet = exported
  items = datasets.load_from_disk(str(hf / "items"))
  assert len(items) == 595 and items.column_names == list(tables.read_rows(parquet, "items")[0])
  for prefix in ("items", "pairs"):
    assert tables.read_rows(hf, prefix) == tables.read_rows(parquet, prefix), prefix
  # The reader also takes the dataset folder itself.
  assert tables.read_rows(hf / "pairs", "pairs") == tables.read_rows(parquet, "pairs")
