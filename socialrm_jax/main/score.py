"""Scores every (item, candidate) with a reward model (SPEC sec. 4, 6).

  python -m socialrm_jax.main.score --model=PATH --items=CONVERTED --output_dir=SCORES \
      [--datasets=bbq,...] [--limit=N] [--max_length=2048] [--dtype=float32] \
      [--mesh=data:8,model:1] [--tokens_per_batch=16384] [--truncation=left|error] \
      [--proxy=none|loglik|implicit|judge] [--ref_model=PATH] [--length_normalize] \
      [--objective=INDEX | --objective_weights=w1,w2,...] \
      [--attention=auto|xla|cudnn|splash] [--compilation_cache=DIR]

Proxies and objectives: socialrm_jax/scoring/proxies.py (and scoring/README.md).

Rerunning into the same --output_dir resumes: finished shards are kept. Several processes (one per
host) are started by a launcher (see launch/README.md), which passes --coordinator_address,
--num_processes and --process_id, or --distributed where JAX finds the job from the environment.
"""

from __future__ import annotations

import json

from absl import flags, logging

from socialrm_jax.base import errors
from socialrm_jax.scoring import chunks, cli_flags, engine
from socialrm_jax.scoring import mesh as mesh_lib

_ITEMS = flags.DEFINE_string("items", None, "Items file or the convert output folder.",
                             required=True)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where scores, manifest and run.json go.",
                                  required=True)
_DATASETS = flags.DEFINE_list("datasets", [], "Only these datasets (default: all in the items).")
_LIMIT = flags.DEFINE_integer("limit", None, "Only the first N items (after --datasets).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "host:port of process 0, for multi-process runs.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Join a multi-process job described by the "
                                 "environment (Cloud TPU pod, Slurm).")


def main(argv):
  del argv
  options = cli_flags.options()
  engine.check_inputs(options, "model", cli_flags.MODEL.value)
  errors.check_output_folder(_OUTPUT_DIR.value, "output_dir")
  errors.check_exists(_ITEMS.value, "items")
  mesh_lib.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                                  _DISTRIBUTED.value)
  run = engine.score_model_at(cli_flags.MODEL.value, _ITEMS.value, _OUTPUT_DIR.value,
                              options=options, datasets=_DATASETS.value, limit=_LIMIT.value)
  logging.info("scored in %.1f s", run["wall_seconds"])
  print(json.dumps({"output_dir": _OUTPUT_DIR.value, **{k: run[k] for k in (
      "items", "candidates", "tokens_computed", "tokens_naive", "padding_fraction",
      "compilations", "compile_seconds", "compilation_cache_hits", "truncated",
      "wall_seconds")}}, indent=2))


def run():
  # A reward that is not finite is not the user's input at fault: its own exit code.
  errors.run_command("socialrm-score", main, exit_codes={chunks.NonFiniteRewardError: 3})


if __name__ == "__main__":
  run()
