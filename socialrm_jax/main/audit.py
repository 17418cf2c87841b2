"""Convert, score and compute metrics in one run, from an ml_collections config.

  python -m socialrm_jax.main.audit --config=configs/bundled_suite.py
  python -m socialrm_jax.main.audit --config=configs/bundled_suite.py --config.output_dir=runs/x \
      --config.models.smollm2_135m_instruct.max_length=512
"""

from __future__ import annotations

import pathlib

from ml_collections import config_flags

from socialrm_jax.analysis import report
from socialrm_jax.base import errors, tables
from socialrm_jax.main import command
from socialrm_jax.orchestrators import audit
from socialrm_jax.scoring import engine
from socialrm_jax.sources.reading import ON_ERROR

_CONFIG = config_flags.DEFINE_config_file("config", None, "An audit config (configs/*.py).",
                                          lock_config=True)


def check_config(config) -> None:
  """Refuses a config no audit can finish, naming the field, before anything is converted."""
  errors.check_output_folder(config.output_dir, "config.output_dir")
  if config.format not in tables.FORMATS:
    raise errors.InputError(f"--config.format={config.format!r}: use one of "
                            f"{', '.join(tables.FORMATS)}")
  if config.on_error not in ON_ERROR:
    raise errors.InputError(f"--config.on_error={config.on_error!r}: use one of "
                            f"{', '.join(ON_ERROR)}")
  audit.model_specs(config)
  for key, spec in config.models.items():
    field = f"config.models.{key}."
    engine.check_inputs(audit.scoring_options(spec), f"{field}path", spec.path, prefix=field)
  errors.check_positive(config.metrics.n_resamples, "config.metrics.n_resamples")
  errors.check_positive(config.metrics.delta, "config.metrics.delta")
  probe = config.get("probe")
  if probe is not None and probe.enabled:
    errors.check_positive(probe.n_resamples, "config.probe.n_resamples")
  scan = config.get("vocab_scan")
  if scan is not None and scan.enabled:
    errors.check_positive(scan.n_resamples, "config.vocab_scan.n_resamples")
    if scan.max_tokens is not None and scan.max_tokens < 0:
      raise errors.InputError(f"config.vocab_scan.max_tokens must be >= 0 (unset or 0: the whole "
                              f"vocabulary), got {scan.max_tokens}")


def main(argv):
  del argv
  config = command.load_config(_CONFIG, "configs/bundled_suite.py")
  check_config(config)
  models = audit.run_audit(config)
  out = pathlib.Path(config.output_dir)
  print(f"\nReport: {out / 'report.md'} (in a browser: {out / 'report.html'})")
  for name in models:
    print(f"Metrics: {out / name / 'metrics.json'}")
  print()
  print(report.headline(models))


def run():
  command.run_command("socialrm-audit", main, explain_flag_error=command.unknown_config_field)


if __name__ == "__main__":
  run()
