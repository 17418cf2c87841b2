"""The bundled suite audited with the embedded default model (what `make demo` runs).

  python -m socialrm_jax.main.audit --config=configs/bundled_suite.py
  python -m socialrm_jax.main.audit --config=configs/bundled_suite.py:hf_model=/path/to/rm,name=my-rm

The argument string `key=value,...` swaps the model: `hf_model` is a HF checkpoint folder, a
native Flax checkpoint folder or a GGUF file; `name` names it in the report. Other data takes the
converter's dataset spec and columns (README, "Your own preference data"):

  python -m socialrm_jax.main.audit --config=configs/bundled_suite.py:output_dir=runs/mine \
      --config.datasets=preference:data/mine.jsonl:name=mine,domain=safety \
      --config.columns=prompt=question,chosen=good,rejected=bad
"""

import ml_collections

from socialrm_jax.base import settings
from socialrm_jax.orchestrators.audit import audit_config, model_config, models

# Sized for a 2-core CPU: the bundled items are short, a CPU batch is 4,096 token slots
# (engine.CPU_BATCH_TOKENS), and a 128-item shard is what a killed run loses at most.
SCORING = dict(max_length=1024, tokens_per_batch=4096, chunk_size=128)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  # The argument's keys: any other is refused, naming it (a typo would audit the default model).
  args = settings.parse_arg(arg, output_dir="runs/demo", hf_model="", name="model")
  config = audit_config(output_dir=args.output_dir)
  if args.hf_model:
    config.models = models(model_config(args.name, args.hf_model, **SCORING))
  else:
    config.models = models(model_config("smollm2-135m-instruct", "smollm2", **SCORING))
  return config
