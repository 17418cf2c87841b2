"""Value probes: lexicon words as one-word answers to value-laden prompts, scored by a model.

  python -m socialrm_jax.main.probe --model=PATH --output_dir=OUT [--prompts=everyday|superlatives|
      FILE] [--lexicon=FILE,...] [--words_per_category=12] [--compare_with=PROBE_DIR,...]
      [--families=F1,F2,...] [--seed=0] [--n_resamples=1000] [--n_permutations=10000] [scoring
      flags as socialrm-score: --dtype, --mesh, --tokens_per_batch (default 4096 here), --proxy,
      --ref_model, --objective, ...; rows are at most 256 tokens, see orchestrators/probe.py
      MAX_LENGTH]
  python -m socialrm_jax.main.probe --table=CSV_OR_FOLDER,... --output_dir=OUT [--prompts=...]
      [--lexicon=...] [--families=F1,...]   # rewards scored elsewhere, no model

Writes OUT/probe.json, OUT/rewards.csv, OUT/value_probe.md (the table), OUT/value_probe.png and
the scores under OUT/scores (a rerun resumes); with --families, OUT/study.json (the family
comparison) and OUT/value_families.png. With --table, OUT/<model>/probe.json per model instead.
File formats: docs/values.md. What is scored and how: socialrm_jax/orchestrators/probe.py; the
statistics: socialrm_jax/analysis/studies/probe.py.
"""

from __future__ import annotations

import dataclasses
import pathlib

from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import probe as probe_lib
from socialrm_jax.runtime import distributed
from socialrm_jax.scoring import engine


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
  """socialrm-probe's settings (each a flag of the same name)."""
  model: str | None = settings.field(None, engine.MODEL_HELP + " (or --table)")
  output_dir: str = settings.field(None, "Where the probe's files go.", required=True)
  table: list[str] = settings.field(
      default_factory=list, help="Rewards scored elsewhere instead of a --model: long CSVs "
      "(model,family,prompt,word,reward) or the study's layout (one CSV per model, a word column "
      "and a column per prompt id; a folder for its CSVs), docs/values.md.")
  compare_with: list[str] = settings.field(
      default_factory=list, help="Folders of finished probes of other models on the same "
      "prompts and words: one report over all.")
  families: list[str] | None = settings.field_of(probe_lib.ProbeStage, "families")
  probe: probe_lib.ProbeOptions = settings.group(probe_lib.ProbeOptions)
  scoring: engine.ScoringOptions = settings.group(
      engine.ScoringOptions, tokens_per_batch=probe_lib.TOKENS_PER_BATCH)
  job: distributed.DistributedSettings = settings.group(distributed.DistributedSettings)


def main(config: ProbeSettings) -> None:
  if (config.model is None) == (not config.table):
    raise errors.InputError("give --model (to score the probe) or --table (rewards scored "
                            "elsewhere), not both")
  out = pathlib.Path(config.output_dir)
  errors.check_output_folder(config.output_dir, "output_dir")
  if config.table:
    for path in config.table:
      errors.check_exists(path, "table")
    if config.compare_with:
      raise errors.InputError("--compare_with takes finished probes of scored models; with "
                              "--table give every model's rewards as tables")
    probe_lib.run_import(config.table, out, config.probe, families=config.families or [])
  else:
    engine.check_inputs(config.scoring, "model", config.model)
    probe_lib.check_options(config.probe)  # a bad --prompts or --lexicon before any model loads
    distributed.initialize(config.job)
    probe_lib.run_compared(config.model, out, config.scoring, config.probe,
                           compare_with=config.compare_with, families=config.families)
    if not distributed.is_coordinator():  # process 0 wrote the files
      return
  print((out / "value_probe.md").read_text(encoding="utf-8"))
  print(f"Probe: {out / ('probe.json' if config.model else '<model>/probe.json')}\n"
        f"Plot: {out / 'value_probe.png'}")


COMMAND = command.Command("socialrm-probe", ProbeSettings, main)


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
