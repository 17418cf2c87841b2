"""Metrics, report and plots from scores (SPEC sec. 5, 6).

  python -m socialrm_jax.metrics --items=CONVERTED --scores=SCORES[,SCORES2,...] --output_dir=REPORT

Writes `REPORT/<name>/metrics.json` per scores set (the name from --names, else `run.json`'s
`model` beside the scores, else the folder or file stem), and one `REPORT/report.md` comparing
them, with its PNG figures beside it. The work is in `socialrm_jax.analysis`.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

from absl import app, flags, logging

from socialrm_jax import tables
from socialrm_jax.analysis import evaluate, plots, report, scores
from socialrm_jax.errors import InputError

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


def model_names(paths: list[str], names: list[str]) -> list[str]:
  """One distinct display name per scores set (a repeated name gets `-2`, `-3`, ...)."""
  if names and len(names) != len(paths):
    raise InputError(f"--names has {len(names)} names for {len(paths)} scores sets")
  chosen = names or [scores.model_name(p) for p in paths]
  seen: dict[str, int] = {}
  out = []
  for name in chosen:
    seen[name] = seen.get(name, 0) + 1
    out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
  return out


def evaluate_all(items_path: str, score_paths: list[str], output_dir: str, names: list[str],
                 options: evaluate.Options) -> dict[str, dict]:
  """Everything the command does, importable: returns {name: metrics}."""
  folder = pathlib.Path(items_path)
  items = tables.read_rows(items_path, "items")
  pair_rows = tables.read_rows(folder if folder.is_dir() else folder.parent, "pairs")
  models = {}
  for name, path in zip(model_names(score_paths, names), score_paths):
    start = time.perf_counter()
    metrics = evaluate.compute_metrics(items, pair_rows, scores.read_scores(path), options)
    models[name] = {"model": name, "scores": str(path), "items": str(items_path), **metrics}
    tables.atomic_write_json(pathlib.Path(output_dir) / name / "metrics.json", models[name])
    logging.info("%s: metrics in %.1f s", name, time.perf_counter() - start)
  figures = plots.write_all(models, output_dir)
  report.write(models, pathlib.Path(output_dir) / "report.md", figures)
  return models


def main(argv):
  del argv
  options = evaluate.Options(n_resamples=_N_RESAMPLES.value, seed=_SEED.value,
                             allow_missing=_ALLOW_MISSING.value)
  start = time.perf_counter()
  try:
    models = evaluate_all(_ITEMS.value, _SCORES.value, _OUTPUT_DIR.value, _NAMES.value, options)
  except InputError as e:
    print(f"socialrm-metrics: error: {e}", file=sys.stderr)
    sys.exit(2)
  print(json.dumps({"output_dir": _OUTPUT_DIR.value, "models": list(models),
                    "seconds": round(time.perf_counter() - start, 1)}, indent=2))


def run():
  app.run(main)


if __name__ == "__main__":
  run()
