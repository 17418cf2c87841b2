"""The bundled suite audited with a reward model trained from SmolLM2-135M-Instruct and, beside it,
with the same base as the `loglik` proxy (the demo's model): one report, both models in every
table (the domains, the value probe's communion - agency).

  python -m socialrm_jax.main.audit \
      --config=configs/smollm2_reward_model.py:hf_model=RUN/model,output_dir=runs/smollm2_audit

`hf_model` is the trained reward model (`socialrm-train`'s OUTPUT/model, e.g. the one
benchmarks/training/smollm2_reward_model.py trains); `name` names it in the report.
"""

import ml_collections

from socialrm_jax.base import settings
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators.audit import audit_config, model_config, models

# As configs/bundled_suite.py: sized for a 2-core CPU.
SCORING = dict(max_length=1024, tokens_per_batch=4096, chunk_size=128)
BASE_NAME = "smollm2-135m-instruct"


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = settings.parse_arg(arg, output_dir="runs/smollm2_audit", hf_model="",
                            name="smollm2-135m-rm")
  if not args.hf_model:
    raise InputError("configs/smollm2_reward_model.py needs hf_model=PATH, the trained model")
  config = audit_config(output_dir=args.output_dir)
  config.models = models(model_config(BASE_NAME, "smollm2", **SCORING),
                         model_config(args.name, args.hf_model, **SCORING))
  return config
