"""Metrics, report and plots from scores (docs/spec.md sec. 5, 6).

  python -m socialrm_jax.main.metrics --items=CONVERTED --scores=SCORES[,SCORES2,...] --output_dir=REPORT

Writes `REPORT/<name>/metrics.json` per scores set (the name from --names, else `run.json`'s
`model` beside the scores, else the folder or file stem), and one `REPORT/report.md` comparing
them, with its PNG figures beside it, and `REPORT/report.html`, the same report as one page
(and RewardBench 2's result files, `REPORT/rewardbench2/`, where the items had its rows). The
work is in `socialrm_jax.analysis`. They are written into a hidden folder beside REPORT and moved
into it at the end, so a run that fails on a bad input leaves an earlier report as it was.
`--push_to_hub=ORG/NAME` then uploads them as a Hub dataset with its card
(`analysis/outputs/results_dataset.py`); a failed upload exits 4 with one line, the outputs kept.
"""

from __future__ import annotations

import dataclasses
import json
import time

from socialrm_jax.analysis import evaluate
from socialrm_jax.analysis.outputs import results_dataset
from socialrm_jax.analysis.runner import evaluate_all, model_names
from socialrm_jax.base import errors, settings, tables
from socialrm_jax.main import command


@dataclasses.dataclass(frozen=True)
class MetricsSettings:
  """socialrm-metrics' settings (each a flag of the same name)."""
  items: str = settings.field(None, "Folder (or items file) from the converter; the pairs table "
                              "is read from the same folder.", required=True)
  scores: list[str] = settings.field(None, "Scores folders or files, comma-separated.",
                                     required=True)
  output_dir: str = settings.field(None, "Where metrics, report and plots go.", required=True)
  names: list[str] = settings.field(default_factory=list, help="Display names, one per scores "
                                    "set (default: run.json's model, else the folder or file "
                                    "stem).")
  upload: results_dataset.HubUpload = settings.group(results_dataset.HubUpload)
  metrics: evaluate.MetricsOptions = settings.group(evaluate.MetricsOptions)


UPLOAD_FAILED_EXIT_CODE = 4


def main(config: MetricsSettings) -> None:
  errors.check_positive(config.metrics.n_resamples, "n_resamples")
  errors.check_output_folder(config.output_dir, "output_dir")
  errors.check_exists(config.items, "items")
  for path in config.scores:
    errors.check_exists(path, "scores")
  names = model_names(config.scores, config.names)  # refuses a --names of another length
  errors.check_positive(config.metrics.delta, "delta")
  if config.upload.push_to_hub:
    results_dataset.check_repo_id(config.upload.push_to_hub, "push_to_hub")
  options = config.metrics.options()
  start = time.perf_counter()
  with tables.staged_folder(config.output_dir) as stage:
    models = evaluate_all(config.items, config.scores, str(stage), config.names, options)
  print(json.dumps({"output_dir": config.output_dir, "models": list(models),
                    "seconds": round(time.perf_counter() - start, 1)}, indent=2))
  if config.upload.push_to_hub:  # the outputs are in place: a failed upload leaves them whole
    url = results_dataset.push(config.upload.push_to_hub, config.output_dir, config.items,
                               dict(zip(names, config.scores)),
                               private=config.upload.hub_private_repo)
    print(f"Uploaded: {url}")


COMMAND = command.Command(
    "socialrm-metrics", MetricsSettings, main,
    exit_codes={results_dataset.UploadError: UPLOAD_FAILED_EXIT_CODE})


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
