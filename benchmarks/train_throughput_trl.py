"""benchmarks/train_throughput.py's TRL side, run as its own process: TRL's RewardTrainer on the
benchmark's model folder and pairs file, with the benchmark's hyperparameters.

  python benchmarks/train_throughput_trl.py --model=DIR --pairs=FILE --output_dir=DIR \
      --epochs=1 --batch_size=8 --learning_rate=5e-5 --max_length=1024 --seed=0

The pairs file is the one the project's trainer reads (`prompt` a message list, `chosen` and
`rejected` texts); here each row becomes TRL's conversational explicit-prompt example (the
prompt's messages, each response an assistant message), which TRL templates with the model's chat
template. Writes OUTPUT/trl_metrics.json: TRL's log history (one entry per step: loss, accuracy,
margin, num_tokens, ...), the train runtime and the tokens TRL counted. The pairs are taken in the
file's order (`train_sampling_strategy="sequential"`): the benchmark writes them in the order the
project's trainer draws them.
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


def main(argv):
  del argv
  start = time.perf_counter()
  import datasets
  import torch
  import transformers
  import trl
  torch.manual_seed(_SEED.value)
  rows = [json.loads(line) for line in pathlib.Path(_PAIRS.value).read_text().splitlines()
          if line.strip()]
  dataset = datasets.Dataset.from_list([
      {"prompt": row["prompt"], "chosen": [{"role": "assistant", "content": row["chosen"]}],
       "rejected": [{"role": "assistant", "content": row["rejected"]}]} for row in rows])
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      _MODEL.value, num_labels=1, dtype=torch.float32)
  tokenizer = transformers.AutoTokenizer.from_pretrained(_MODEL.value)
  out = pathlib.Path(_OUTPUT_DIR.value)
  args = trl.RewardConfig(
      output_dir=str(out / "trl"), num_train_epochs=_EPOCHS.value,
      per_device_train_batch_size=_BATCH_SIZE.value, learning_rate=_LEARNING_RATE.value,
      lr_scheduler_type=_SCHEDULE.value, warmup_steps=0, weight_decay=_WEIGHT_DECAY.value,
      max_grad_norm=_MAX_GRAD_NORM.value, max_length=_MAX_LENGTH.value, seed=_SEED.value,
      logging_steps=1, save_strategy="no", report_to=[], use_cpu=_DEVICE.value == "cpu",
      bf16=_DTYPE.value == "bfloat16", fp16=False,
      dataloader_num_workers=0, disable_tqdm=True, train_sampling_strategy="sequential")
  trainer = trl.RewardTrainer(model=model, args=args, train_dataset=dataset,
                              processing_class=tokenizer)
  kept = len(trainer.train_dataset)
  if kept != len(rows):
    raise SystemExit(f"TRL kept {kept} of {len(rows)} pairs (longer than --max_length dropped): "
                     "the benchmark's pairs must all fit")
  setup = time.perf_counter() - start
  result = trainer.train()
  history = [entry for entry in trainer.state.log_history if "loss" in entry]
  out.mkdir(parents=True, exist_ok=True)
  (out / "trl_metrics.json").write_text(json.dumps({
      "trl": trl.__version__, "transformers": transformers.__version__,
      "torch": torch.__version__, "threads": torch.get_num_threads(), "pairs": kept,
      "setup_seconds": setup, "train_seconds": result.metrics["train_runtime"],
      "steps": trainer.state.global_step, "history": history}, indent=1))


if __name__ == "__main__":
  app.run(main)
