"""Every token of a model's vocabulary as a one-word answer, ranked, with lexicon rank statistics.

  python -m socialrm_jax.main.vocab_scan --model=PATH --output_dir=OUT [--prompts=FILE]
      [--max_tokens=N] [--compare_with=SCAN_DIR,...] [--families=FAMILY,...] [--seed=0]
      [--n_resamples=1000]
      [--n_permutations=10000] [scoring flags as socialrm-score: --dtype, --mesh, --max_length,
      --tokens_per_batch, --proxy=none|loglik|implicit, --ref_model, --objective, --chunk_size
      (default 8192 here), ...]

Writes OUT/vocab_scores.parquet, OUT/scan.json, OUT/vocab_scan.md, OUT/vocab_scan.png and the
scores under OUT/scores (a rerun resumes). What is scanned and how: socialrm_jax/orchestrators/vocab_scan.py
and socialrm_jax/scoring/vocab_rows.py; the statistics: socialrm_jax/analysis/vocab_stats.py.
"""

from __future__ import annotations

import dataclasses
import pathlib

from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import vocab_scan
from socialrm_jax.runtime import distributed
from socialrm_jax.scoring import engine


@dataclasses.dataclass(frozen=True)
class VocabScanSettings:
  """socialrm-vocab-scan's settings (each a flag of the same name)."""
  model: str = settings.field(None, engine.MODEL_HELP, required=True)
  output_dir: str = settings.field(None, "Where the scan's files go.", required=True)
  prompts: str | None = settings.field(None, "A file of prompts, one per line (default: the two "
                                       "of the FAccT study, vocab_scan.prompts/1).")
  compare_with: list[str] = settings.field(
      default_factory=list, help="Folders of finished scans of other models (any tokenizer: "
      "compared through decoded words where the tokens differ): rank agreement overall and in "
      "the tails.")
  families: list[str] | None = settings.field(
      None, "A family label per scan, this one first, then each --compare_with scan (e.g. "
      "llama,llama,gemma): the lexicon contrasts family against family, permutation test over "
      "models.")
  scan: vocab_scan.ScanOptions = settings.group(vocab_scan.ScanOptions)
  scoring: engine.ScoringOptions = settings.group(engine.ScoringOptions,
                                                  chunk_size=vocab_scan.CHUNK_SIZE)
  job: distributed.DistributedSettings = settings.group(distributed.DistributedSettings)


def main(config: VocabScanSettings) -> None:
  vocab_scan.check_settings(config.scoring, config.scan.max_tokens)
  prompts = (vocab_scan.read_prompts(config.prompts) if config.prompts is not None
             else vocab_scan.DEFAULT_PROMPTS)
  engine.check_inputs(config.scoring, "model", config.model)
  errors.check_output_folder(config.output_dir, "output_dir")
  distributed.initialize(config.job)
  vocab_scan.run(config.model, config.output_dir, config.scoring, config.scan, prompts=prompts,
                 compare_with=config.compare_with, families=config.families)
  if not distributed.is_coordinator():  # process 0 wrote the files
    return
  out = pathlib.Path(config.output_dir)
  print((out / "vocab_scan.md").read_text(encoding="utf-8"))
  print(f"Scores: {out / 'vocab_scores.parquet'}\nScan: {out / 'scan.json'}\n"
        f"Plot: {out / 'vocab_scan.png'}")


COMMAND = command.Command("socialrm-vocab-scan", VocabScanSettings, main)


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
