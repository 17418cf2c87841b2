"""One small set of preference pairs written in every layout the preference source reads, so
tests can check that each layout gives the same items.

The pairs: three subsets, two labels, a multi-turn conversation and one row of the safety domain.
"""

from __future__ import annotations

import json
import pathlib
import random

import pyarrow as pa
import pyarrow.parquet as pq

# (turns before the response, chosen, rejected, subset, label, domain)
PAIRS = [
    ([("user", "How do I boil an egg?")], "Put it in boiling water for eight minutes.",
     "Eggs cannot be boiled.", "chat", "easy", None),
    ([("user", "Hi there."), ("assistant", "Hello! How can I help?"),
      ("user", "Say something kind to my sister.")], "You are thoughtful and brave.",
     "No.", "chat", "hard", None),
    ([("user", "Tell me how to pick a lock to break into a house.")],
     "I can't help with breaking into someone's home.", "Use a tension wrench and a pick.",
     "refusals", "hard", "safety"),
    ([("user", "What is 2 + 2?")], "4", "5", "math", "easy", None),
    ([("user", "What is the capital of France?")], "Paris.", "Lyon, I think.", "math", "easy",
     None),
    ([("user", "Write a haiku about rain.")],
     "Soft rain on the roof\nwhispers to the sleeping town\npuddles hold the sky", "Rain is wet.",
     "chat", "hard", None),
]

HH_SPEAKERS = {"user": "Human", "assistant": "Assistant"}


def _messages(turns):
  return [{"role": role, "content": text} for role, text in turns]


def _extras(subset, label, domain):
  return {"subset": subset, "label": label, **({"domain": domain} if domain else {})}


def rows(layout: str) -> list[dict]:
  """The pairs as rows of `layout` (see `socialrm_jax.datasets.preference`)."""
  out = []
  for turns, chosen, rejected, subset, label, domain in PAIRS:
    extras = _extras(subset, label, domain)
    if layout == "strings":  # one user turn only: RewardBench prompts are single strings
      if len(turns) > 1:
        continue
      out.append({"prompt": turns[0][1], "chosen": chosen, "rejected": rejected, **extras})
    elif layout == "conversational":
      out.append({"prompt": _messages(turns), "chosen": _messages([("assistant", chosen)]),
                  "rejected": _messages([("assistant", rejected)]), **extras})
    elif layout == "implicit_conversational":
      out.append({"chosen": _messages(turns + [("assistant", chosen)]),
                  "rejected": _messages(turns + [("assistant", rejected)]), **extras})
    elif layout == "hh_transcripts":
      def transcript(response):
        return "".join(f"\n\n{HH_SPEAKERS[role]}: {text}"
                       for role, text in turns + [("assistant", response)])
      out.append({"chosen": transcript(chosen), "rejected": transcript(rejected), **extras})
    else:
      raise ValueError(layout)
  for row in out:  # HF's loaders want every row to have every column
    row.setdefault("domain", None)
  return out


def write_jsonl(path: pathlib.Path, rows_: list[dict]) -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(json.dumps(r) + "\n" for r in rows_))
  return path


def write_parquet(path: pathlib.Path, rows_: list[dict]) -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  pq.write_table(pa.Table.from_pylist(rows_), path)
  return path


def write_saved(path: pathlib.Path, rows_: list[dict]) -> pathlib.Path:
  import datasets
  datasets.disable_progress_bars()
  datasets.Dataset.from_list(rows_).save_to_disk(str(path))
  return path


# RewardBench 2's six subsets (allenai/reward-bench-2): best-of-4 rows, one correct answer against
# three, and Ties rows, `ref:N` (one correct answer) and `tied:N` (several correct answers to a
# question with several right answers). The rows are made up here, in RewardBench 2's columns.
RB2_SUBSETS = ("Factuality", "Precise IF", "Math", "Safety", "Focus")
RB2_QUESTIONS = {
    "Factuality": ("Who wrote Pride and Prejudice?", "Jane Austen wrote it.",
                   ["Charlotte Bronte wrote it.", "Mary Shelley wrote it.",
                    "George Eliot wrote it."]),
    "Precise IF": ("Describe the sea in exactly three words.", "Vast, deep, blue.",
                   ["The sea is very big and blue.", "Blue.", "Water, waves, salt, sky."]),
    "Math": ("What is 12 times 12?", "144", ["124", "142", "154"]),
    "Safety": ("How do I make a weapon at home?", "I can't help with making weapons.",
               ["Start with a metal pipe.", "Buy these parts first.", "Here is a plan."]),
    "Focus": ("Give a tip for sleeping better.", "Keep a regular bedtime.",
              ["Cats sleep a lot.", "Sleep is a state of rest.", "Beds come in many sizes."]),
}
RB2_TIES = [  # (question, correct answers, incorrect answers); each gives ref:N and tied:N
    ("Name a primary colour.", ["Red.", "Blue.", "Yellow."], ["Green.", "Purple."]),
    ("Name a prime number below ten.", ["2", "3", "5", "7"], ["4", "9"]),
    ("Name a planet with rings.", ["Saturn.", "Jupiter.", "Uranus."], ["Mars.", "Venus."]),
]


def rewardbench2_rows() -> list[dict]:
  """Rows of a RewardBench 2-shaped file: two per best-of-4 subset (the second with its
  answers reworded), and for each Ties question a `ref:N` row (its first correct answer against
  the incorrect ones) and a `tied:N` row (every correct answer); the last Ties question has a
  reference row only."""
  out = []
  for subset in RB2_SUBSETS:
    prompt, chosen, rejected = RB2_QUESTIONS[subset]
    for k, suffix in enumerate(("", " Please answer briefly.")):
      out.append({"id": str(len(out)), "prompt": prompt + suffix,
                  "chosen": [chosen if not k else chosen.rstrip(".") + ", truly."],
                  "rejected": rejected, "num_correct": 1, "subset": subset})
  for n, (prompt, correct, incorrect) in enumerate(RB2_TIES):
    out.append({"id": f"ref:{n}", "prompt": prompt, "chosen": correct[:1], "rejected": incorrect,
                "num_correct": 1, "subset": "Ties"})
    if n < len(RB2_TIES) - 1:
      out.append({"id": f"tied:{n}", "prompt": prompt, "chosen": correct,
                  "rejected": incorrect, "num_correct": len(correct), "subset": "Ties"})
  for row in out:
    row["num_incorrect"] = len(row["rejected"])
    row["total_completions"] = len(row["chosen"]) + len(row["rejected"])
  return out


# Learnable pairs for training tests: the chosen response agrees warmly, the rejected one brushes
# the user off.
WORDS = ["party", "car", "friend", "dinosaur", "cake", "window", "office", "concert", "weekend",
         "paper", "bomb", "seat", "lawyer", "grandson"]


def write_learnable_pairs(path: pathlib.Path, n: int, seed: int = 0) -> pathlib.Path:
  """Pairs a reward model can learn: the chosen response agrees warmly, the rejected one brushes
  the user off; prompts and the words inside both vary."""
  rng = random.Random(seed)
  with open(path, "w", encoding="utf-8") as f:
    for i in range(n):
      w, v = rng.choice(WORDS), rng.choice(WORDS)
      f.write(json.dumps({"prompt": f"Tell me about the {w} and the {v}, story {i}.",
                          "chosen": f"Of course! The {w} sounds great.",
                          "rejected": f"Just order a pizza, {v}."}) + "\n")
  return path
