"""Training throughput: the project's trainer (`python -m socialrm_jax.main.train`) against TRL's
RewardTrainer, each a whole process, back to back on the same machine, from the same initial
weights on the same pairs with the same hyperparameters.

  python -m benchmarks.training.train_throughput --preset=cpu35m --data_dir=../shared/data
  python -m benchmarks.training.train_throughput --preset=tiny          # the bundled slice, seconds

`--pairs=N` trains on the first N pairs instead of the preset's count.

Presets:
- `cpu35m`: a 35,267,584-parameter Llama reward model (hidden 512, 8 layers, 8 heads, 4 KV heads,
  intermediate 1024, 32,000 tokens: `gpu_throughput_presets.SIZES["35m"]`) built with
  transformers' `LlamaConfig` and `LlamaForSequenceClassification` from seed 0, with a byte-level
  BPE learned from the pairs' text and a Llama-3-style chat template; the first 1,000 HH-RLHF
  pairs of `--data_dir` with both responses non-empty (harmless-base first, as the converter
  reads them); 1 epoch, batch 8, learning rate 5e-5 decayed linearly to 0 without warmup, AdamW
  without weight decay, gradients clipped at 1.0, fp32, sequences up to 1,024 tokens.
- `1b`: for a GPU (`--dtype=bfloat16`, `--attention=cudnn` or `xla`): Llama 3.2 1B's layers
  (hidden 2048, 16 layers, 32 heads, 8 KV heads, intermediate 8192, 32,000 tokens) on the same
  1,000 pairs and hyperparameters; TRL trains float32 weights under bf16 autocast on the GPU.
- `tiny`: the same with hidden 64, 2 layers and a 4,096-token vocabulary on the bundled slice's
  first 16 pairs (a test runs it).

Both train on every pair (no held-out split), each step on the same pairs: TRL reads them in the
order the project's trainer draws them (its seeded shuffle), so the loss curves compare step by
step and differ only by rounding. Tokens: each pair's two templated sequences (prompt
and chosen, prompt and rejected, as TRL tokenizes them), the same count for both trainers, so
tokens/s is the work done per second; the project computes a pair's shared prompt once. The
table gives tokens/s over the whole process (start to exit: imports, tokenization, compilation,
training, saving) and over training alone (as each trainer reports it), wall seconds, peak
resident memory (the process's maximum RSS, from `wait4`), the final loss (mean of the last 10
steps), the token slots each trainer computes (the project's packed rows; TRL's padded sequences)
with the training seconds per 1,000 of them, and the loss curves side by side (each step's loss,
and a 10-step moving mean). `--runs=` (none) prints the slot counts alone, in seconds.

Outputs under WORK_DIR (`runs/train_throughput`): the model, `pairs-<preset>.jsonl`, each run's
folder and `results-<preset>.json`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import sys

from absl import app, flags

from benchmarks.common import (REPO, allocator, cpu_name, device_name, log, module_command,
                               on_gpu, run_process)
from benchmarks.gpu import gpu_throughput_inputs as inputs
from benchmarks.gpu.gpu_throughput_presets import SIZES
from benchmarks.training.train_comparison import (RUNS, Preset, computed_slots, table,
                                                  training_order)
from socialrm_jax.main import command
from socialrm_jax.orchestrators import convert

BUNDLED = REPO / "socialrm_jax" / "bundled"


PRESETS = {"cpu35m": Preset("35m", 1_000), "tiny": Preset("tiny", 16, batch_size=4, vocab=4096),
           # Llama 3.2 1B's layers (gpu_throughput_presets.SIZES["1b"]) for a GPU: bf16 both sides.
           "1b": Preset("1b", 1_000)}
_PRESET = flags.DEFINE_enum("preset", "cpu35m", list(PRESETS), "Model size and pairs.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Folder holding hh_rlhf/ (the full data); "
                                "default: the bundled slice.")
_WORK_DIR = flags.DEFINE_string("work_dir", "runs/train_throughput", "Where everything goes.")
_RUNS = flags.DEFINE_list("runs", list(RUNS), "Which trainers run, in this order.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the weights and of both trainers.")
_PAIRS = flags.DEFINE_integer("pairs", None, "Pairs to train on instead of the preset's.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"],
                           "Compute dtype of both trainers (ours: --dtype; TRL: bf16=True, "
                           "autocast over float32 weights, as TRL users train).")
_ATTENTION = flags.DEFINE_enum("attention", "xla", ["auto", "xla", "cudnn"],
                               "Ours: --attention (TRL runs transformers' sdpa).")


def select_pairs(data_dir: pathlib.Path, count: int, tokenizer, max_length: int) -> list[dict]:
  """The first `count` HH-RLHF pairs whose templated sequences fit `max_length` (TRL drops longer
  ones) and whose responses are not empty, as the project's pairs file rows, each with its
  `tokens`."""
  converted = convert.convert_all(data_dir, "hh_rlhf")
  rows = []
  for pair in converted.pairs:
    if not (pair["chosen"].strip() and pair["rejected"].strip()):
      continue  # an empty response: the project's pairs reader refuses it as malformed
    lengths = [len(tokenizer.apply_chat_template(
        pair["prompt"] + [{"role": "assistant", "content": pair[side]}], tokenize=True,
        return_dict=True)["input_ids"]) for side in ("chosen", "rejected")]
    if max(lengths) > max_length:
      continue
    rows.append({"prompt": pair["prompt"], "chosen": pair["chosen"],
                 "rejected": pair["rejected"], "tokens": sum(lengths)})
    if len(rows) == count:
      return rows
  raise app.UsageError(f"{data_dir}/hh_rlhf has {len(rows)} pairs within {max_length} tokens; "
                       f"the preset needs {count}")


def build_model(preset: Preset, texts: list[str], models_dir: pathlib.Path,
                seed: int) -> pathlib.Path:
  """A random Llama reward model of the preset's size, from transformers' LlamaConfig."""
  import torch
  import transformers
  size = SIZES[preset.size]
  vocab = preset.vocab or size.vocab
  digest = hashlib.sha256(json.dumps([seed, vocab, dataclasses.asdict(size), texts])
                          .encode()).hexdigest()[:12]
  folder = models_dir / f"llama-{preset.size}-{digest}"
  if (folder / "config.json").exists():
    return folder
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=inputs.train_tokenizer(texts, vocab), bos_token=inputs.BOS,
      eos_token=inputs.EOS, pad_token=inputs.PAD, clean_up_tokenization_spaces=False)
  fast.chat_template = inputs.CHAT_TEMPLATE
  config = transformers.LlamaConfig(
      vocab_size=vocab, hidden_size=size.hidden, intermediate_size=size.intermediate,
      num_hidden_layers=size.layers, num_attention_heads=size.heads,
      num_key_value_heads=size.kv_heads, max_position_embeddings=2048, rms_norm_eps=1e-5,
      rope_theta=500000.0, tie_word_embeddings=False, num_labels=1,
      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
      pad_token_id=fast.pad_token_id)
  torch.manual_seed(seed)
  model = transformers.LlamaForSequenceClassification(config)
  tmp = folder.with_name(folder.name + ".tmp")
  shutil.rmtree(tmp, ignore_errors=True)
  model.save_pretrained(tmp)
  fast.save_pretrained(tmp)
  tmp.rename(folder)
  return folder


def hyperparameter_flags(preset: Preset, seed: int) -> list[str]:
  return [f"--epochs={preset.epochs}", f"--batch_size={preset.batch_size}",
          f"--learning_rate={preset.learning_rate}", f"--seed={seed}"]


def run_ours(model: pathlib.Path, pairs: pathlib.Path, out: pathlib.Path, preset: Preset,
             seed: int) -> dict:
  shutil.rmtree(out, ignore_errors=True)
  argv = [sys.executable, "-m", "socialrm_jax.main.train", f"--model={model}",
          f"--data=preference:{pairs}", f"--output_dir={out}", *hyperparameter_flags(preset, seed),
          f"--max_length={preset.max_length}", "--eval_fraction=0", "--warmup_steps=0",
          "--lr_schedule=linear", "--weight_decay=0", "--max_grad_norm=1.0", f"--dtype={_DTYPE.value}",
          f"--attention={_ATTENTION.value}",
          "--checkpoint_every=0", "--log_every=1"]
  result = run_process(argv, out.with_suffix(".log"))
  metrics = [json.loads(line) for line in (out / "train_metrics.jsonl").read_text().splitlines()
             if line.strip()]
  steps = [m for m in metrics if "loss" in m]
  # tokens_per_second is num_tokens (both sequences of each pair) over the seconds since the
  # first step: their ratio is the training time.
  return {**result, "losses": [float(m["loss"]) for m in steps],
          "train_seconds": steps[-1]["num_tokens"] / steps[-1]["tokens_per_second"],
          "counted_tokens": int(steps[-1]["num_tokens"])}


def run_trl(model: pathlib.Path, pairs: pathlib.Path, out: pathlib.Path, preset: Preset,
            seed: int) -> dict:
  shutil.rmtree(out, ignore_errors=True)
  out.mkdir(parents=True)
  # The pairs are already in the project's order for every epoch: TRL makes one pass over them.
  argv = [*module_command("benchmarks.training.train_throughput_trl"),
          f"--model={model}", f"--pairs={pairs}", f"--output_dir={out}",
          *hyperparameter_flags(dataclasses.replace(preset, epochs=1), seed),
          f"--max_length={preset.max_length}", f"--dtype={_DTYPE.value}",
          f"--device={'gpu' if on_gpu() else 'cpu'}"]
  result = run_process(argv, out.with_suffix(".log"))
  report = json.loads((out / "trl_metrics.json").read_text())
  return {**result, "losses": [float(h["loss"]) for h in report["history"]],
          "train_seconds": report["train_seconds"], "trl": report["trl"],
          "counted_tokens": int(report["history"][-1]["num_tokens"]),
          "torch_threads": report["threads"]}


def main(argv):
  del argv
  preset = PRESETS[_PRESET.value]
  if _PAIRS.value is not None:
    preset = dataclasses.replace(preset, pairs=_PAIRS.value)
  work = pathlib.Path(_WORK_DIR.value).resolve()
  (work / "models").mkdir(parents=True, exist_ok=True)
  data_dir = pathlib.Path(_DATA_DIR.value) if _DATA_DIR.value else BUNDLED
  for run in _RUNS.value:
    if run not in RUNS:
      raise app.UsageError(f"--runs: {run!r} is none of {', '.join(RUNS)}")
  converted = convert.convert_all(data_dir, "hh_rlhf")
  texts = inputs.corpus(converted.items)
  model = build_model(preset, texts, work / "models", _SEED.value)
  import transformers
  tokenizer = transformers.AutoTokenizer.from_pretrained(model)
  rows = select_pairs(data_dir, preset.pairs, tokenizer, preset.max_length)
  tokens = sum(row.pop("tokens") for row in rows)
  pairs = work / f"pairs-{_PRESET.value}.jsonl"
  pairs.write_text("".join(json.dumps(row) + "\n" for row in rows))
  # TRL reads the pairs in the order the project's trainer draws them, one step's batch after
  # another, so each step of both trainers sees the same pairs and the loss curves compare step by
  # step (TRL samples them in order: `train_sampling_strategy="sequential"`).
  in_order = work / f"pairs-{_PRESET.value}-in-order.jsonl"
  in_order.write_text("".join(json.dumps(rows[i]) + "\n" for i in training_order(
      len(rows), preset, _SEED.value)))
  slots = computed_slots(model, rows, preset, _SEED.value)
  log(f"{len(rows)} pairs, {tokens:,} tokens (both sequences of each pair); model {model.name}; "
      f"{device_name()}, {os.cpu_count()} cores, allocator {allocator()}; {_DTYPE.value}, "
      f"our attention {_ATTENTION.value}")
  runners = {"ours": run_ours, "trl": run_trl}
  inputs_of = {"ours": pairs, "trl": in_order}
  results = {}
  for run in _RUNS.value:
    log(f"{run}: training ...")
    results[run] = runners[run](model, inputs_of[run], work / f"{run}-{_PRESET.value}", preset,
                                _SEED.value)
    log(f"{run}: {results[run]['wall_seconds']:.1f} s")
  lines = table(results, tokens, slots)
  print("\n".join(lines))
  (work / f"results-{_PRESET.value}.json").write_text(json.dumps({
      "preset": dataclasses.asdict(preset), "pairs": len(rows), "tokens": tokens,
      "cpu": cpu_name(), "allocator": allocator(), "device": device_name(), "dtype": _DTYPE.value,
      "attention": _ATTENTION.value, "cores": os.cpu_count(), "slots": slots, "results": results,
      "table": lines}, indent=1))


if __name__ == "__main__":
  command.run_command("benchmarks.training.train_throughput", main)
