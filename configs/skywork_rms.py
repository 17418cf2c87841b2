"""Audits of public reward models, for a user who has their weights on disk.

  python -m socialrm_jax.main.audit \
      --config=configs/skywork_rms.py:model=v2_qwen3_0p6b,weights=/ckpt/Skywork-Reward-V2-Qwen3-0.6B

`model` picks one of MODELS; `weights` is the HuggingFace checkpoint folder (config.json,
*.safetensors, tokenizer files) or a native Flax checkpoint made by `socialrm-convert-checkpoint`;
`data_dir` (default: the bundled suite) is a folder of full datasets; `output_dir` where the run
goes. The settings per model are what each needs to fit and to read its chat template right.
"""

import ml_collections

from socialrm_jax.base import settings
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators.audit import audit_config, model_config, models

MODELS = {
    # Skywork-Reward-V2 (Qwen3ForSequenceClassification), 0.6B: one device holds it in fp32.
    "v2_qwen3_0p6b": dict(name="skywork-reward-v2-qwen3-0.6b", dtype="float32",
                          max_length=4096, tokens_per_batch=32768),
    # Skywork-Reward-V2 (LlamaForSequenceClassification), 8B: bf16 (16 GB) on one 80 GB GPU or
    # split over `model` on 16 GB TPU cores (v5e: data:4,model:2 per 8 chips).
    "v2_llama31_8b": dict(name="skywork-reward-v2-llama-3.1-8b", dtype="bfloat16",
                          max_length=4096, tokens_per_batch=32768),
    # Skywork-Reward-Gemma-2-27B (Gemma2ForSequenceClassification): 54 GB in bf16, so its
    # parameters are split over 4 devices of the `model` axis; soft-capping and sliding windows
    # are in the model code.
    "gemma2_27b": dict(name="skywork-reward-gemma-2-27b", dtype="bfloat16", mesh="data:2,model:4",
                       max_length=4096, tokens_per_batch=16384),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  # The argument's keys: any other is refused, naming it.
  args = settings.parse_arg(arg, model="v2_qwen3_0p6b", weights="", data_dir="bundled",
                            output_dir="")
  if args.model not in MODELS:
    raise InputError(f"model={args.model!r}; known: {', '.join(MODELS)}")
  scoring = dict(MODELS[args.model])
  config = audit_config(output_dir=args.output_dir or "runs/" + args.model)
  config.data_dir = args.data_dir
  config.models = models(model_config(scoring.pop("name"), args.weights or "/path/to/" + args.model,
                                      **scoring))
  return config
