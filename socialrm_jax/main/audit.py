"""Convert, score and compute metrics in one run, from an ml_collections config.

  python -m socialrm_jax.main.audit --config=configs/bundled_suite.py
  python -m socialrm_jax.main.audit --config=configs/bundled_suite.py --config.output_dir=runs/x \
      --config.models.smollm2_135m_instruct.max_length=512
"""

from __future__ import annotations

import pathlib

from ml_collections import config_flags

from socialrm_jax.analysis.outputs import report, results_dataset
from socialrm_jax.base import settings
from socialrm_jax.main import command
from socialrm_jax.orchestrators import audit
from socialrm_jax.scoring import distributed

UPLOAD_FAILED_EXIT_CODE = 4  # --config.push_to_hub: the outputs are whole, the upload failed
_CONFIG = config_flags.DEFINE_config_file("config", None, "An audit config (configs/*.py).",
                                          lock_config=True)
_JOB = settings.define_flags(distributed.DistributedSettings)


def main(argv):
  del argv
  config = command.load_config(_CONFIG, "configs/bundled_suite.py")
  audit.check_config(config)
  distributed.initialize(_JOB.value)
  models = audit.run_audit(config)
  if not distributed.is_coordinator():  # process 0 wrote the report and the metrics
    return
  out = pathlib.Path(config.output_dir)
  print(f"\nReport: {out / 'report.md'} (in a browser: {out / 'report.html'})")
  for name in models:
    print(f"Metrics: {out / name / 'metrics.json'}")
  print()
  print(report.headline(models))


def run():
  command.run_command("socialrm-audit", main, explain_flag_error=command.unknown_config_field,
                      exit_codes={results_dataset.UploadError: UPLOAD_FAILED_EXIT_CODE})


if __name__ == "__main__":
  run()
