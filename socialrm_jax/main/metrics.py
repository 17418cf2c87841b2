"""Metrics, report and plots from scores (SPEC sec. 5, 6).

  python -m socialrm_jax.main.metrics --items=CONVERTED --scores=SCORES[,SCORES2,...] --output_dir=REPORT

Writes `REPORT/<name>/metrics.json` per scores set (the name from --names, else `run.json`'s
`model` beside the scores, else the folder or file stem), and one `REPORT/report.md` comparing
them, with its PNG figures beside it, and `REPORT/report.html`, the same report as one page. The
work is in `socialrm_jax.analysis`. They are written into a hidden folder beside REPORT and moved
into it at the end, so a run that fails on a bad input leaves an earlier report as it was.
"""

from __future__ import annotations

import json
import time

from absl import flags

from socialrm_jax.analysis import evaluate
from socialrm_jax.analysis.runner import evaluate_all, model_names
from socialrm_jax.base import errors, tables

_ITEMS = flags.DEFINE_string("items", None, "Folder (or items file) from the converter; the "
                             "pairs table is read from the same folder.", required=True)
_SCORES = flags.DEFINE_list("scores", None, "Scores folders or files, comma-separated.",
                            required=True)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where metrics, report and plots go.",
                                  required=True)
_NAMES = flags.DEFINE_list("names", [], "Display names, one per scores set (default: run.json's "
                           "model, else the folder or file stem).")
_ALLOW_MISSING = flags.DEFINE_bool("allow_missing", False, "Compute on the scored items when "
                                   "some items have no scores (recorded under `coverage`).")
_N_RESAMPLES = flags.DEFINE_integer("n_resamples", evaluate.Options.n_resamples,
                                    "Bootstrap resamples per interval.")
_SEED = flags.DEFINE_integer("seed", evaluate.Options.seed, "Bootstrap seed.")


def main(argv):
  del argv
  errors.check_positive(_N_RESAMPLES.value, "n_resamples")
  errors.check_output_folder(_OUTPUT_DIR.value, "output_dir")
  errors.check_exists(_ITEMS.value, "items")
  for path in _SCORES.value:
    errors.check_exists(path, "scores")
  model_names(_SCORES.value, _NAMES.value)  # refuses a --names of another length
  options = evaluate.Options(n_resamples=_N_RESAMPLES.value, seed=_SEED.value,
                             allow_missing=_ALLOW_MISSING.value)
  start = time.perf_counter()
  with tables.staged_folder(_OUTPUT_DIR.value) as stage:
    models = evaluate_all(_ITEMS.value, _SCORES.value, str(stage), _NAMES.value, options)
  print(json.dumps({"output_dir": _OUTPUT_DIR.value, "models": list(models),
                    "seconds": round(time.perf_counter() - start, 1)}, indent=2))


def run():
  errors.run_command("socialrm-metrics", main)


if __name__ == "__main__":
  run()
