"""Scores every (item, candidate) with a reward model (docs/spec.md sec. 4, 6).

  python -m socialrm_jax.main.score --model=PATH --items=CONVERTED --output_dir=SCORES \
      [--datasets=bbq,...] [--limit=N] [--max_length=2048] [--truncation=left|error] \
      [--proxy=none|loglik|implicit|judge] [--ref_model=PATH] [--length_normalize] \
      [--objective=INDEX | --objective_weights=w1,w2,...] [--dtype=float32|bfloat16] \
      [--mesh=data:8,model:1] [--attention=auto|xla|cudnn|splash] [--tokens_per_batch=16384] \
      [--chunk_size=1024] [--smallest_bucket=128] [--compilation_cache=DIR] [--check_invariance=N]

How it scores, the proxies and objectives: docs/scoring.md.

Rerunning into the same --output_dir resumes: finished shards are kept. Several processes (one per
host) are started by a launcher (see launch/README.md), which passes --coordinator_address,
--num_processes and --process_id, or --distributed where JAX finds the job from the environment.
"""

from __future__ import annotations

import dataclasses
import json

from absl import logging

from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.runtime import distributed
from socialrm_jax.scoring import chunks, engine


@dataclasses.dataclass(frozen=True)
class ScoreSettings:
  """socialrm-score's settings (each a flag of the same name)."""
  model: str = settings.field(None, engine.MODEL_HELP, required=True)
  items: str = settings.field(None, "Items file or the convert output folder.", required=True)
  output_dir: str = settings.field(None, "Where scores, manifest and run.json go.", required=True)
  datasets: list[str] = settings.field(default_factory=list,
                                       help="Only these datasets (default: all in the items).")
  limit: int | None = settings.field(None, "Only the first N items (after --datasets).")
  scoring: engine.ScoringOptions = settings.group(engine.ScoringOptions)
  job: distributed.DistributedSettings = settings.group(distributed.DistributedSettings)


def main(config: ScoreSettings) -> None:
  engine.check_inputs(config.scoring, "model", config.model)
  errors.check_output_folder(config.output_dir, "output_dir")
  errors.check_exists(config.items, "items")
  distributed.initialize(config.job)
  run = engine.score_model_at(config.model, config.items, config.output_dir,
                              options=config.scoring, datasets=config.datasets, limit=config.limit)
  logging.info("scored in %.1f s", run["wall_seconds"])
  print(json.dumps({"output_dir": config.output_dir, **{k: run[k] for k in (
      "items", "candidates", "tokens_computed", "tokens_naive", "padding_fraction",
      "compilations", "compile_seconds", "compilation_cache_hits", "truncated",
      "wall_seconds")}}, indent=2))


# A reward that is not finite is not the user's input at fault: its own exit code.
COMMAND = command.Command(
    "socialrm-score", ScoreSettings, main, exit_codes={chunks.NonFiniteRewardError: 3})


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
