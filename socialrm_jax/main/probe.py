"""Value probes: lexicon words as one-word answers to value-laden prompts, scored by a model.

  python -m socialrm_jax.main.probe --model=PATH --output_dir=OUT [--words_per_category=12] \
      [--seed=0] [--n_resamples=1000] [--n_permutations=10000] [scoring flags as socialrm-score:
      --dtype, --mesh, --tokens_per_batch (default 4096 here), --proxy, --ref_model, --objective,
      ...; rows are at most 256 tokens, see orchestrators/probe.py MAX_LENGTH]

Writes OUT/probe.json, OUT/value_probe.md (the table), OUT/value_probe.png and the scores under
OUT/scores (a rerun resumes). What is scored and how: socialrm_jax/orchestrators/probe.py; the
statistics: socialrm_jax/analysis/studies/probe.py.
"""

from __future__ import annotations

import dataclasses
import pathlib

from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import probe as probe_lib
from socialrm_jax.scoring import distributed, engine


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
  """socialrm-probe's settings (each a flag of the same name)."""
  model: str = settings.field(None, engine.MODEL_HELP, required=True)
  output_dir: str = settings.field(None, "Where the probe's files go.", required=True)
  probe: probe_lib.ProbeOptions = settings.group(probe_lib.ProbeOptions)
  scoring: engine.ScoringOptions = settings.group(
      engine.ScoringOptions, tokens_per_batch=probe_lib.TOKENS_PER_BATCH)
  job: distributed.DistributedSettings = settings.group(distributed.DistributedSettings)


_SETTINGS = settings.define_flags(ProbeSettings)


def main(argv):
  del argv
  config = _SETTINGS.value
  engine.check_inputs(config.scoring, "model", config.model)
  errors.check_output_folder(config.output_dir, "output_dir")
  distributed.initialize(config.job)
  probe_lib.run(config.model, config.output_dir, config.scoring, config.probe)
  if not distributed.is_coordinator():  # process 0 wrote the files
    return
  out = pathlib.Path(config.output_dir)
  print((out / "value_probe.md").read_text(encoding="utf-8"))
  print(f"Probe: {out / 'probe.json'}\nPlot: {out / 'value_probe.png'}")


def run():
  command.run_command("socialrm-probe", main)


if __name__ == "__main__":
  run()
