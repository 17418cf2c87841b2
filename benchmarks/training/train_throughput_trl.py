"""benchmarks/training/train_throughput.py's TRL side, run as its own process: TRL's RewardTrainer on the
benchmark's model folder and pairs file, with the benchmark's hyperparameters.

  python -m benchmarks.training.train_throughput_trl --model=DIR --pairs=FILE --output_dir=DIR \
      --epochs=1 --batch_size=8 --learning_rate=5e-5 --max_length=1024 --seed=0

The pairs file is the one the project's trainer reads (`prompt` a message list, `chosen` and
`rejected` texts); here each row becomes TRL's conversational explicit-prompt example (the
prompt's messages, each response an assistant message), which TRL templates with the model's chat
template. Writes OUTPUT/trl_metrics.json: TRL's log history (one entry per step: loss, accuracy,
margin, num_tokens, ...), the train runtime and the tokens TRL counted. The pairs are taken in the
file's order (`train_sampling_strategy="sequential"`): the benchmark writes them in the order the
project's trainer draws them.

`--gguf_file=NAME` loads the model from that GGUF file in `--model` (transformers' `gguf_file=`:
dequantized to float32, a new score head). `--lora_rank` trains LoRA adapters through peft
(`LoraConfig(task_type="SEQ_CLS")`: the score head trains in full, no dropout) on
`--lora_targets`. `--init=FILE.npz` sets the score head (`score`, our [1, D] kernel: its `score.weight`) and each
adapter's A (`<target path>/lora_a`, our [L, in, r]) to the project's trainer's initial values, so
both trainers start from the same weights. `--eval_pairs` are evaluated every `--eval_steps` steps
(TRL's eval_loss, eval_accuracy).
"""

from __future__ import annotations

import json
import pathlib
import time

from absl import app, flags

_MODEL = flags.DEFINE_string("model", None, "The reward model folder.", required=True)
_PAIRS = flags.DEFINE_string("pairs", None, "The pairs (.jsonl).", required=True)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where TRL writes.", required=True)
_EPOCHS = flags.DEFINE_integer("epochs", 1, "Epochs.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 8, "Pairs per step.")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
_MAX_LENGTH = flags.DEFINE_integer("max_length", 1024, "Longest sequence.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.")
_SCHEDULE = flags.DEFINE_string("lr_scheduler_type", "linear", "transformers' schedule name.")
_MAX_GRAD_NORM = flags.DEFINE_float("max_grad_norm", 1.0, "Gradient clipping.")
_WEIGHT_DECAY = flags.DEFINE_float("weight_decay", 0.0, "AdamW weight decay.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"],
                           "float32, or bf16 autocast over float32 weights (TRL's bf16=True).")
_DEVICE = flags.DEFINE_enum("device", "cpu", ["cpu", "gpu"], "Where TRL trains.")
_GGUF_FILE = flags.DEFINE_string("gguf_file", None, "A GGUF file in --model to load from.")
_LORA_RANK = flags.DEFINE_integer("lora_rank", 0, "LoRA rank (peft); 0: full fine-tuning.")
_LORA_ALPHA = flags.DEFINE_float("lora_alpha", 16.0, "LoRA alpha.")
_LORA_TARGETS = flags.DEFINE_list("lora_targets", ["q_proj", "k_proj", "v_proj", "o_proj",
                                                   "gate_proj", "up_proj", "down_proj"],
                                  "Projections LoRA adapts.")
_INIT = flags.DEFINE_string("init", None, "npz of the project's initial score head and LoRA A.")
_EVAL_PAIRS = flags.DEFINE_string("eval_pairs", None, "Held-out pairs (.jsonl) to evaluate.")
_EVAL_STEPS = flags.DEFINE_integer("eval_steps", 0, "Evaluate every this many steps (0: never).")
_STOP_AFTER_STEPS = flags.DEFINE_integer("stop_after_steps", 0, "Stop after this many steps, the "
                                         "schedule still the whole run's (0: train to the end).")

# Our parameter paths' projection names -> HF module paths under a decoder layer.
_HF_MODULES = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj",
               "v_proj": "self_attn.v_proj", "o_proj": "self_attn.o_proj",
               "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
               "down_proj": "mlp.down_proj"}


def set_initial_weights(model, path: str) -> None:
  """The project's trainer's initial score head and LoRA A, into the peft model (in place)."""
  import numpy as np
  import torch
  values = np.load(path)
  parameters = dict(model.named_parameters())
  with torch.no_grad():
    head = torch.from_numpy(values["score/kernel"].copy())  # [1, D], as score.weight
    heads = [p for name, p in parameters.items()
             if (name.startswith("score.") or ".score." in name) and name.endswith("weight")]
    if not heads:
      raise SystemExit("--init: the model has no score head")
    for parameter in heads:
      parameter.copy_(head)
    for key in values.files:
      if not key.endswith("/lora_a"):
        continue
      projection = key.split("/")[-3]  # 'layers/attn/q_proj/kernel/lora_a'
      for layer, a in enumerate(values[key]):  # [in, r] -> lora_A [r, in]
        name = f"layers.{layer}.{_HF_MODULES[projection]}.lora_A.default.weight"
        parameters[next(n for n in parameters if n.endswith(name))].copy_(
            torch.from_numpy(a.T.copy()))


def conversational(rows: list[dict]):
  import datasets
  return datasets.Dataset.from_list([
      {"prompt": row["prompt"], "chosen": [{"role": "assistant", "content": row["chosen"]}],
       "rejected": [{"role": "assistant", "content": row["rejected"]}]} for row in rows])


def read_rows(path: str) -> list[dict]:
  return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line.strip()]


def main(argv):
  del argv
  start = time.perf_counter()
  import torch
  import transformers
  import trl
  torch.manual_seed(_SEED.value)
  rows = read_rows(_PAIRS.value)
  dataset = conversational(rows)
  eval_dataset = conversational(read_rows(_EVAL_PAIRS.value)) if _EVAL_PAIRS.value else None
  source = {"gguf_file": _GGUF_FILE.value} if _GGUF_FILE.value else {}
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      _MODEL.value, num_labels=1, dtype=torch.float32, **source)
  tokenizer = transformers.AutoTokenizer.from_pretrained(_MODEL.value, **source)
  if _GGUF_FILE.value:
    # transformers dequantizes a GGUF file's tensors as it loads them (to `dtype`), yet keeps its
    # quantizer on the model, and Trainer refuses a model quantized by a method it cannot train:
    # these weights are plain float32 tensors, so the quantizer's marks are removed (its own
    # `remove_quantization_config`).
    if getattr(model, "hf_quantizer", None) is not None:
      model.hf_quantizer.remove_quantization_config(model)
  if model.config.pad_token_id is None:
    model.config.pad_token_id = tokenizer.pad_token_id
  peft_config = None
  if _LORA_RANK.value:
    import peft
    peft_config = peft.LoraConfig(task_type="SEQ_CLS", r=_LORA_RANK.value,
                                  lora_alpha=_LORA_ALPHA.value, lora_dropout=0.0,
                                  target_modules=list(_LORA_TARGETS.value))
  out = pathlib.Path(_OUTPUT_DIR.value)
  evaluation = dict(eval_strategy="steps", eval_steps=_EVAL_STEPS.value,
                    per_device_eval_batch_size=_BATCH_SIZE.value) if (
                        eval_dataset is not None and _EVAL_STEPS.value) else {}
  args = trl.RewardConfig(
      output_dir=str(out / "trl"), num_train_epochs=_EPOCHS.value,
      per_device_train_batch_size=_BATCH_SIZE.value, learning_rate=_LEARNING_RATE.value,
      lr_scheduler_type=_SCHEDULE.value, warmup_steps=0, weight_decay=_WEIGHT_DECAY.value,
      max_grad_norm=_MAX_GRAD_NORM.value, max_length=_MAX_LENGTH.value, seed=_SEED.value,
      logging_steps=1, save_strategy="no", report_to=[], use_cpu=_DEVICE.value == "cpu",
      bf16=_DTYPE.value == "bfloat16", fp16=False,
      dataloader_num_workers=0, disable_tqdm=True, train_sampling_strategy="sequential",
      **evaluation)
  trainer = trl.RewardTrainer(model=model, args=args, train_dataset=dataset,
                              eval_dataset=eval_dataset, processing_class=tokenizer,
                              peft_config=peft_config)
  if _STOP_AFTER_STEPS.value:
    class Stop(transformers.TrainerCallback):
      def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step >= _STOP_AFTER_STEPS.value
    trainer.add_callback(Stop())
  if _INIT.value:
    set_initial_weights(trainer.model, _INIT.value)
  kept = len(trainer.train_dataset)
  if kept != len(rows):
    raise SystemExit(f"TRL kept {kept} of {len(rows)} pairs (longer than --max_length dropped): "
                     "the benchmark's pairs must all fit")
  setup = time.perf_counter() - start
  result = trainer.train()
  history = [entry for entry in trainer.state.log_history if "loss" in entry]
  evaluations = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
  out.mkdir(parents=True, exist_ok=True)
  (out / "trl_metrics.json").write_text(json.dumps({
      "trl": trl.__version__, "transformers": transformers.__version__,
      "torch": torch.__version__, "threads": torch.get_num_threads(), "pairs": kept,
      "setup_seconds": setup, "train_seconds": result.metrics["train_runtime"],
      "steps": trainer.state.global_step, "history": history, "evaluations": evaluations},
      indent=1))


if __name__ == "__main__":
  app.run(main)
