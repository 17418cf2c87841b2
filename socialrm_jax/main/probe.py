"""Value probes: lexicon words as one-word answers to value-laden prompts, scored by a model.

  python -m socialrm_jax.main.probe --model=PATH --output_dir=OUT [--words_per_category=12] \
      [--seed=0] [--n_resamples=1000] [--n_permutations=10000] [scoring flags as socialrm-score:
      --dtype, --mesh, --tokens_per_batch (default 4096 here), --proxy, --ref_model, --objective,
      ...; rows are at most 256 tokens, see lexicon_answers.MAX_LENGTH]

Writes OUT/probe.json, OUT/value_probe.md (the table), OUT/value_probe.png and the scores under
OUT/scores (a rerun resumes). What is scored and how: socialrm_jax/orchestrators/lexicon_answers.py; the
statistics: socialrm_jax/analysis/values.py.
"""

from __future__ import annotations

import pathlib

from absl import flags

from socialrm_jax.analysis import values
from socialrm_jax.base import errors
from socialrm_jax.orchestrators import lexicon_answers
from socialrm_jax.scoring import cli_flags, engine

_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where the probe's files go.", required=True)
_WORDS = flags.DEFINE_integer("words_per_category", lexicon_answers.DEFAULT_WORDS_PER_CATEGORY,
                              "Words sampled per lexicon category (0 = every word).")
_SEED = flags.DEFINE_integer("seed", lexicon_answers.SEED, "Seed of the word sample, the bootstrap "
                             "and the permutations.")
_N_RESAMPLES = flags.DEFINE_integer("n_resamples", values.bootstrap.N_RESAMPLES,
                                    "Bootstrap resamples over words and prompts.")
flags.FLAGS.set_default("tokens_per_batch", lexicon_answers.TOKENS_PER_BATCH)
_N_PERMUTATIONS = flags.DEFINE_integer("n_permutations", values.N_PERMUTATIONS,
                                       "Permutations of the contrasts' tests.")


def main(argv):
  del argv
  options = cli_flags.options()
  engine.check_inputs(options, "model", cli_flags.MODEL.value)
  errors.check_output_folder(_OUTPUT_DIR.value, "output_dir")
  lexicon_answers.run(cli_flags.MODEL.value, _OUTPUT_DIR.value, options,
                      words_per_category=_WORDS.value, seed=_SEED.value,
                      n_resamples=_N_RESAMPLES.value, n_permutations=_N_PERMUTATIONS.value)
  out = pathlib.Path(_OUTPUT_DIR.value)
  print((out / "value_probe.md").read_text(encoding="utf-8"))
  print(f"Probe: {out / 'probe.json'}\nPlot: {out / 'value_probe.png'}")


def run():
  errors.run_command("socialrm-probe", main)


if __name__ == "__main__":
  run()
