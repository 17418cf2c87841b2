"""The whole audit as a library: convert, score each model, compute metrics, write the report.

Driven by an ml_collections config (see `configs/`). Layout under `config.output_dir`:
`converted/` (items, pairs, conversion report), `scores/<model name>/` (shards, manifest,
run.json), `probe/<model name>/` (the value probe, on unless `config.probe.enabled` is off; with
`config.probe.families`, the family comparison `probe/study.json` and `value_families.png`),
`vocab_scan/<model name>/` (the vocabulary scan, off unless `config.vocab_scan.enabled`),
`<model name>/metrics.json`, `report.md`, `report.html` and the plots, `rewardbench2/` (RewardBench
2's result files, where the items had its rows). Rerunning resumes scoring where it stopped
(docs/spec.md sec. 6: finished shards are kept). `config.push_to_hub` then uploads the results as
a Hub dataset (`analysis/outputs/results_dataset.py`).

Across processes (one per host, `runtime/distributed.py`; docs/multihost.md): process 0 converts
(and derives the identity swaps) while the others wait at a barrier; every process then scores
its own chunks of each model's items into its own shards, as socialrm-score does (the probe's and
the scan's too), and once all have (the scorer's barrier) process 0 alone reads the scores and
writes the metrics, the probe's and the scan's files, the report and the upload. The other
processes return no metrics.
"""

from __future__ import annotations

import dataclasses
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
from socialrm_jax.runtime import distributed
from socialrm_jax.scoring import engine, item_source
from socialrm_jax.sources import identity_swaps
from socialrm_jax.sources.reading import ON_ERROR

BUNDLED_DATA = pathlib.Path(__file__).resolve().parents[1] / "bundled"
# What `config.data_dir` accepts to mean the suite that ships with the package.
BUNDLED_ALIAS = "bundled"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """One model to score (`config.models.<key>`): its name, its path, and its scoring settings
  (`engine.ScoringOptions`, by socialrm-score's flag names: `--config.models.<key>.max_length`)."""
  name: str = settings.field("", "The model's name in the report and its folders.")
  path: str = settings.field("", engine.MODEL_HELP)
  scoring: engine.ScoringOptions = settings.group(engine.ScoringOptions)


@dataclasses.dataclass(frozen=True)
class AuditSettings:
  """Everything an audit reads: socialrm-audit's flags and its config file's keys (the groups
  `models`, `metrics`, `probe` and `vocab_scan` in the file only: `--config.metrics.seed=1`)."""
  data_dir: str = settings.field(BUNDLED_ALIAS, "The datasets' folder; 'bundled': the suite "
                                 "shipped in socialrm_jax/bundled.")
  datasets: str = settings.field("all", "A dataset spec, as socialrm-convert's --datasets: 'all', "
                                 "names, and path sources such as "
                                 "preference:data/mine.jsonl:name=mine,domain=safety.")
  columns: str = settings.field("", "Path sources' columns by role, as socialrm-convert's "
                                "--columns.")
  format: str = settings.field("parquet", "The converted tables' format.", choices=tables.FORMATS)
  on_error: str = settings.field("raise", "A bad source row: raise, or skip it (and count it).",
                                 choices=ON_ERROR)
  templates: str = settings.field(
      "", "Prompt templates, as socialrm-convert's --templates: '' for each dataset's default, "
      "'all' for every template (metrics use each dataset's default and the report adds the "
      "spread across templates), 'bbq=all,xstest=xstest.framed'.")
  output_dir: str = settings.field(None, "Where the audit's folders and report go.",
                                   required=True)
  score_datasets: list[str] = settings.field(
      default_factory=list, help="Score only these datasets (default: every converted one).")
  limit_items: int = settings.field(0, "Score only the first N items (0: all).")
  counterfactuals: bool = settings.field(
      True, "Score identity swaps of the BBQ and CrowS-Pairs items with every model "
      "(sources/identity_swaps.py).")
  upload: results_dataset.HubUpload = settings.group(results_dataset.HubUpload)
  models: dict[str, ModelSpec] = settings.named(ModelSpec)
  metrics: evaluate.MetricsOptions = settings.nested(evaluate.MetricsOptions)
  probe: probe.ProbeStage = settings.nested(probe.ProbeStage)
  vocab_scan: vocab_scan.ScanStage = settings.nested(vocab_scan.ScanStage)


def model_config(name: str, path: str, **overrides) -> ml_collections.ConfigDict:
  """One model to score, as `config.models` holds it: its name, its path (HF folder, native
  checkpoint folder, GGUF file, "smollm2" or a Hub id) and every `engine.ScoringOptions` field
  with its default (`settings.config_dict`); an override that is no scoring setting is refused,
  naming it."""
  return settings.config_dict(ModelSpec, name=name, path=path, **overrides)


def models(*specs: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config.models`: the model specs keyed by their name made an identifier, so one field can be
  overridden from the command line (`--config.models.my_rm.dtype=bfloat16`)."""
  return ml_collections.ConfigDict({re.sub(r"\W", "_", spec.name): spec for spec in specs})


def audit_config(output_dir: str) -> ml_collections.ConfigDict:
  """An audit of the bundled suite with every default (`AuditSettings`); a config file sets
  `models`."""
  return settings.config_dict(AuditSettings, output_dir=output_dir)


def audit_settings(config: ml_collections.ConfigDict | AuditSettings) -> AuditSettings:
  """An audit config (a config file's, or `audit_config`'s) as `AuditSettings`: a key of no
  setting is refused, naming it."""
  if isinstance(config, AuditSettings):
    return config
  return settings.from_config(AuditSettings, config)


def resolve_data_dir(data_dir: str) -> pathlib.Path:
  return BUNDLED_DATA if data_dir == BUNDLED_ALIAS else pathlib.Path(data_dir)


def score_model(spec: ModelSpec, items_dir: pathlib.Path, scores_dir: pathlib.Path,
                datasets: list[str], limit: int | None) -> dict[str, Any]:
  """Loads one model as its config says and scores the converted items into `scores_dir`."""
  return engine.score_model_at(spec.path, items_dir, scores_dir, options=spec.scoring,
                               datasets=datasets, limit=limit)


def model_specs(config: AuditSettings) -> list[ModelSpec]:
  """`config.models` as a list; refused unless there is one or more, with distinct names."""
  specs = list(config.models.values())
  names = [spec.name for spec in specs]
  if not specs or len(set(names)) != len(names):
    raise InputError(f"config.models needs one or more models with distinct names, got {names}")
  return specs


def check_config(config: ml_collections.ConfigDict | AuditSettings) -> AuditSettings:
  """Refuses a config no audit can finish, naming the field, before anything is converted;
  returns it as `AuditSettings`."""
  config = audit_settings(config)
  errors.check_output_folder(config.output_dir, "config.output_dir")
  model_specs(config)
  for key, spec in config.models.items():
    field = f"config.models.{key}."
    engine.check_inputs(spec.scoring, f"{field}path", spec.path, prefix=field)
  errors.check_positive(config.metrics.n_resamples, "config.metrics.n_resamples")
  errors.check_positive(config.metrics.delta, "config.metrics.delta")
  if config.upload.push_to_hub:
    results_dataset.check_repo_id(config.upload.push_to_hub, "config.push_to_hub")
  if config.probe.enabled:
    errors.check_positive(config.probe.options.n_resamples, "config.probe.n_resamples")
    probe.check_audit_families(config.probe, [spec.name for spec in model_specs(config)])
  scan = config.vocab_scan
  if scan.enabled:
    errors.check_positive(scan.options.n_resamples, "config.vocab_scan.n_resamples")
    if scan.options.max_tokens is not None and scan.options.max_tokens < 0:
      raise errors.InputError(f"config.vocab_scan.max_tokens must be >= 0 (unset or 0: the whole "
                              f"vocabulary), got {scan.options.max_tokens}")
  return config


def run_audit(config: ml_collections.ConfigDict | AuditSettings) -> dict[str, Any]:
  """Runs every stage the config names; returns {model name: metrics} ({} on a process of a
  multi-process job but the coordinator, which writes them)."""
  config = audit_settings(config)
  specs = model_specs(config)
  out = pathlib.Path(config.output_dir)
  items_dir = out / "converted"
  start = time.perf_counter()
  if distributed.is_coordinator():
    totals = convert.convert_to(
        items_dir, resolve_data_dir(config.data_dir), config.datasets, config.format,
        on_error=config.on_error, templates=config.templates,
        path_options={"columns": config.columns})["totals"]
    logging.info("converted %d items, %d pairs in %.1f s", totals["items"],
                 sum(totals["pairs"].values()), time.perf_counter() - start)
  distributed.barrier("audit: items converted")

  names = [spec.name for spec in specs]
  score_dirs = []
  for spec in specs:
    score_dir = out / "scores" / spec.name
    run = score_model(spec, items_dir, score_dir, list(config.score_datasets),
                      config.limit_items or None)
    logging.info("%s: scored %d items in %.1f s", spec.name, run["items"],
                 run["wall_seconds"])
    score_dirs.append(str(score_dir))

  options = config.metrics.options()
  scored = [(spec.name, spec.path, spec.scoring) for spec in specs]
  sections = probe.run_for_audit(config.probe, scored, out)
  sections += vocab_scan.run_for_audit(config.vocab_scan, scored, out)
  if config.counterfactuals:
    sections.append(score_counterfactuals(config, specs, items_dir, score_dirs, options))
  if not distributed.is_coordinator():
    return {}
  models = runner.evaluate_all(str(items_dir), score_dirs, str(out), names, options, sections)
  if config.upload.push_to_hub:  # every output is written: a failed upload leaves them whole
    url = results_dataset.push(config.upload.push_to_hub, out, items_dir,
                               dict(zip(names, score_dirs)),
                               private=config.upload.hub_private_repo)
    logging.info("uploaded the results to %s", url)
  return models


def score_counterfactuals(config: AuditSettings, specs: list[ModelSpec], items_dir: pathlib.Path,
                          score_dirs: list[str],
                          options: evaluate.Options) -> list[str]:
  """Derives the identity-swap set of the scored items (`socialrm_jax.sources.identity_swaps`) into
  `counterfactuals/`, scores it with every model into `scores_counterfactual/<model>/`, and writes
  `<model>/counterfactual.json`; returns the report section."""
  out = pathlib.Path(config.output_dir)
  swaps_dir = out / "counterfactuals"
  # Only the items the main run scored get swaps, so a limited run stays limited; the items are
  # streamed (read again for each pass), so the audit's memory does not grow with them.
  scored = item_source.ItemSource.from_table(items_dir, list(config.score_datasets),
                                             config.limit_items or None)
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
