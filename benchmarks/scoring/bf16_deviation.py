"""How far bfloat16 rewards drift from float32, per decoder architecture (quoted in the README).

  JAX_PLATFORMS=cpu python -m benchmarks.scoring.bf16_deviation

For each architecture: a tiny random checkpoint (the test fixtures' models, 2 layers, width 32)
saved in fp32, scored on a padded batch in float32 and in bfloat16 by our loader; prints the max
absolute reward deviation and the rewards' spread for scale. Real models are deeper and wider, so
treat these as the per-layer rounding floor, not a bound.

  JAX_PLATFORMS=cpu python -m benchmarks.scoring.bf16_deviation --scores=FLOAT32_SCORES,BFLOAT16_SCORES

compares two scoring runs of the same items instead (folders of `scores*` shards, e.g. the
`ours` folders of two `benchmarks/gpu/gpu_throughput.py` runs with `--dtype=float32` and
`--dtype=bfloat16`): the max and mean absolute reward deviation over every (item, candidate), the
float32 rewards' spread for scale, and the share of items whose preferred candidate stays.
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
from absl import flags

# The tiny-checkpoint builders live with the tests; this script reuses them as they are. Run as
# a module from the repository root, its `tests` comes first on the path, ahead of an installed
# `tests` package (the rewardbench wheel ships one).
from tests.helpers import model_fixtures  # noqa: E402

from socialrm_jax.analysis.tables import reward_tables
from socialrm_jax.main import command
from socialrm_jax.models import load_reward_model  # noqa: E402

_SCORES = flags.DEFINE_list("scores", None, "FLOAT32_SCORES,BFLOAT16_SCORES: compare two "
                            "scoring runs of the same items instead of the tiny checkpoints.")

ARCHITECTURES = ["LlamaForSequenceClassification", "MistralForSequenceClassification",
                 "Qwen2ForSequenceClassification", "Qwen3ForSequenceClassification",
                 "GemmaForSequenceClassification", "Gemma2ForSequenceClassification"]
LENGTHS, SEQ_LEN = [5, 16, 11, 8, 16, 2, 13, 9], 16


def rewards_by_key(path: str) -> dict[tuple[str, int], float]:
  """(item_id, candidate) -> reward of a scores set."""
  scores = reward_tables.read_scores(path)
  return dict(zip(zip(scores.item_id.tolist(), scores.candidate.tolist()),
                  scores.reward.tolist()))


def compare_runs(float32_path: str, bfloat16_path: str) -> None:
  """The deviation of one scoring run's rewards from another's, on the keys both have."""
  fp32, bf16 = rewards_by_key(float32_path), rewards_by_key(bfloat16_path)
  keys = sorted(fp32.keys() & bf16.keys())
  if not keys or len(keys) != len(fp32) or len(keys) != len(bf16):
    raise SystemExit(f"the two runs score different candidates ({len(fp32)} and {len(bf16)} "
                     f"rewards, {len(keys)} in common)")
  a, b = np.asarray([fp32[k] for k in keys]), np.asarray([bf16[k] for k in keys])
  items: dict[str, list[int]] = {}
  for i, (item_id, _) in enumerate(keys):
    items.setdefault(item_id, []).append(i)
  same = [int(np.argmax(a[rows])) == int(np.argmax(b[rows])) for rows in items.values()]
  print(f"{len(keys)} rewards of {len(items)} items: max |bf16 - fp32| "
        f"{np.abs(b - a).max():.4f}, mean {np.abs(b - a).mean():.4f}; float32 reward std "
        f"{a.std():.4f}; Pearson r {np.corrcoef(a, b)[0, 1]:.5f}; same preferred candidate on "
        f"{100 * np.mean(same):.1f}% of items")


def main(argv) -> None:
  del argv
  if _SCORES.value:
    if len(_SCORES.value) != 2:
      raise SystemExit("--scores takes two folders: FLOAT32_SCORES,BFLOAT16_SCORES")
    compare_runs(*_SCORES.value)
    return
  ids, mask = model_fixtures.random_batch(LENGTHS, SEQ_LEN, padding_side="left")
  print(f"{'architecture':36s} {'max |bf16 - fp32|':>18s} {'reward std':>11s}")
  with tempfile.TemporaryDirectory() as tmp:
    for architecture in ARCHITECTURES:
      folder = model_fixtures.save_tiny_hf_model(tmp, architecture)
      fp32 = np.asarray(load_reward_model(folder, dtype="float32")(ids, mask))
      bf16 = np.asarray(load_reward_model(folder, dtype="bfloat16")(ids, mask))
      print(f"{architecture:36s} {np.abs(bf16 - fp32).max():18.4f} {fp32.std():11.4f}")


if __name__ == "__main__":
  command.run_command("benchmarks.scoring.bf16_deviation", main)
