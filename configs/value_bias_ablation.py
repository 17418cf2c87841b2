"""The value-bias study's ablation grid: bases x data sources x quantities x seeds, each run trained
by `socialrm-train` and probed along its training (agency vs communion).

  python tools/tiny_bases.py --output_dir=runs/tiny_bases
  python -m socialrm_jax.main.ablation --config=configs/value_bias_ablation.py:preset=tiny

  python -m socialrm_jax.main.ablation \
      --config=configs/value_bias_ablation.py:preset=study,llama=PATH/Llama-3.1-8B,gemma2=PATH/gemma-2-9b,output_dir=runs/value_bias \
      --config.sources.skywork_80k.spec=preference:PATH/Skywork-Reward-Preference-80K-v0.2 \
      --config.sources.unified_feedback.spec=preference:PATH/Unified-Feedback

Argument keys (`key=value,...`): `preset` (`tiny`, the default, or `study`), `output_dir`; for
`tiny`, `bases_dir` (what tools/tiny_bases.py wrote, default runs/tiny_bases); for `study`, each
base's folder by its name (`llama`, `gemma2`) and each source's spec (`skywork_80k`,
`unified_feedback`; a spec holding commas is given as `--config.sources.NAME.spec=...`). The
config is `orchestrators.ablation.AblationSettings` (a key of no setting is refused, naming it):
`output_dir`, `data_dir` and `seeds` are also flags (`--seeds=0,1,2`; a flag wins over the file),
and every field can be overridden with `--config.FIELD=...` (e.g. `--config.seeds="(0, 1, 2)"`,
`--config.train.learning_rate=2e-5`, `--config.audit.probe.words_per_category=4`); `train` is
socialrm-train's settings by their flag names.

Presets:
- `study`: the study's own training settings, as reported from its training code: LoRA rank 32,
  alpha 64, learning rate 1e-5, 2 epochs, batch 16, 1,024 tokens, bf16; data
  Skywork-Reward-Preference-80K (all of it) and subsamples of Unified-Feedback. The data cannot
  ship with the project: the sources' specs are the converter's (`preference:PATH` of a file or a
  folder saved with `save_to_disk`) and are empty until given. The Unified-Feedback subsample
  sizes (10k to 80k, doubling, up to Skywork's size), the seeds (3) and the held-out share (5%)
  are this config's choices, not the study's.
- `tiny`: two tiny random bases (Llama and Gemma 2, tools/tiny_bases.py) x the bundled HH-RLHF
  slice's 16 and 48 pairs x seeds 0 and 1: the grid's every stage on 2 CPU cores in minutes.
"""

import ml_collections

from socialrm_jax.base import settings
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators.ablation import ablation_config

# `config.train` is `socialrm-train`'s settings (training/config.py `TrainConfig`), by its flags'
# names; a name of no setting is refused.
STUDY_TRAIN = dict(lora_rank=32, lora_alpha=64.0, learning_rate=1e-5, epochs=2, batch_size=16,
                   max_length=1024, dtype="bfloat16", eval_fraction=0.05, warmup_steps=0,
                   lr_schedule="linear", log_every=10, checkpoint_every=500)
# The study's procedure (LoRA on every projection, the score head trained in full, linear decay)
# at the sizes of a tiny random base: rank 4, and a rate that moves it in a few steps.
TINY_TRAIN = dict(lora_rank=4, lora_alpha=8.0, learning_rate=1e-3, epochs=2, batch_size=4,
                  max_length=512, dtype="float32", eval_fraction=0.0, warmup_steps=0,
                  lr_schedule="linear", log_every=1, checkpoint_every=0)


def base(path: str, family: str) -> dict:
  return {"path": path, "family": family}


def source(spec: str, quantities: tuple[int, ...], shuffle_seed: int = 0) -> dict:
  """A data source: the converter's spec, the pair counts (0: all) taken as prefixes of one
  shuffle of its pairs (seeded by `shuffle_seed`)."""
  return {"spec": spec, "quantities": quantities, "shuffle_seed": shuffle_seed}


def audit(checkpoints: int, words_per_category: int, n_resamples: int, n_permutations: int,
          dtype: str) -> dict:
  """How checkpoints are audited: `checkpoints` log-spaced steps after step 0 (the last is the
  final model), each probed (`orchestrators.probe.ProbeOptions`) with the scoring settings
  `dtype` and `tokens_per_batch`; the vocabulary scan of the final model when enabled."""
  return {"checkpoints": checkpoints, "dtype": dtype, "tokens_per_batch": 4096,
          "probe": {"words_per_category": words_per_category, "seed": 0,
                    "n_resamples": n_resamples, "n_permutations": n_permutations},
          "vocab_scan": {"enabled": False, "max_tokens": 0, "n_resamples": n_resamples,
                         "n_permutations": n_permutations}}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  # The argument's keys: any other is refused, naming it.
  args = settings.parse_arg(arg, preset="tiny", output_dir="", bases_dir="runs/tiny_bases",
                            llama="", gemma2="", skywork_80k="", unified_feedback="")
  if args.preset == "study":
    return ablation_config(
        output_dir=args.output_dir or "runs/value_bias",
        data_dir="",  # folder datasets' parent; the study's sources are paths
        bases={"llama": base(args.llama, "llama"), "gemma2": base(args.gemma2, "gemma2")},
        sources={"skywork_80k": source(args.skywork_80k, (0,)),
                 "unified_feedback": source(args.unified_feedback,
                                            (10_000, 20_000, 40_000, 80_000))},
        seeds=(0, 1, 2), train=STUDY_TRAIN, audit=audit(6, 12, 1000, 10_000, "bfloat16"))
  if args.preset == "tiny":
    return ablation_config(
        output_dir=args.output_dir or "runs/value_bias_tiny",
        data_dir="bundled",  # socialrm_jax/bundled: the HH-RLHF slice's 60 pairs
        bases={"llama": base(f"{args.bases_dir}/llama", "llama"),
               "gemma2": base(f"{args.bases_dir}/gemma2", "gemma2")},
        sources={"hh_rlhf": source("hh_rlhf", (16, 48))},
        seeds=(0, 1), train=TINY_TRAIN, audit=audit(3, 4, 200, 200, "float32"))
  raise InputError(f"config argument preset={args.preset!r}: use tiny or study")
