"""Convert, score and compute metrics in one run, from an ml_collections config.

  python -m socialrm_jax.audit --config=configs/bundled_suite.py
  python -m socialrm_jax.audit --config=configs/bundled_suite.py --config.output_dir=runs/x \
      --config.models.smollm2_135m_instruct.max_length=512
"""

from __future__ import annotations

import pathlib
import sys

from absl import app
from ml_collections import config_flags

from socialrm_jax import pipeline
from socialrm_jax.analysis import report
from socialrm_jax.errors import InputError

_CONFIG = config_flags.DEFINE_config_file("config", None, "An audit config (configs/*.py).",
                                          lock_config=True)


def main(argv):
  del argv
  config = _CONFIG.value
  if config is None:
    print("socialrm-audit: error: --config is required (e.g. configs/bundled_suite.py)",
          file=sys.stderr)
    sys.exit(2)
  try:
    models = pipeline.run_audit(config)
  except InputError as e:
    print(f"socialrm-audit: error: {e}", file=sys.stderr)
    sys.exit(2)
  out = pathlib.Path(config.output_dir)
  print(f"\nReport: {out / 'report.md'}")
  for name in models:
    print(f"Metrics: {out / name / 'metrics.json'}")
  print()
  print(report.headline(models))


def run():
  app.run(main)


if __name__ == "__main__":
  run()
