"""How far bfloat16 rewards drift from float32, per decoder architecture (quoted in the README).

  JAX_PLATFORMS=cpu python benchmarks/bf16_deviation.py

For each architecture: a tiny random checkpoint (the test fixtures' models, 2 layers, width 32)
saved in fp32, scored on a padded batch in float32 and in bfloat16 by our loader; prints the max
absolute reward deviation and the rewards' spread for scale. Real models are deeper and wider, so
treat these as the per-layer rounding floor, not a bound.
"""

from __future__ import annotations

import os
import pathlib
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np

# The tiny-checkpoint builders live with the tests; this script reuses them as they are.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
import model_fixtures  # noqa: E402

from socialrm_jax.models import load_reward_model  # noqa: E402

ARCHITECTURES = ["LlamaForSequenceClassification", "MistralForSequenceClassification",
                 "Qwen2ForSequenceClassification", "Qwen3ForSequenceClassification",
                 "GemmaForSequenceClassification", "Gemma2ForSequenceClassification"]
LENGTHS, SEQ_LEN = [5, 16, 11, 8, 16, 2, 13, 9], 16


def main() -> None:
  ids, mask = model_fixtures.random_batch(LENGTHS, SEQ_LEN, padding_side="left")
  print(f"{'architecture':36s} {'max |bf16 - fp32|':>18s} {'reward std':>11s}")
  with tempfile.TemporaryDirectory() as tmp:
    for architecture in ARCHITECTURES:
      folder = model_fixtures.save_tiny_hf_model(tmp, architecture)
      fp32 = np.asarray(load_reward_model(folder, dtype="float32")(ids, mask))
      bf16 = np.asarray(load_reward_model(folder, dtype="bfloat16")(ids, mask))
      print(f"{architecture:36s} {np.abs(bf16 - fp32).max():18.4f} {fp32.std():11.4f}")


if __name__ == "__main__":
  main()
