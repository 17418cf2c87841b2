"""The Python API, for notebooks: `audit`, `score` and `train`, each the command of the same name
run in-process through the same orchestrator and the same settings (docs/python_api.md).

  import socialrm_jax
  result = socialrm_jax.audit("smollm2", datasets="xstest,bbq", output_dir="runs/nb",
                              limit_items=40, metrics={"n_resamples": 200})
  result.metrics["smollm2"]["domains"]   # metrics.json, as a dict
  result.pair_scores                     # every pair's two rewards (pandas DataFrame)
  socialrm_jax.score("smollm2", [{"prompt": "Hi", "chosen": "Hello!", "rejected": "Go away."}])
  socialrm_jax.train("base/", data=["preference:pairs.jsonl"], output_dir="runs/rm", max_steps=20)

The names a keyword takes are the command's: `audit`'s are the audit config's fields
(`orchestrators.audit.AuditSettings`: `--config.limit_items`, a group as a dict:
`metrics={"n_resamples": 200}` for `--config.metrics.n_resamples`) and the model's scoring
settings (`engine.ScoringOptions`: `max_length=512` for `--config.models.<name>.max_length`);
`score`'s are `ScoringOptions`, as `socialrm-score`'s flags; `train`'s are
`training.config.TrainConfig`, as `socialrm-train`'s flags. A name of none of them (or a value
of another type) is refused, naming it, by the mechanism that reads the commands' config files
(`base.settings.from_config`).

The package's face (`socialrm_jax/__init__.py`) gives these names lazily (PEP 562): importing
`socialrm_jax` loads nothing more, and `socialrm_jax.audit` imports this layer on first use.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import tempfile
from typing import Any, Iterable, Mapping, Sequence

import ml_collections
import pandas as pd

from socialrm_jax.analysis.outputs import report
from socialrm_jax.analysis.tables import pair_scores
from socialrm_jax.base import errors, settings, tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import audit as audit_lib
from socialrm_jax.orchestrators import convert
from socialrm_jax.orchestrators import train as train_lib
from socialrm_jax.scoring import engine

__all__ = ["audit", "score", "train", "AuditResult", "TrainResult"]

# TRL's preference columns (RewardTrainer's dataset): an optional prompt, the two responses.
PAIR_COLUMNS = ("prompt", "chosen", "rejected")
_SCORING_FIELDS = tuple(f.name for f in dataclasses.fields(engine.ScoringOptions))


@dataclasses.dataclass(frozen=True)
class AuditResult:
  """What an audit wrote, read back: `metrics` ({model name: metrics.json as a dict}),
  `pair_scores` (every pair with its two rewards and the model's name, `analysis.pair_scores`),
  `verdicts` ({model: {domain: the report's verdict}}), the report's paths and the folder."""
  output_dir: pathlib.Path
  metrics: dict[str, dict]
  pair_scores: pd.DataFrame
  verdicts: dict[str, dict[str, str]]
  report_md: pathlib.Path
  report_html: pathlib.Path


@dataclasses.dataclass(frozen=True)
class TrainResult:
  """A training run's folder, its exported HF model and its metrics (train_metrics.jsonl's rows
  as a DataFrame)."""
  output_dir: pathlib.Path
  model_dir: pathlib.Path
  metrics: pd.DataFrame


def _model_name(model: str) -> str:
  """A display name from a model's path or Hub id (its last part, without a revision)."""
  return pathlib.Path(model.split("@")[0].rstrip("/")).name or model


def _audit_config(model: str, datasets: str, output_dir: str, name: str | None,
                  overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """The config `socialrm-audit` would run, with `overrides` given by the command's names (the
  audit's settings, `audit.AuditSettings`, and the model's scoring settings); a name of neither
  is refused by the one mechanism (`base.settings`), naming it."""
  scoring = {k: v for k, v in overrides.items() if k in _SCORING_FIELDS}
  given = {k: v for k, v in overrides.items() if k not in scoring}
  for key in ("models", "output_dir", "datasets"):
    if key in given:
      raise InputError(f"audit: {key} is set by audit()'s own arguments, not a keyword")
  spec = audit_lib.model_config(name or _model_name(model), model, **scoring)
  return settings.config_dict(audit_lib.AuditSettings, source="audit()",
                              output_dir=str(output_dir), datasets=datasets,
                              models=audit_lib.models(spec), **given)


def audit(model: str, datasets: str = "all", output_dir: str = "runs/audit", *,
          name: str | None = None, **overrides: Any) -> AuditResult:
  """Audits `model` (a path, a Hub id `org/name[@rev]` or "smollm2") on `datasets` (the
  converter's dataset spec) into `output_dir`, as `socialrm-audit` does; returns what it wrote.
  `overrides`: the audit config's fields and the model's scoring settings, by the command's
  names."""
  config = _audit_config(model, datasets, output_dir, name, overrides)
  audit_lib.check_config(config)
  models = audit_lib.run_audit(config)
  return read_audit(config.output_dir, list(models))


def read_audit(output_dir: str | pathlib.Path, names: Sequence[str] | None = None
               ) -> AuditResult:
  """An audit folder's results (every model in it, or `names`)."""
  out = pathlib.Path(output_dir)
  if names is None:
    names = sorted(p.parent.name for p in out.glob("*/metrics.json"))
  metrics = {name: tables.read_json_object(str(out / name / "metrics.json")) for name in names}
  frames = [pair_scores.frame(out / "converted", out / "scores" / name).assign(model=name)
            for name in names]
  verdicts = {name: {domain: report.verdict(node)
                     for domain, node in m.get("domains", {}).items()}
              for name, m in metrics.items()}
  return AuditResult(out, metrics, pd.concat(frames, ignore_index=True) if frames else
                     pd.DataFrame(), verdicts, out / "report.md", out / "report.html")


def _pair_rows(pairs: Any) -> list[dict]:
  """Pairs held in memory (a DataFrame or dicts with TRL's columns) as rows for the preference
  source; refuses a row without `chosen` or `rejected`, naming it."""
  rows = pairs.to_dict("records") if isinstance(pairs, pd.DataFrame) else list(pairs)
  if not rows:
    raise InputError("score: no pairs given")
  out = []
  for number, row in enumerate(rows):
    missing = [c for c in ("chosen", "rejected") if c not in row]
    if missing:
      raise InputError(f"score: pair {number} has no {' or '.join(missing)} (TRL's columns: "
                       f"{', '.join(PAIR_COLUMNS)})")
    out.append({k: row[k] for k in PAIR_COLUMNS if k in row})
  return out


def score(model: str, pairs: Any, **options: Any) -> pd.DataFrame:
  """Rewards of pairs held in memory: a DataFrame or a list of dicts with TRL's columns (`prompt`,
  optional; `chosen`, `rejected`: texts, or message lists). Returns the pairs, in order, with
  `reward_chosen`, `reward_rejected` and `margin`. `options`: `ScoringOptions` (as
  `socialrm-score`'s flags). The pairs go through the converter and the scorer as a file of them
  would (in a temporary folder, removed after)."""
  scoring = settings.from_config(engine.ScoringOptions, options, source="score()")
  rows = _pair_rows(pairs)
  engine.check_inputs(scoring, "model", model)
  with tempfile.TemporaryDirectory(prefix="socialrm-score-") as folder:
    root = pathlib.Path(folder)
    source = root / "pairs.jsonl"
    tables.write_rows(source, rows)
    convert.convert_to(root / "converted", root, f"preference:{source}:name=pairs", "parquet")
    engine.score_model_at(model, root / "converted", root / "scores", options=scoring)
    scored = pair_scores.frame(root / "converted", root / "scores")
  if len(scored) != len(rows):
    raise InputError(f"score: {len(rows)} pairs gave {len(scored)} scored pairs")
  out = pd.DataFrame(rows)
  for column in pair_scores.REWARD_COLUMNS:
    out[column] = scored[column].to_numpy()
  return out


def train(model: str, data: str | Iterable[str], output_dir: str, **overrides: Any
          ) -> TrainResult:
  """Trains a reward model from `model` on `data` (the converter's dataset specs) into
  `output_dir`, as `socialrm-train` does (and resumes or extends a run there, as it does).
  `overrides`: `training.config.TrainConfig`'s settings, by the flags' names."""
  data = (data,) if isinstance(data, str) else tuple(data)
  config = settings.from_config(train_lib.TrainConfig, {
      **overrides, "model": model, "data": data, "output_dir": str(output_dir)}, source="train()")
  train_lib.check(config)
  errors.check_output_folder(config.output_dir, "output_dir")
  out = pathlib.Path(train_lib.run(config))
  lines = (out / train_lib.METRICS_FILE).read_text(encoding="utf-8").splitlines()
  return TrainResult(out, out / train_lib.MODEL_DIR,
                     pd.DataFrame([json.loads(line) for line in lines if line.strip()]))


