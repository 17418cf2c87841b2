"""Pairs longer than --max_length (`--truncation`, `pair_batches.fit_pairs`): 64 HH-RLHF-like
transcripts, two of whose prompts are long, train with TRL's default (the two dropped, counted in
the run's first lines and its manifest), with the prompt cut from the left (all 64 train, the
cuts counted), or are refused naming the first long pair."""

from __future__ import annotations

import json

import pytest

from socialrm_jax.base import settings
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import train
from socialrm_jax.scoring import item_tokens
from socialrm_jax.training import pair_batches
from tests.helpers.preference_fixtures import WORDS
from tests.helpers.scoring_fixtures import make_llama

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAIRS = 64
LONG = (11, 40)  # rows whose prompt alone is over MAX_LENGTH; the converter's ids count from 1
LONG_IDS = tuple(f"hh/{i + 1}:0>1" for i in LONG)
MAX_LENGTH = 128


def write_hh_pairs(path):
  """HH-RLHF's layout: each response a whole transcript, the human's turn the prompt."""
  rows = []
  for i in range(PAIRS):
    w, v = WORDS[i % len(WORDS)], WORDS[(3 * i) % len(WORDS)]
    question = f"Tell me about the {w} and the {v}, story {i}."
    if i in LONG:
      question += " " + " ".join(f"The {WORDS[k % len(WORDS)]} came back." for k in range(60))
    rows.append({"chosen": f"\n\nHuman: {question}\n\nAssistant: Of course! The {w} is great.",
                 "rejected": f"\n\nHuman: {question}\n\nAssistant: Just order a pizza, {v}."})
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  return path


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  root = tmp_path_factory.mktemp("long_pairs")
  make_llama(root / "base", head="lm", seed=0)
  return root / "base", write_hh_pairs(root / "hh.jsonl")


def config(base_folder, data, out, **overrides):
  return settings.from_config(train.TrainConfig, dict(
      model=str(base_folder), data=(f"preference:{data}:name=hh",), output_dir=str(out),
      max_steps=2, batch_size=8, learning_rate=1e-3, eval_fraction=0.0, log_every=1,
      checkpoint_every=0, max_length=MAX_LENGTH, **overrides))


def manifest(out):
  return json.loads((out / train.MANIFEST_FILE).read_text())


def test_the_long_pairs_are_over_max_length_and_the_others_within(base):
  folder, data = base
  pairs = train.load_pairs((f"preference:{data}:name=hh",), None, "data")
  templater = item_tokens.Templater(item_tokens.load_tokenizer(str(folder)), is_causal=True,
                                    max_length=10**6)
  longest = {p.pair_id: max(len(s) for s in item.sequences)
             for p, item in zip(pairs, pair_batches.encode_pairs(templater, pairs))}
  assert sorted(k for k, n in longest.items() if n > MAX_LENGTH) == sorted(LONG_IDS)


def test_by_default_the_long_pairs_are_dropped_and_counted(base, tmp_path, capsys):
  folder, data = base
  out = tmp_path / "run"
  train.run(config(folder, data, out))
  said = capsys.readouterr().out
  assert (f"pairs over --max_length={MAX_LENGTH} (--truncation=drop): 2 of 64 training pairs "
          f"dropped (first {LONG_IDS[0]!r})") in said
  record = manifest(out)["data"]
  assert record["train_pairs"] == PAIRS - 2
  assert record["long_pairs"] == {
      "max_length": MAX_LENGTH, "truncation": "drop",
      "train": {"dropped": 2, "prompt_cut": 0, "first_dropped": LONG_IDS[0],
                "first_prompt_cut": None},
      "eval": {"dropped": 0, "prompt_cut": 0, "first_dropped": None, "first_prompt_cut": None}}
  assert json.loads((out / train.SPLIT_FILE).read_text())["train_pairs"] == PAIRS - 2
  assert (out / train.MODEL_DIR / "config.json").exists()


def test_left_truncation_trains_on_every_pair_and_counts_the_cut_prompts(base, tmp_path, capsys):
  folder, data = base
  out = tmp_path / "run"
  train.run(config(folder, data, out, truncation="left"))
  said = capsys.readouterr().out
  assert (f"pairs over --max_length={MAX_LENGTH} (--truncation=left): 2 training pairs' prompts "
          f"cut from the left (first {LONG_IDS[0]!r})") in said
  record = manifest(out)["data"]
  assert record["train_pairs"] == PAIRS
  assert record["long_pairs"]["train"] == {"dropped": 0, "prompt_cut": 2, "first_dropped": None,
                                           "first_prompt_cut": LONG_IDS[0]}
  assert manifest(out)["settings"]["truncation"] == "left"


def test_error_refuses_the_run_naming_the_first_long_pair(base, tmp_path):
  folder, data = base
  with pytest.raises(InputError) as refused:
    train.run(config(folder, data, tmp_path / "run", truncation="error"))
  line = str(refused.value)
  assert "\n" not in line
  # Its rejected transcript is the longer: the pizza reply has more tokens than the other.
  assert line.startswith(f"--data: pair {LONG_IDS[0]!r}: its rejected conversation is ")
  assert line.endswith(f"tokens, over --max_length={MAX_LENGTH} (--truncation=error); "
                       "--truncation=drop leaves such pairs out, --truncation=left cuts their "
                       "prompts from the left")


def test_left_drops_a_pair_whose_responses_alone_are_over(base):
  """A response is never cut: under "left" a pair whose responses cannot fit is dropped, counted."""
  folder, data = base
  pairs = train.load_pairs((f"preference:{data}:name=hh",), None, "data")[:3]
  long_response = pair_batches.Pair("long", pairs[0].prompt, " ".join(["party"] * 300), "No.")
  tokenizer = item_tokens.load_tokenizer(str(folder))
  kept, encoded, long = pair_batches.fit_pairs(tokenizer, [*pairs, long_response],
                                               max_length=MAX_LENGTH, truncation="left")
  assert [p.pair_id for p in kept] == [p.pair_id for p in pairs]
  assert len(encoded.items) == len(encoded.margins) == 3
  assert long == pair_batches.LongPairs(dropped=("long",), prompt_cut=())
  assert all(max(len(s) for s in item.sequences) <= MAX_LENGTH for item in encoded.items)
