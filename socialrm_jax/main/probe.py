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

import dataclasses
import pathlib

from socialrm_jax.analysis import values
from socialrm_jax.base import errors, settings
from socialrm_jax.orchestrators import lexicon_answers
from socialrm_jax.scoring import engine


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
  """socialrm-probe's settings (each a flag of the same name)."""
  model: str = settings.field(None, engine.MODEL_HELP, required=True)
  output_dir: str = settings.field(None, "Where the probe's files go.", required=True)
  words_per_category: int = settings.field(lexicon_answers.DEFAULT_WORDS_PER_CATEGORY,
                                           "Words sampled per lexicon category (0 = every word).")
  seed: int = settings.field(lexicon_answers.SEED, "Seed of the word sample, the bootstrap and "
                             "the permutations.")
  n_resamples: int = settings.field(values.bootstrap.N_RESAMPLES,
                                    "Bootstrap resamples over words and prompts.")
  n_permutations: int = settings.field(values.N_PERMUTATIONS,
                                       "Permutations of the contrasts' tests.")
  scoring: engine.ScoringOptions = settings.group(
      engine.ScoringOptions, tokens_per_batch=lexicon_answers.TOKENS_PER_BATCH)


_SETTINGS = settings.define_flags(ProbeSettings)


def main(argv):
  del argv
  config = _SETTINGS.value
  engine.check_inputs(config.scoring, "model", config.model)
  errors.check_output_folder(config.output_dir, "output_dir")
  lexicon_answers.run(config.model, config.output_dir, config.scoring,
                      words_per_category=config.words_per_category, seed=config.seed,
                      n_resamples=config.n_resamples, n_permutations=config.n_permutations)
  out = pathlib.Path(config.output_dir)
  print((out / "value_probe.md").read_text(encoding="utf-8"))
  print(f"Probe: {out / 'probe.json'}\nPlot: {out / 'value_probe.png'}")


def run():
  errors.run_command("socialrm-probe", main)


if __name__ == "__main__":
  run()
