"""What the training benchmarks that set the project's trainer beside TRL's share
(benchmarks.training.train_throughput, benchmarks.training.smollm2_reward_model): the preset, the
token slots each trainer computes and the table of both runs. Each trainer runs as a whole
process (`common.run_process`)."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from benchmarks.common import on_gpu


@dataclasses.dataclass(frozen=True)
class Preset:
  size: str
  pairs: int
  batch_size: int = 8
  learning_rate: float = 5e-5
  epochs: int = 1
  max_length: int = 1024
  vocab: int | None = None    # None: the size's vocabulary.


RUNS = ("ours", "trl")
SMOOTH = 10


def training_order(count: int, preset: Preset, seed: int) -> list[int]:
  """The pairs' indices in the order the project's trainer trains on them: each epoch's seeded
  shuffle (`pair_batches.epoch_order`), cut to whole batches, epoch after epoch."""
  from socialrm_jax.training import pair_batches
  whole = count // preset.batch_size * preset.batch_size
  return [int(i) for epoch in range(preset.epochs)
          for i in pair_batches.epoch_order(count, seed, epoch)[:whole]]


def computed_slots(model: pathlib.Path, rows: list[dict], preset: Preset, seed: int) -> dict:
  """Token slots each trainer computes over the run: the project's, the rows of each step's
  blocks as its trainer packs them (`pair_batches.pack_pairs`, the default `--row_length`, one
  row a block on a CPU, blocks of rows on a GPU); TRL's, each step's 2 x batch_size sequences padded to the longest."""
  from socialrm_jax.orchestrators import train
  from socialrm_jax.scoring import item_tokens
  from socialrm_jax.training import pair_batches
  templater = item_tokens.Templater(item_tokens.load_tokenizer(str(model)), is_causal=True,
                                    max_length=preset.max_length)
  encoded = pair_batches.encode_pairs(templater, [
      pair_batches.Pair(str(i), row["prompt"], row["chosen"], row["rejected"])
      for i, row in enumerate(rows)])
  layout = pair_batches.pair_packing(train.TrainConfig().pairs.row_length, preset.max_length,
                                     "gpu" if on_gpu() else "cpu", 1)
  order = training_order(len(rows), preset, seed)
  ours = trl = 0
  for start in range(0, len(order), preset.batch_size):
    step = [encoded[i] for i in order[start:start + preset.batch_size]]
    blocks = pair_batches.pack_pairs(step, [0.0] * len(step), **layout)
    ours += sum(block.input_ids.size for block in blocks)
    trl += 2 * len(step) * max(len(s) for item in step for s in item.sequences)
  return {"ours": ours, "trl": trl}


def moving_mean(values: list[float], width: int = SMOOTH) -> np.ndarray:
  x = np.asarray(values, np.float64)
  if len(x) < width:
    return x
  return np.convolve(x, np.ones(width) / width, mode="valid")


def table(results: dict, tokens: int, slots: dict) -> list[str]:
  """The figures of both runs side by side. A run stopped early (TRL with `--trl_steps`) is
  measured on the tokens it counted (its `num_tokens`), not the whole run's `tokens`; its token
  slots and seconds per slot are not shown (the slots are counted for the whole run)."""
  def counted(r: dict) -> int:
    return r.get("counted_tokens") or tokens

  def partial(r: dict) -> bool:
    return counted(r) < tokens

  lines = [f"{'run':<32} {'tokens/s':>9} {'train tok/s':>11} {'wall s':>8} {'peak RSS MiB':>12} "
           f"{'final loss':>10}"]
  titles = {"ours": "socialrm_jax (socialrm-train)", "trl": "TRL RewardTrainer"}
  for name, r in results.items():
    train = f"{counted(r) / r['train_seconds']:.0f}" if r.get("train_seconds") else "-"
    lines.append(f"{titles[name]:<32} {counted(r) / r['wall_seconds']:>9.0f} {train:>11} "
                 f"{r['wall_seconds']:>8.1f} {r['peak_rss_mib']:>12.0f} "
                 f"{np.mean(r['losses'][-SMOOTH:]):>10.4f}"
                 + (f"  (stopped after {len(r['losses'])} steps)" if partial(r) else ""))
  lines.append("token slots computed (training): " + ", ".join(
      f"{name} {slots[name]:,} ({slots[name] / tokens:.2f} a counted token"
      + (f", {1000 * results[name]['train_seconds'] / slots[name]:.2f} s per 1k slots)"
         if results.get(name, {}).get("train_seconds") and not partial(results[name])
         else ")") for name in RUNS))
  lines.append("tokens each trainer counted (its num_tokens): " + ", ".join(
      f"{name} {r['counted_tokens']:,}" for name, r in results.items()) + f"; the pairs' {tokens:,}")
  if {"ours", "trl"} <= set(results):
    ours, trl = results["ours"], results["trl"]
    lines.append("speed-up, whole process: "
                 f"{counted(ours) / ours['wall_seconds'] / (counted(trl) / trl['wall_seconds']):.2f}x"
                 + (" (TRL stopped early: its start-up weighs on fewer tokens)"
                    if partial(trl) else ""))
    if ours.get("train_seconds") and trl.get("train_seconds"):
      lines.append("speed-up, training alone: "
                   f"{counted(ours) / ours['train_seconds'] / (counted(trl) / trl['train_seconds']):.2f}x")
    steps = min(len(ours["losses"]), len(trl["losses"]))
    gap = np.abs(np.subtract(ours["losses"][:steps], trl["losses"][:steps]))
    lines.append(f"losses step by step, {steps} steps: largest difference {gap.max():.2e} (step "
                 f"{int(gap.argmax()) + 1}), mean {gap.mean():.2e}")
    a, b = moving_mean(ours["losses"]), moving_mean(trl["losses"])
    n = min(len(a), len(b))
    lines.append(f"loss curves ({SMOOTH}-step moving mean): largest gap "
                 f"{np.abs(a[:n] - b[:n]).max():.4f}, mean gap {np.abs(a[:n] - b[:n]).mean():.4f}")
    lines.append("")
    lines.append(f"{'step':>6} {'ours loss':>10} {'TRL loss':>10} {'ours mean10':>12} "
                 f"{'TRL mean10':>11}")
    shown = sorted({0, steps - 1, *np.unique(np.geomspace(1, steps, 12).astype(int) - 1)})
    for step in shown:
      ma = a[step - SMOOTH + 1] if step >= SMOOTH - 1 and step - SMOOTH + 1 < len(a) else np.nan
      mb = b[step - SMOOTH + 1] if step >= SMOOTH - 1 and step - SMOOTH + 1 < len(b) else np.nan
      lines.append(f"{step + 1:>6} {ours['losses'][step]:>10.4f} {trl['losses'][step]:>10.4f} "
                   f"{ma:>12.4f} {mb:>11.4f}")
  return lines


