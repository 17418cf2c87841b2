"""Convert, score and compute metrics in one run, from an ml_collections config.

  python -m socialrm_jax.main.audit --config=configs/bundled_suite.py
  python -m socialrm_jax.main.audit --config=configs/bundled_suite.py --output_dir=runs/x \
      --config.models.smollm2_135m_instruct.max_length=512 --config.metrics.n_resamples=200

The settings are `orchestrators.audit.AuditSettings`: each top-level one is a flag (`--output_dir`,
`--datasets`, `--limit_items`, ...) and a key of the config file, and a flag given on the command
line wins over the file; the groups (`models.<key>`, whose keys are socialrm-score's flag names,
`metrics`, `probe`, `vocab_scan`) are set in the file or as `--config.<group>.<field>=...`. A key
of no setting is refused, naming it.
"""

from __future__ import annotations

import dataclasses
import pathlib

from socialrm_jax.analysis.outputs import report, results_dataset
from socialrm_jax.base import settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import audit
from socialrm_jax.runtime import distributed

UPLOAD_FAILED_EXIT_CODE = 4  # --push_to_hub: the outputs are whole, the upload failed


@dataclasses.dataclass(frozen=True)
class AuditCommandSettings:
  """socialrm-audit's settings: the audit's (`audit.AuditSettings`) and the job's."""
  audit: audit.AuditSettings = settings.group(audit.AuditSettings)
  job: distributed.DistributedSettings = settings.group(distributed.DistributedSettings)


def main(command_settings: AuditCommandSettings) -> None:
  config = audit.check_config(command_settings.audit)
  distributed.initialize(command_settings.job)
  models = audit.run_audit(config)
  if not distributed.is_coordinator():  # process 0 wrote the report and the metrics
    return
  out = pathlib.Path(config.output_dir)
  print(f"\nReport: {out / 'report.md'} (in a browser: {out / 'report.html'})")
  for name in models:
    print(f"Metrics: {out / name / 'metrics.json'}")
  print()
  print(report.headline(models))


COMMAND = command.Command(
    "socialrm-audit", AuditCommandSettings, main, config_example="configs/bundled_suite.py",
    exit_codes={results_dataset.UploadError: UPLOAD_FAILED_EXIT_CODE})


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
