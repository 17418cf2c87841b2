"""The whole audit as a library: convert, score each model, compute metrics, write the report.

Driven by an ml_collections config (see `configs/`). Layout under `config.output_dir`:
`converted/` (items, pairs, conversion report), `scores/<model name>/` (shards, manifest,
run.json), `probe/<model name>/` (the value probe, on unless `config.probe.enabled` is off),
`vocab_scan/<model name>/` (the vocabulary scan, off unless `config.vocab_scan.enabled`),
`<model name>/metrics.json`, `report.md`, `report.html` and the plots, `rewardbench2/` (RewardBench
2's result files, where the items had its rows). Rerunning resumes scoring where it stopped
(docs/spec.md sec. 6: finished shards are kept). `config.push_to_hub` then uploads the results as
a Hub dataset (`analysis/outputs/results_dataset.py`).

Across processes (one per host, `scoring/distributed.py`; docs/multihost.md): process 0 converts
(and derives the identity swaps) while the others wait at a barrier; every process then scores
its own chunks of each model's items into its own shards, as socialrm-score does (the probe's and
the scan's too), and once all have (the scorer's barrier) process 0 alone reads the scores and
writes the metrics, the probe's and the scan's files, the report and the upload. The other
processes return no metrics.
"""

from __future__ import annotations

import pathlib
import re
import time
from typing import Any

from absl import logging
import ml_collections

from socialrm_jax.analysis import evaluate, runner
from socialrm_jax.analysis.outputs import results_dataset
from socialrm_jax.analysis.studies import swap_effects
from socialrm_jax.base import errors, settings, tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import convert, probe, vocab_scan
from socialrm_jax.scoring import distributed, engine, item_source
from socialrm_jax.sources import identity_swaps
from socialrm_jax.sources.reading import ON_ERROR

BUNDLED_DATA = pathlib.Path(__file__).resolve().parents[1] / "bundled"
# What `config.data_dir` accepts to mean the suite that ships with the package.
BUNDLED_ALIAS = "bundled"


def model_config(name: str, path: str, **overrides) -> ml_collections.ConfigDict:
  """One model to score: its name, its path (HF folder, native checkpoint folder, GGUF file, or
  "smollm2") and every `engine.ScoringOptions` field with its default (`settings.config_dict`);
  an override that is no scoring setting is refused, naming it."""
  config = settings.config_dict(engine.ScoringOptions, **overrides)
  config.name, config.path = name, path
  return config


def scoring_options(spec: ml_collections.ConfigDict) -> engine.ScoringOptions:
  """A model config's scoring settings as engine options."""
  return settings.from_config(engine.ScoringOptions, spec)


def models(*specs: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config.models`: the model specs keyed by their name made an identifier, so one field can be
  overridden from the command line (`--config.models.my_rm.dtype=bfloat16`)."""
  return ml_collections.ConfigDict({re.sub(r"\W", "_", spec.name): spec for spec in specs})


def audit_config(output_dir: str) -> ml_collections.ConfigDict:
  """An audit of the bundled suite with every default; a config file sets `models`."""
  config = ml_collections.ConfigDict()
  config.data_dir = BUNDLED_ALIAS  # the suite shipped in socialrm_jax/bundled, or a folder
  # A dataset spec, as the converter's --datasets (socialrm_jax.datasets.registry): "all", names, and path
  # sources such as "preference:data/mine.jsonl:name=mine,domain=safety".
  config.datasets = "all"
  config.columns = ""  # path sources' columns by role, as the converter's --columns
  config.format = "parquet"
  config.on_error = "raise"
  # Prompt templates, as the converter's --templates (socialrm_jax.base.templates): "" for each
  # dataset's default, "all" for every template of every dataset (metrics then use each dataset's
  # default and the report adds the spread across templates), "bbq=all,xstest=xstest.framed".
  config.templates = ""
  config.output_dir = output_dir
  config.score_datasets = []  # score only these datasets (default: every converted one)
  config.limit_items = 0  # score only the first N items (0 = all)
  config.models = models()  # see `models`
  config.metrics = ml_collections.ConfigDict(
      {"n_resamples": 1000, "seed": 0, "allow_missing": False, "delta": 0.05})
  config.probe = probe.audit_config()  # the value probe: socialrm_jax/orchestrators/probe.py
  # Every token of each model's vocabulary as a one-word answer: socialrm_jax/orchestrators/vocab_scan.py.
  config.vocab_scan = vocab_scan.audit_config()
  # Identity swaps of BBQ and CrowS-Pairs items, scored by every model (sources/identity_swaps.py).
  config.counterfactuals = True
  # A Hub dataset ORG/NAME the results go to, with their card, in one commit once the audit is
  # done (HF_TOKEN; analysis/outputs/results_dataset.py); "" uploads nothing.
  config.push_to_hub = ""
  config.hub_private_repo = False  # a dataset the push creates is private
  return config


def resolve_data_dir(data_dir: str) -> pathlib.Path:
  return BUNDLED_DATA if data_dir == BUNDLED_ALIAS else pathlib.Path(data_dir)


def score_model(spec: ml_collections.ConfigDict, items_dir: pathlib.Path, scores_dir: pathlib.Path,
                datasets: list[str], limit: int | None) -> dict[str, Any]:
  """Loads one model as its config says and scores the converted items into `scores_dir`."""
  return engine.score_model_at(spec.path, items_dir, scores_dir, options=scoring_options(spec),
                               datasets=datasets, limit=limit)


def model_specs(config) -> list[ml_collections.ConfigDict]:
  """`config.models` as a list; refused unless there is one or more, with distinct names."""
  specs = list(config.models.values())
  names = [spec.name for spec in specs]
  if not specs or len(set(names)) != len(names):
    raise InputError(f"config.models needs one or more models with distinct names, got {names}")
  return specs


def check_config(config) -> None:
  """Refuses a config no audit can finish, naming the field, before anything is converted."""
  errors.check_output_folder(config.output_dir, "config.output_dir")
  if config.format not in tables.FORMATS:
    raise errors.InputError(f"--config.format={config.format!r}: use one of "
                            f"{', '.join(tables.FORMATS)}")
  if config.on_error not in ON_ERROR:
    raise errors.InputError(f"--config.on_error={config.on_error!r}: use one of "
                            f"{', '.join(ON_ERROR)}")
  model_specs(config)
  for key, spec in config.models.items():
    field = f"config.models.{key}."
    engine.check_inputs(scoring_options(spec), f"{field}path", spec.path, prefix=field)
  errors.check_positive(config.metrics.n_resamples, "config.metrics.n_resamples")
  errors.check_positive(config.metrics.delta, "config.metrics.delta")
  if config.get("push_to_hub"):
    results_dataset.check_repo_id(config.push_to_hub, "config.push_to_hub")
  probe = config.get("probe")
  if probe is not None and probe.enabled:
    errors.check_positive(probe.n_resamples, "config.probe.n_resamples")
  scan = config.get("vocab_scan")
  if scan is not None and scan.enabled:
    errors.check_positive(scan.n_resamples, "config.vocab_scan.n_resamples")
    if scan.max_tokens is not None and scan.max_tokens < 0:
      raise errors.InputError(f"config.vocab_scan.max_tokens must be >= 0 (unset or 0: the whole "
                              f"vocabulary), got {scan.max_tokens}")


def run_audit(config) -> dict[str, Any]:
  """Runs every stage the config names; returns {model name: metrics} ({} on a process of a
  multi-process job but the coordinator, which writes them)."""
  specs = model_specs(config)
  out = pathlib.Path(config.output_dir)
  items_dir = out / "converted"
  start = time.perf_counter()
  if distributed.is_coordinator():
    totals = convert.convert_to(
        items_dir, resolve_data_dir(config.data_dir), config.datasets, config.format,
        on_error=config.on_error, templates=config.get("templates", ""),
        path_options={"columns": config.get("columns", "")})["totals"]
    logging.info("converted %d items, %d pairs in %.1f s", totals["items"],
                 sum(totals["pairs"].values()), time.perf_counter() - start)
  distributed.barrier("audit: items converted")

  names = [spec.name for spec in specs]
  score_dirs = []
  for spec in specs:
    score_dir = out / "scores" / spec.name
    run = score_model(spec, items_dir, score_dir, list(config.get("score_datasets", [])),
                      config.get("limit_items") or None)
    logging.info("%s: scored %d items in %.1f s", spec.name, run["items"],
                 run["wall_seconds"])
    score_dirs.append(str(score_dir))

  options = evaluate.Options(n_resamples=config.metrics.n_resamples, seed=config.metrics.seed,
                             allow_missing=config.metrics.allow_missing,
                             delta=config.metrics.delta)
  sections = probe.run_for_audit(
      config.get("probe"), [(spec.name, spec.path, scoring_options(spec)) for spec in specs], out)
  sections += vocab_scan.run_for_audit(
      config.get("vocab_scan"), [(spec.name, spec.path, scoring_options(spec)) for spec in specs],
      out)
  if config.get("counterfactuals", True):
    sections.append(score_counterfactuals(config, specs, items_dir, score_dirs, options))
  if not distributed.is_coordinator():
    return {}
  models = runner.evaluate_all(str(items_dir), score_dirs, str(out), names, options, sections)
  if config.get("push_to_hub"):  # every output is written: a failed upload leaves them whole
    url = results_dataset.push(config.push_to_hub, out, items_dir, dict(zip(names, score_dirs)),
                               private=config.get("hub_private_repo", False))
    logging.info("uploaded the results to %s", url)
  return models


def score_counterfactuals(config, specs, items_dir: pathlib.Path, score_dirs: list[str],
                          options: evaluate.Options) -> list[str]:
  """Derives the identity-swap set of the scored items (`socialrm_jax.sources.identity_swaps`) into
  `counterfactuals/`, scores it with every model into `scores_counterfactual/<model>/`, and writes
  `<model>/counterfactual.json`; returns the report section."""
  out = pathlib.Path(config.output_dir)
  swaps_dir = out / "counterfactuals"
  # Only the items the main run scored get swaps, so a limited run stays limited; the items are
  # streamed (read again for each pass), so the audit's memory does not grow with them.
  scored = item_source.ItemSource.from_table(items_dir, list(config.get("score_datasets", [])),
                                             config.get("limit_items") or None)
  if distributed.is_coordinator():
    identity_swaps.derive_into(lambda: iter(scored), swaps_dir, config.format,
                               name=str(items_dir))
  distributed.barrier("audit: identity swaps derived")
  report = tables.read_json_object(swaps_dir / identity_swaps.REPORT_FILE)
  results = {}
  for spec, score_dir in zip(specs, score_dirs):
    swap_scores = out / "scores_counterfactual" / spec.name
    if report["generated_items"]:
      score_model(spec, swaps_dir, swap_scores, [], None)
    if not distributed.is_coordinator():  # it writes the effects, once every process has scored
      continue
    results[spec.name] = swap_effects.compute_at(swaps_dir, score_dir, swap_scores, options)
    tables.atomic_write_json(out / spec.name / "counterfactual.json", results[spec.name])
  return swap_effects.report_lines(results) if distributed.is_coordinator() else []
