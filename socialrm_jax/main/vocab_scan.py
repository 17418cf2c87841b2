"""Every token of a model's vocabulary as a one-word answer, ranked, with lexicon rank statistics.

  python -m socialrm_jax.main.vocab_scan --model=PATH --output_dir=OUT [--prompts=FILE]
      [--max_tokens=N] [--compare_with=SCAN_DIR,...] [--families=FAMILY,...] [--seed=0]
      [--n_resamples=1000]
      [--n_permutations=10000] [scoring flags as socialrm-score: --dtype, --mesh, --max_length,
      --tokens_per_batch, --proxy=none|loglik|implicit, --ref_model, --objective, --chunk_size
      (default 8192 here), ...]

Writes OUT/vocab_scores.parquet, OUT/scan.json, OUT/vocab_scan.md, OUT/vocab_scan.png and the
scores under OUT/scores (a rerun resumes). What is scanned and how: socialrm_jax/orchestrators/token_ranking.py
and socialrm_jax/scoring/vocab_rows.py; the statistics: socialrm_jax/analysis/vocab_stats.py.
"""

from __future__ import annotations

import pathlib

from absl import flags

from socialrm_jax.analysis import bootstrap, values
from socialrm_jax.base import errors
from socialrm_jax.orchestrators import token_ranking
from socialrm_jax.scoring import cli_flags, engine

_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where the scan's files go.", required=True)
_PROMPTS = flags.DEFINE_string("prompts", None, "A file of prompts, one per line (default: the "
                               "two of the FAccT study, vocab_scan.prompts/1).")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", None, "Only the first N tokens, by id (default: "
                                   "every token but the special ones).")
_COMPARE_WITH = flags.DEFINE_list("compare_with", [], "Folders of finished scans of other models "
                                  "(any tokenizer: compared through decoded words where the "
                                  "tokens differ): rank agreement overall and in the tails.")
_FAMILIES = flags.DEFINE_list("families", None, "A family label per scan, this one first, then "
                              "each --compare_with scan (e.g. llama,llama,gemma): the lexicon "
                              "contrasts family against family, permutation test over models.")
_SEED = flags.DEFINE_integer("seed", token_ranking.SEED, "Seed of the bootstrap and the "
                             "permutations.")
_N_RESAMPLES = flags.DEFINE_integer("n_resamples", bootstrap.N_RESAMPLES, "Bootstrap resamples.")
_N_PERMUTATIONS = flags.DEFINE_integer("n_permutations", values.N_PERMUTATIONS,
                                       "Permutations of the contrasts' tests.")
flags.FLAGS.set_default("chunk_size", token_ranking.CHUNK_SIZE)


def main(argv):
  del argv
  options = cli_flags.options()
  token_ranking.check_settings(options, _MAX_TOKENS.value)
  prompts = (token_ranking.read_prompts(_PROMPTS.value) if _PROMPTS.value is not None
             else token_ranking.DEFAULT_PROMPTS)
  engine.check_inputs(options, "model", cli_flags.MODEL.value)
  errors.check_output_folder(_OUTPUT_DIR.value, "output_dir")
  token_ranking.run(cli_flags.MODEL.value, _OUTPUT_DIR.value, options, prompts=prompts,
                    max_tokens=_MAX_TOKENS.value, seed=_SEED.value,
                    n_resamples=_N_RESAMPLES.value, n_permutations=_N_PERMUTATIONS.value,
                    compare_with=_COMPARE_WITH.value, families=_FAMILIES.value)
  out = pathlib.Path(_OUTPUT_DIR.value)
  print((out / "vocab_scan.md").read_text(encoding="utf-8"))
  print(f"Scores: {out / 'vocab_scores.parquet'}\nScan: {out / 'scan.json'}\n"
        f"Plot: {out / 'vocab_scan.png'}")


def run():
  errors.run_command("socialrm-vocab-scan", main)


if __name__ == "__main__":
  run()
