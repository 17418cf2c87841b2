"""The value-bias ablation grid in one run: reward models trained from different bases on the same
preference data by the same procedure, each audited along its training by the value probe.

  python -m socialrm_jax.main.ablation --config=configs/value_bias_ablation.py:preset=tiny

The grid is bases x data sources x quantities x seeds (`configs/value_bias_ablation.py`). For
each data source the converter reads its spec once (`convert.convert_all`), its gold pairs are
shuffled once (`numpy.random.default_rng(config.shuffle_seed)`), and a quantity q is the first q
pairs of that shuffle (0: all), written to `OUTPUT/data/<source>/pairs-<q>.jsonl`: the quantities
are nested prefixes, so a larger subsample holds every pair of a smaller one, and every base and
seed trains on the same file. A run trains with `orchestrators.train` (the settings of
`config.train`, its seed the run's) into `OUTPUT/runs/<source>/<base>/<q>/seed<seed>/train/`,
with checkpoints (`checkpoint_steps`) at step 0 (the base with its fresh score head) and at
`config.audit.checkpoints` steps spaced evenly on a log scale up to the last
(`analysis.ablation.log_spaced_steps`; the last is the run's final model, `train/model/`). Each is
exported as a HF folder (`train.export_checkpoint`) into `.../exports/<step>/`, probed
(`orchestrators.probe`, the settings of `config.audit.probe`) into `.../probe/<step>/`, and the
export removed once its probe is written (a study base's export is the base's size). With `config.audit.vocab_scan.enabled` the
final model is also scanned (`orchestrators.vocab_scan`) into `.../vocab_scan/`.

A rerun skips what is done: a trained run (its manifest names its export), a probe whose
probe.json exists; a run killed mid-training resumes from its last checkpoint (the trainer's own
resume). A run whose training diverges (a NaN or infinite loss or gradient norm: the trainer
stops and exports nothing, `training/divergence.py`) is not audited: the grid goes on with the
others, lists it in grid.json's `failed` with the trainer's line, and its table says so.

Across processes (one per host, `runtime/distributed.py`; docs/multihost.md) the runs go one
after another on the whole job: each trains across every process (`orchestrators/train.py`), and
each probe and scan is scored by every process, chunks divided; process 0 alone writes the
subsamples (the others wait at a barrier), the probes' files, removes the exports and writes
grid.json, the table and the plot. Every process reads the same files to decide what is done, so
all skip the same runs.

Outputs: `OUTPUT/grid.json` (the audited checkpoints, one row each, and the base-family tests),
`OUTPUT/value_bias_ablation.md` (the table) and `OUTPUT/value_bias_ablation.png` (the plot).
Statistics: `analysis/studies/ablation.py`.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import time
from typing import Any

import ml_collections
import numpy as np
from absl import logging

from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.studies import ablation
from socialrm_jax.base import settings, tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import convert, probe, train, vocab_scan
from socialrm_jax.orchestrators.audit import resolve_data_dir
from socialrm_jax.runtime import compilation_cache, distributed
from socialrm_jax.scoring import engine
from socialrm_jax.training import divergence, pair_batches

GRID_FILE = "grid.json"
REPORT_FILE = "value_bias_ablation.md"
FIGURE_FILE = "value_bias_ablation.png"
EXPORTS = "exports"


# The training settings the grid sets for each run itself (`train_settings`); keep_checkpoints:
# the audited checkpoints must all stay.
SET_BY_THE_GRID = ("model", "data", "output_dir", "seed", "checkpoint_steps", "keep_checkpoints",
                   "run_name")


@dataclasses.dataclass(frozen=True)
class Base:
  """A base of the grid (`config.bases.<name>`)."""
  path: str = settings.field("", "The base's folder (a causal-LM checkpoint).")
  family: str = settings.field("", "The base's model family (the test compares families).")


@dataclasses.dataclass(frozen=True)
class Source:
  """A data source of the grid (`config.sources.<name>`)."""
  spec: str = settings.field("", "The converter's dataset spec (e.g. preference:PATH).")
  quantities: tuple[int, ...] = settings.field(
      (0,), "Pair counts (0: all), taken as prefixes of one shuffle of the source's pairs.")
  shuffle_seed: int = settings.field(0, "Seed of that shuffle.")


@dataclasses.dataclass(frozen=True)
class CheckpointAudit:
  """How each run's checkpoints are audited (`config.audit`)."""
  checkpoints: int = settings.field(3, "Log-spaced checkpoints probed after step 0 (the last is "
                                    "the final model).")
  scoring: engine.ScoringOptions = settings.group(
      engine.ScoringOptions, flags_of=("dtype", "tokens_per_batch"),
      tokens_per_batch=probe.TOKENS_PER_BATCH)
  probe: probe.ProbeOptions = settings.nested(probe.ProbeOptions)
  vocab_scan: vocab_scan.ScanStage = settings.nested(vocab_scan.ScanStage)


@dataclasses.dataclass(frozen=True)
class AblationSettings:
  """The grid: socialrm-ablation's flags and its config file's keys (the groups `bases`,
  `sources`, `train` (`train.TrainConfig`, by its flag names) and `audit` in the file only:
  `--config.train.learning_rate=2e-5`)."""
  output_dir: str = settings.field(None, "Where the grid's runs, table and plot go.",
                                   required=True)
  data_dir: str = settings.field("", "Folder datasets' parent ('bundled': the suite shipped in "
                                 "socialrm_jax/bundled; '': sources are paths).")
  seeds: tuple[int, ...] = settings.field((0,), "Training seeds of every (base, source, quantity).")
  bases: dict[str, Base] = settings.named(Base)
  sources: dict[str, Source] = settings.named(Source)
  train: train.TrainConfig = settings.nested(train.TrainConfig)
  audit: CheckpointAudit = settings.nested(CheckpointAudit)


def ablation_config(**overrides) -> ml_collections.ConfigDict:
  """A grid with every default (`AblationSettings`) as a ConfigDict; a config file sets the rest."""
  return settings.config_dict(AblationSettings, **overrides)


def ablation_settings(config: ml_collections.ConfigDict | AblationSettings) -> AblationSettings:
  """A grid's config as `AblationSettings`: a key of no setting is refused, naming it."""
  if isinstance(config, AblationSettings):
    return config
  return settings.from_config(AblationSettings, config)


@dataclasses.dataclass(frozen=True)
class Run:
  source: str
  base: str
  family: str
  quantity: int       # pairs asked for; 0: all of the source
  seed: int

  @property
  def name(self) -> str:
    return f"{self.source}/{self.base}/{self.quantity}/seed{self.seed}"


def plan(config: ml_collections.ConfigDict | AblationSettings) -> list[Run]:
  """Every run of the grid, data sources outermost, seeds innermost."""
  config = ablation_settings(config)
  return [Run(source, base, spec.family, int(q), int(seed))
          for source, data in config.sources.items() for base, spec in config.bases.items()
          for q in data.quantities for seed in config.seeds]


def check_config(config: ml_collections.ConfigDict | AblationSettings) -> AblationSettings:
  """Refuses a grid that cannot finish, naming the config field, before anything runs; returns
  it as `AblationSettings`."""
  config = ablation_settings(config)
  if not config.bases:
    raise InputError("config.bases is empty: name at least one base")
  for name, spec in config.bases.items():
    if not spec.path:
      raise InputError(f"config.bases.{name}.path is empty: give the base's folder "
                       f"(configs/value_bias_ablation.py:{name}=PATH)")
    if not pathlib.Path(spec.path).exists():
      raise InputError(f"config.bases.{name}.path: no such folder", spec.path)
    if not spec.family:
      raise InputError(f"config.bases.{name}.family is empty")
  if not config.sources:
    raise InputError("config.sources is empty: name at least one data source")
  for name, data in config.sources.items():
    if not data.spec:
      raise InputError(f"config.sources.{name}.spec is empty: give the converter's dataset spec "
                       f"(e.g. preference:PATH)")
    if not data.quantities or any(int(q) < 0 for q in data.quantities):
      raise InputError(f"config.sources.{name}.quantities must be pair counts >= 0 (0: all), "
                       f"got {list(data.quantities)}")
  if not config.seeds:
    raise InputError("config.seeds is empty")
  if config.audit.checkpoints < 1:
    raise InputError(f"config.audit.checkpoints must be at least 1, got "
                     f"{config.audit.checkpoints}")
  default, given = settings.flat(train.TrainConfig()), settings.flat(config.train)
  for name in SET_BY_THE_GRID:
    if given[name] != default[name]:
      raise InputError(f"config.train.{name} is set by the grid itself")
  train.check(settings.replace(config.train, model="base", data=("data",), output_dir="out"))
  return config


def write_subsamples(name: str, data: Source | ml_collections.ConfigDict, data_dir: str | None,
                     out: pathlib.Path) -> dict[int, pathlib.Path]:
  """{quantity: its pairs file}: nested prefixes of one seeded shuffle of the source's pairs."""
  folder = out / "data" / name
  wanted = {int(q): folder / f"pairs-{int(q)}.jsonl" for q in data.quantities}
  if (folder / "shuffle.json").exists():
    written = tables.read_json_object(folder / "shuffle.json")
    if (written["spec"], written["shuffle_seed"]) != (data.spec, data.shuffle_seed):
      raise InputError(f"holds subsamples of {written['spec']!r} (shuffle seed "
                       f"{written['shuffle_seed']}), not of config.sources.{name}: use a new "
                       "config.output_dir", folder)
    if all(path.exists() for path in wanted.values()):
      return wanted
  try:
    pairs = convert.convert_all(data_dir, data.spec).pairs
  except InputError as e:
    raise InputError(f"config.sources.{name}.spec: {e}") from None
  order = np.random.default_rng(data.shuffle_seed).permutation(len(pairs))
  for q, path in wanted.items():
    if q > len(pairs):
      raise InputError(f"config.sources.{name}.quantities: {q} pairs asked, the source has "
                       f"{len(pairs)}")
    rows = [{"prompt": pairs[i]["prompt"], "chosen": pairs[i]["chosen"],
             "rejected": pairs[i]["rejected"], "id": pairs[i]["pair_id"]}
            for i in order[:q or len(pairs)]]
    tables.atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in rows).encode())
  tables.atomic_write_json(folder / "shuffle.json", {
      "spec": data.spec, "pairs": len(pairs), "shuffle_seed": data.shuffle_seed,
      "order": [pairs[i]["pair_id"] for i in order]})
  return wanted


def total_steps(config: AblationSettings, pairs: int) -> int:
  """The optimizer steps a run on `pairs` training pairs takes, as the trainer counts them
  (checked against its manifest once trained)."""
  return train.total_steps(config.train.loop, pairs,
                           config.train.optimizer.gradient_accumulation_steps)


def training_pairs(config: AblationSettings, pairs: int) -> int:
  """The training pairs of a run on `pairs` pairs before any is dropped over --max_length: what
  the held-out split leaves."""
  train_index, _ = pair_batches.split_indices(pairs, config.train.pairs.eval_fraction, 0)
  return len(train_index)


def train_settings(config: AblationSettings, run: Run, pairs: pathlib.Path,
                   out: pathlib.Path, checkpoint_steps: tuple[int, ...]) -> train.TrainConfig:
  return settings.replace(config.train, model=config.bases[run.base].path,
                          data=(f"preference:{pairs}:name={pairs.stem}",), output_dir=str(out),
                          seed=run.seed, checkpoint_steps=checkpoint_steps,
                          # W&B names the run by its grid key; TensorBoard finds it under
                          # OUTPUT/runs/<key>/train/logs.
                          run_name=run.name)


def _is_trained(folder: pathlib.Path, settings: train.TrainConfig) -> bool:
  """Whether `folder` holds this run finished; a finished run of other settings is refused."""
  path = folder / train.MANIFEST_FILE
  manifest = tables.read_json_object(path) if path.exists() else {}
  if "export" not in manifest:
    return False
  wanted = settings.to_json()
  changed = sorted(k for k, v in manifest["settings"].items()
                   if k not in ("output_dir", "checkpoint_steps", "report_to", "run_name")
                   and wanted.get(k) != v)
  if changed:
    raise InputError(f"holds a finished run with other settings ({', '.join(changed)}): use a "
                     "new config.output_dir", folder)
  return True


def run_one(config: AblationSettings, run: Run, pairs: pathlib.Path, quantity: int,
            out: pathlib.Path) -> list[dict[str, Any]]:
  """Trains (unless done) and probes one run's checkpoints; returns its rows."""
  folder = out / "runs" / run.name
  train_dir = folder / "train"
  planned = total_steps(config, training_pairs(config, quantity))
  steps = ablation.log_spaced_steps(planned, config.audit.checkpoints)
  run_config = train_settings(config, run, pairs, train_dir, tuple(steps[:-1]))
  if not _is_trained(train_dir, run_config):
    train.run(run_config)
  manifest = tables.read_json_object(train_dir / train.MANIFEST_FILE)
  long_pairs = manifest["data"].get("long_pairs", {}).get("train", {})
  total = total_steps(config, manifest["data"]["train_pairs"])
  if manifest["total_steps"] != total:
    raise RuntimeError(f"{run.name}: the trainer took {manifest['total_steps']} steps, the grid "
                       f"counted {total}")
  if total != planned:
    # Pairs over --max_length were dropped, so the run is shorter than its subsample gave: its
    # checkpoints before its end are audited, and its final model.
    steps = [step for step in steps[:-1] if step < total] + [total]
  options = config.audit.scoring
  probing = config.audit.probe
  rows = []
  for step in steps:
    model = train_dir / train.MODEL_DIR if step == total else folder / EXPORTS / str(step)
    probe_dir = folder / "probe" / str(step)
    if (probe_dir / "probe.json").exists():
      result = tables.read_json_object(probe_dir / "probe.json")
    else:
      if step != total:
        train.export_checkpoint(run_config, step, model)
      result = probe.run(str(model), probe_dir, options, probing, name=f"{run.name}@{step}")
    if not distributed.is_coordinator():  # the rest is process 0's, once all have scored
      continue
    if step != total:
      shutil.rmtree(model, ignore_errors=True)  # probed: a study base's export is its size
    rows.append({"run": run.name, "source": run.source, "base": run.base, "family": run.family,
                 "quantity": quantity, "seed": run.seed, "step": step, "total_steps": total,
                 # The run's training pairs over --max_length (socialrm-train's --truncation);
                 # None: trained before its manifest counted them.
                 "pairs_dropped": long_pairs.get("dropped"),
                 "prompts_cut": long_pairs.get("prompt_cut"),
                 "eval_accuracy": manifest.get("final_eval", {}).get("eval_accuracy")
                 if step == total else None,
                 **ablation.agency_minus_communion(result)})
  scan = config.audit.vocab_scan
  if scan.enabled and not (folder / "vocab_scan" / "scan.json").exists():
    vocab_scan.run(str(train_dir / train.MODEL_DIR), folder / "vocab_scan", options,
                   scan.scan_options(), name=run.name)
  return rows


def failed_lines(failed: list[dict[str, Any]]) -> list[str]:
  """Markdown: the runs whose training failed, each with the trainer's line (none: nothing)."""
  if not failed:
    return []
  return [f"{len(failed)} run(s) FAILED and were not audited (their training diverged; they are "
          "in no row or test above):", ""] + report.table(
              ["data", "base", "family", "pairs", "seed", "why"],
              [[f["source"], f["base"], f["family"], str(f["quantity"]), str(f["seed"]),
                f["error"].replace("|", "\\|")] for f in failed]) + [""]


def run(config: ml_collections.ConfigDict | AblationSettings) -> dict[str, Any]:
  """Trains and audits every run of the grid (skipping what is done), then writes grid.json, the
  table and the plot; returns grid.json's content ({} on a process other than the coordinator)."""
  config = check_config(config)
  out = pathlib.Path(config.output_dir)
  # Every run of a base trains and probes at the same few shapes: compiled once, for the grid.
  compilation_cache.enable(config.audit.scoring.cache_dir())
  data_dir = resolve_data_dir(config.data_dir) if config.data_dir else None
  if distributed.is_coordinator():
    for name, data in config.sources.items():
      write_subsamples(name, data, data_dir, out)
  distributed.barrier("ablation: subsamples written")
  files = {name: write_subsamples(name, data, data_dir, out)  # written: their paths
           for name, data in config.sources.items()}
  counts = {name: {q: sum(1 for _ in open(path, encoding="utf-8")) for q, path in f.items()}
            for name, f in files.items()}
  runs = plan(config)
  rows: list[dict[str, Any]] = []
  failed: list[dict[str, Any]] = []
  start = time.monotonic()
  for i, one in enumerate(runs):
    try:
      rows += run_one(config, one, files[one.source][one.quantity],
                      counts[one.source][one.quantity], out)
      outcome = "done"
    except divergence.TrainingDivergedError as error:
      failed.append({"run": one.name, "source": one.source, "base": one.base,
                     "family": one.family, "quantity": counts[one.source][one.quantity],
                     "seed": one.seed, "error": str(error)})
      outcome = f"FAILED, not audited: {error}"
    elapsed = time.monotonic() - start
    eta = elapsed / (i + 1) * (len(runs) - i - 1)
    print(f"ablation: run {i + 1}/{len(runs)} {one.name} {outcome} | {elapsed:.0f} s | "
          f"ETA {eta:.0f} s", flush=True)
  if not distributed.is_coordinator():
    return {}
  tests = ablation.summarise(rows)
  procedure = {k: v for k, v in config.train.to_json().items() if k not in SET_BY_THE_GRID}
  result = {"runs": len(runs),
            "bases": {k: dataclasses.asdict(v) for k, v in config.bases.items()},
            "sources": {k: {"spec": v.spec, "quantities": list(v.quantities),
                            "shuffle_seed": v.shuffle_seed} for k, v in config.sources.items()},
            "seeds": list(config.seeds), "train": procedure,
            "probe": {**dataclasses.asdict(config.audit.probe),
                      "dtype": config.audit.scoring.dtype,
                      "tokens_per_batch": config.audit.scoring.tokens_per_batch},
            "rows": rows, "failed": failed,
            "tests": tests, "seconds": time.monotonic() - start}
  tables.atomic_write_json(out / GRID_FILE, result)
  figure = ablation.plot(rows, out / FIGURE_FILE)
  text = "\n".join(["# Value-bias ablation grid", ""] +
                   ablation.report_lines(rows, tests, figure and pathlib.Path(figure).name) +
                   failed_lines(failed))
  tables.atomic_write_bytes(out / REPORT_FILE, text.encode())
  logging.info("ablation grid: %d runs in %.0f s", len(runs), result["seconds"])
  return result
