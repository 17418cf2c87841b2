"""Trains a Bradley-Terry reward model from a decoder base on preference data, in JAX.

Interface (stable; the ablation grid calls it in-process):

  from socialrm_jax.orchestrators import train
  train.run(train.Settings(model=PATH, data=("preference:pairs.jsonl",), output_dir=OUT,
                           max_steps=100, batch_size=8, learning_rate=1e-4, seed=0,
                           checkpoint_every=50, checkpoint_steps=(0, 10)))  # -> OUT
  train.export_checkpoint(settings, step, FOLDER)  # a checkpoint as a HF folder, to score

and `python -m socialrm_jax.main.train --model=PATH --data=SPEC[,SPEC...] --output_dir=OUT
--max_steps=N (or --epochs=N) --batch_size=N --learning_rate=X --seed=N --checkpoint_every=N
[--config=FILE]`, whose flags are `Settings`' fields. A run writes:

  OUT/train_metrics.jsonl   one row per `log_every` steps (TRL's names: loss, accuracy, margin,
                            rewards/chosen, rewards/rejected, learning_rate, grad_norm,
                            num_tokens; tokens_per_second) and per evaluation (eval_loss,
                            eval_accuracy, eval_margin, ...); strict JSON: a value that is
                            not finite is null and named in the row's "non_finite" list
  OUT/checkpoints/<step>/   orbax: trained parameters, optimizer state, RNG, data position
                            (every `checkpoint_every` steps, at `checkpoint_steps`, at the end)
  OUT/model/                the trained reward model as a HF folder (LoRA merged)
  OUT/logs/                 with --report_to=tensorboard: the same rows as TensorBoard events
                            (training/trackers.py; W&B too with --report_to=wandb)
  OUT/split.json            the held-out pair ids (seeded) and the train / eval counts
  OUT/train_manifest.json   settings, the base's and the data's sha256, steps, final metrics
  OUT/.train.lock           held by the run writing OUT (its host and pid)

One run writes a folder at a time: a second `run` into a folder a live process is training into
is refused at once, naming that process; a lock a killed run left is taken over (the kernel drops
it with the process; base/writer_lock.py, scoring's lock too).

The same command again resumes from the last checkpoint (it says which step) and ends on the
weights an uninterrupted run ends on: the data order is a seeded shuffle per epoch, so the data
position is the step, and every step is deterministic. A larger `max_steps` or `epochs` (and
only those: any other setting that changes what is trained is refused) extends a finished or
interrupted run: it resumes from the last checkpoint and says so, and the learning rate follows
the schedule recomputed for the new length, read at the resumed step on: what transformers'
Trainer (and so TRL's RewardTrainer) does when resumed with a larger max_steps, from its second
resumed step (its first still takes the rate saved with the optimizer;
tests/training/test_optimizer.py). A linear decay that had reached 0 thus rises again to where the
longer schedule stands. A shorter run is refused.

The first step whose loss or gradient norm is NaN or infinite stops the run before anything is
saved or exported (`training/divergence.py`): one line names the step and the last checkpoint,
`TrainingDivergedError` (the command exits 3), and no OUT/model/.

Across processes (a launcher starts one per host; `--coordinator_address` etc., docs/multihost.md):
the mesh spans every device of the job (`training_mesh`), so a step's global batch is the
one-process run's (the same seeded order and data position). Every process reads and tokenizes
the same pairs and packs each global batch alike, then places only the rows its own devices hold
(`jax.make_array_from_process_local_data`, `scoring/mesh.py: put_process_rows`); parameters and
optimizer state are split over `model` as in one process. Every process writes its part of each
orbax checkpoint and restores from it; process 0 alone holds the lock and writes split.json,
train_metrics.jsonl (and the trackers), the manifest and the export (whose weights every process
gathers). One process killed: the launcher stops the others, and the same command again resumes
from the last checkpoint all of them completed (tests/end_to_end/test_training_multiprocess.py).

What is trained, how: `socialrm_jax/training/` (pairs packed prefix-shared, read where the
scorer reads; TRL's loss; AdamW with warmup and decay, clipping, accumulation; LoRA or full).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import pathlib
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from socialrm_jax.base import settings as settings_lib
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.base.writer_lock import WriterLock
from socialrm_jax.models import attention as attention_lib
from socialrm_jax.models import default_model, reward_model
from socialrm_jax.orchestrators import convert
from socialrm_jax.scoring import engine, item_tokens, packing
from socialrm_jax.scoring import distributed
from socialrm_jax.scoring import mesh as mesh_lib
from socialrm_jax.scoring import run_manifest
from socialrm_jax.training import checkpoints as checkpoints_lib
from socialrm_jax.training import (divergence, hf_export, optimizer, pair_batches, trackers,
                                   trainable)
from socialrm_jax.training import train_step as train_step_lib

METRICS_FILE = "train_metrics.jsonl"
MANIFEST_FILE = "train_manifest.json"
SPLIT_FILE = "split.json"
MODEL_DIR = "model"
LOCK_FILE = ".train.lock"  # held by the run writing the folder (base/writer_lock.py)
LN2 = math.log(2.0)

# The loss "stays at ln 2" when its mean over this many logged steps is within LN2_TOLERANCE.
LN2_WINDOW_STEPS = 20
LN2_TOLERANCE = 0.005
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj")


@dataclasses.dataclass(frozen=True)
class Settings:
  """Everything a training run reads; each field is a flag of `socialrm-train` (its name, its
  help) and a key of its `--config` file (base/settings.py derives both)."""
  model: str = settings_lib.field(
      "", "The base: a causal-LM checkpoint folder (a score head is added) or a one-output reward "
      "model.")
  data: tuple[str, ...] = settings_lib.field(
      (), "The converter's dataset specs (`socialrm-convert --datasets`): folder datasets' gold "
      "pairs under `data_dir`, `preference:PATH[:...]`, saved HF datasets.", repeatable=True)
  data_dir: str | None = settings_lib.field(
      None, "Where folder datasets named in `data` / `eval_data` are.")
  eval_data: tuple[str, ...] = settings_lib.field(
      (), "Held-out pairs given apart; empty: a seeded `eval_fraction` of `data` is held out.",
      repeatable=True)
  eval_fraction: float = settings_lib.field(
      0.05, "Share of `data` held out for evaluation when `eval_data` is empty (0: none).")
  output_dir: str = settings_lib.field(
      "", "Where metrics, checkpoints, the exported model and the manifest go.")
  max_steps: int = settings_lib.field(
      0, "Optimizer steps; 0: `epochs` passes over the training pairs.")
  epochs: int = settings_lib.field(
      1, "Passes over the training pairs when `max_steps` is 0.")
  batch_size: int = settings_lib.field(
      8, "Pairs per micro-batch (a multiple of the mesh's data axis).")
  gradient_accumulation_steps: int = settings_lib.field(
      1, "Micro-batches whose gradients one optimizer step sums (optax.MultiSteps).")
  learning_rate: float = settings_lib.field(
      1e-4, "Peak learning rate (TRL's RewardConfig default).")
  lr_schedule: str = settings_lib.field(
      "linear", "Decay after warmup: linear (to 0 at the last step), cosine, or constant.",
      choices=optimizer.SCHEDULES)
  warmup_steps: int = settings_lib.field(
      0, "Optimizer steps of linear warmup from 0.")
  weight_decay: float = settings_lib.field(
      0.0, "AdamW's decoupled weight decay (not on biases and norm scales).")
  max_grad_norm: float = settings_lib.field(
      1.0, "Global gradient norm clipped to (0: no clipping).")
  adam_beta1: float = settings_lib.field(
      0.9, "AdamW's first-moment decay.")
  adam_beta2: float = settings_lib.field(
      0.999, "AdamW's second-moment decay.")
  adam_epsilon: float = settings_lib.field(
      1e-8, "AdamW's epsilon.")
  seed: int = settings_lib.field(
      0, "Seed of the held-out split, the data order, the new score head and LoRA's A.")
  # A pair's templated conversation; beyond it prompt tokens are dropped from the left.
  max_length: int = settings_lib.field_of(engine.ScoringOptions, "max_length", default=1024)
  row_length: int = settings_lib.field(
      512, "Tokens of a packed row: a step's pairs are packed several to a row this long (a longer "
      "pair gets a row of its own; rows are at most twice max_length), so few shapes compile.")
  dtype: str = settings_lib.field(
      "float32", "Compute dtype: float32, or bfloat16 (trained weights and optimizer state stay "
      "float32).", choices=tuple(reward_model.DTYPES))
  lora_rank: int = settings_lib.field(
      0, "LoRA rank; 0: full fine-tuning.")
  lora_alpha: float = settings_lib.field(
      16.0, "LoRA's alpha: the update is (alpha / rank) A B.")
  lora_targets: tuple[str, ...] = settings_lib.field(
      DEFAULT_LORA_TARGETS, "The projections LoRA adapts.")
  center_rewards_coefficient: float | None = settings_lib.field(
      None, "TRL's center_rewards_coefficient: adds coef * mean((r_c + r_r)^2); None: off.")
  eval_every: int = settings_lib.field(
      0, "Evaluate the held-out pairs every this many steps (0: at the end only).")
  report_to: tuple[str, ...] = settings_lib.field(
      ("none",), "Where train_metrics.jsonl's rows go too, as TRL's report_to: tensorboard "
      "(event files under OUTPUT/logs/), wandb (when installed), all, or none.")
  run_name: str = settings_lib.field(
      "", "The run's name in Weights & Biases (TRL's run_name; the ablation grid's run key).")
  log_every: int = settings_lib.field(
      10, "Write a metrics row (the mean over the steps since the last) every this many steps.")
  checkpoint_every: int = settings_lib.field(
      500, "Save a checkpoint every this many steps (and at the end; 0: at the end only).")
  checkpoint_steps: tuple[int, ...] = settings_lib.field(
      (), "Further steps to save a checkpoint at (0: the initial weights), e.g. log-spaced ones "
      "for an audit of training (`export_checkpoint`).")
  keep_checkpoints: int = settings_lib.field(
      0, "Checkpoints kept (the newest); 0: all.")
  mesh: str | None = settings_lib.field_of(engine.ScoringOptions, "mesh")
  pad_token_id: int = settings_lib.field(
      -1, "The exported config's pad_token_id; -1: the base's (else the tokenizer's pad, else "
      "eos).")
  # Default xla: the kernel whose gradients under the packed masks the tests check (auto picks
  # cuDNN on GPU in bfloat16, splash on TPU; their gradients are not checked here).
  attention: str = settings_lib.field_of(engine.ScoringOptions, "attention", default="xla")

  def to_json(self) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


# Settings that change what is trained: a resume must find them as the checkpoint's run had them,
# but for the run's length (`_LENGTH_FIELDS`), which a resume may make longer.
_RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(Settings)
                       if f.name not in ("output_dir", "checkpoint_every", "checkpoint_steps",
                                         "keep_checkpoints", "log_every", "attention", "mesh",
                                         "report_to", "run_name"))
_LENGTH_FIELDS = ("max_steps", "epochs")


def check(settings: Settings) -> None:
  """Refuses settings that cannot run, one line naming the flag."""
  if not settings.model:
    raise InputError("--model is required")
  if not settings.data:
    raise InputError("--data is required: the converter's dataset specs")
  if not settings.output_dir:
    raise InputError("--output_dir is required")
  for name in ("batch_size", "gradient_accumulation_steps", "max_length", "row_length",
               "log_every"):
    if getattr(settings, name) < 1:
      raise InputError(f"--{name} must be at least 1, got {getattr(settings, name)}")
  for name in ("max_steps", "warmup_steps", "checkpoint_every", "eval_every", "lora_rank",
               "keep_checkpoints"):
    if getattr(settings, name) < 0:
      raise InputError(f"--{name} must be 0 or more, got {getattr(settings, name)}")
  if settings.max_steps == 0 and settings.epochs < 1:
    raise InputError("--epochs must be at least 1 when --max_steps is 0")
  if settings.attention == "splash":
    raise InputError(f"--attention=splash: {attention_lib.SPLASH_FORWARD_ONLY}")
  if not 0 <= settings.eval_fraction < 1:
    raise InputError(f"--eval_fraction must be in [0, 1), got {settings.eval_fraction}")
  if settings.learning_rate <= 0:
    raise InputError(f"--learning_rate must be positive, got {settings.learning_rate}")
  if settings.lr_schedule not in optimizer.SCHEDULES:
    raise InputError(f"--lr_schedule must be one of {', '.join(optimizer.SCHEDULES)}")
  reward_model.model_dtype(settings.dtype)
  trackers.resolve(settings.report_to)


def _pairs(conversion: convert.Conversion) -> list[pair_batches.Pair]:
  """The conversion's gold pairs to train on; a `margin` attribute of an item is TRL's margin."""
  margins = {}
  for item in conversion.items:
    attributes = item.get("attributes") or {}
    if isinstance(attributes, str):
      attributes = json.loads(attributes)
    if attributes.get("margin") is not None:
      margins[item["item_id"]] = float(attributes["margin"])
  return [pair_batches.Pair(p["pair_id"], list(p["prompt"]), p["chosen"], p["rejected"],
                            margins.get(p["item_id"], 0.0)) for p in conversion.pairs]


def load_pairs(specs: Sequence[str], data_dir: str | None, flag: str) -> list[pair_batches.Pair]:
  try:
    pairs = _pairs(convert.convert_all(data_dir, list(specs)))
  except InputError as e:
    raise InputError(f"--{flag}: {e}") from None
  if not pairs:
    raise InputError(f"--{flag}: the data gave no preference pair")
  return pairs


def data_sha256(pairs: Sequence[pair_batches.Pair]) -> str:
  """sha256 of the pairs as trained on (ids, conversations, margins), in their order."""
  digest = hashlib.sha256()
  for p in pairs:
    digest.update(json.dumps(dataclasses.asdict(p), sort_keys=True).encode("utf-8"))
    digest.update(b"\n")
  return digest.hexdigest()


def export_pad_token_id(settings: Settings, model: trainable.TrainModel, tokenizer) -> int:
  if settings.pad_token_id >= 0:
    return settings.pad_token_id
  for candidate in (model.hf_config.get("pad_token_id"), tokenizer.pad_token_id,
                    tokenizer.eos_token_id):
    if isinstance(candidate, int):
      return candidate
  raise InputError("--pad_token_id: neither the base's config nor its tokenizer names a pad or "
                   "eos token; give the id the exported config should name")


def _json_line(row: dict) -> str:
  """A metrics row as one line of strict JSON: a non-finite value is null, named in
  `"non_finite"` (training/divergence.py)."""
  return json.dumps(divergence.json_row(row), allow_nan=False) + "\n"


class MetricsLog:
  """train_metrics.jsonl, appended a row at a time; a resume first drops rows after its step.
  Each row goes to the `--report_to` trackers too (training/trackers.py). Of a multi-process
  job's processes, the coordinator writes (`writes`); the others only keep the rows."""

  def __init__(self, path: pathlib.Path, resume_step: int,
               to: Sequence[trackers.Tracker] = (), writes: bool = True):
    self.path, self.writes = path, writes
    self.trackers = list(to)
    rows = []
    if resume_step and path.exists():
      rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
      rows = [r for r in rows if r.get("step", 0) <= resume_step]
    if writes:
      tables.atomic_write_bytes(path, "".join(map(_json_line, rows)).encode())
    self.rows = rows

  def add(self, row: dict) -> None:
    self.rows.append(row)
    if not self.writes:
      return
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(_json_line(row))
    for tracker in self.trackers:
      tracker.log(row)

  def close(self) -> None:
    for tracker in self.trackers:
      tracker.close()


def pair_packing(settings: Settings, platform: str, data_size: int) -> dict:
  """`pair_batches.pack_pairs`' layout arguments for a run: rows of `row_length` (at most twice
  `max_length`, the longest pair), longer buckets up to that, blocks of `rows_per_block` rows."""
  row_length = min(settings.row_length, 2 * settings.max_length)
  return dict(buckets=packing.length_buckets(2 * settings.max_length, row_length),
              row_length=row_length, row_multiple=data_size,
              rows_per_block=rows_per_block(platform, row_length, data_size))


def rows_per_block(platform: str, row_length: int, data_size: int) -> int:
  """Rows of one block (one call of the jitted train step): on a CPU one a device (there a padding
  row costs as much as a real one, and rows run no faster together); on accelerators as many as
  the scorer's default batch holds, a multiple of the data axis."""
  if platform == "cpu":
    return data_size
  rows = engine.DEFAULT_TOKENS_PER_BATCH // row_length // data_size * data_size
  return max(data_size, rows)


def _mean_rows(rows: Sequence[dict]) -> dict[str, float]:
  """The mean of each metric over the steps' rows (TRL's names; the pair count left out)."""
  return {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "pairs"}


def _evaluate(step_fn, trained, frozen, encoded, margins, packing_args) -> dict[str, float]:
  """Pooled metrics over the held-out pairs (every pair weighted alike)."""
  blocks = pair_batches.pack_pairs(encoded, margins, **packing_args)
  metrics = jax.device_get(step_fn.evaluate(trained, frozen, [b.arrays() for b in blocks]))
  out = {f"eval_{k}": float(metrics[k]) for k in (
      "loss", "accuracy", "margin", "rewards/chosen", "rewards/rejected", "mean_reward",
      "min_reward", "max_reward")}
  out["eval_pairs"] = int(metrics["pairs"])
  return out


@dataclasses.dataclass
class _TrainState:
  """What a run trains and with what: the step, the optimizer's schedule, the trained and the
  frozen parameters, the optimizer state, the RNG key, LoRA's scale."""
  schedule: Any
  step_fn: train_step_lib.TrainStep
  trained: dict
  frozen: dict
  opt_state: Any
  rng: Any
  lora_scale: float


def _train_state(settings: Settings, model: trainable.TrainModel, mesh,
                 total_steps: int) -> _TrainState:
  """The fresh state of a run (what a checkpoint's restore replaces)."""
  tx, schedule = optimizer.make_optimizer(
      learning_rate=settings.learning_rate, total_steps=total_steps,
      warmup_steps=settings.warmup_steps, schedule=settings.lr_schedule,
      weight_decay=settings.weight_decay, max_grad_norm=settings.max_grad_norm,
      adam_beta1=settings.adam_beta1, adam_beta2=settings.adam_beta2,
      adam_epsilon=settings.adam_epsilon,
      accumulation_steps=settings.gradient_accumulation_steps)
  lora = settings.lora_rank > 0
  trained, frozen = trainable.split_trainable(model.params, lora)
  adapters = {}
  if lora:
    targets = trainable.lora_targets(model, settings.lora_targets)
    adapters = trainable.init_lora(model, targets, settings.lora_rank, settings.seed)
  lora_scale = settings.lora_alpha / settings.lora_rank if lora else 1.0
  step_fn = train_step_lib.TrainStep(
      model, tx, mesh, dtype=reward_model.model_dtype(settings.dtype), lora_scale=lora_scale,
      center_rewards_coefficient=settings.center_rewards_coefficient)
  trained.update(step_fn.replicated(adapters))
  rng = step_fn.replicated(jax.random.key_data(jax.random.key(settings.seed)))
  return _TrainState(schedule, step_fn, trained, frozen, step_fn.init(trained), rng, lora_scale)


def export_checkpoint(settings: Settings, step: int, output: str | os.PathLike) -> str:
  """Writes checkpoint `step` of the run `settings` describe as a HF folder at `output` (as
  `OUT/model/`, LoRA merged), for the project's commands to score; returns its path."""
  store = checkpoints_lib.Checkpoints(settings.output_dir)
  if step not in store.steps():
    raise InputError(f"no checkpoint at step {step} in {store.directory}; there are: "
                     f"{', '.join(map(str, store.steps())) or 'none'}")
  mesh = training_mesh(settings)
  model = trainable.load_base(settings.model, dtype=settings.dtype, mesh=mesh,
                              seed=settings.seed, attention=attention_lib.for_training(
                                  settings.attention, mesh.devices.flat[0].platform))
  state = _train_state(settings, model, mesh, total_steps=1)  # the steps shape no state
  restored, _ = store.restore(step, {"params": state.trained, "opt_state": state.opt_state,
                                     "rng": state.rng})
  trained = restored["params"]
  store.close()
  pad_token_id = tables.read_json_object(
      pathlib.Path(settings.output_dir) / MANIFEST_FILE)["pad_token_id"]
  _export(settings, model, trained, state.frozen, state.lora_scale, pad_token_id, output)
  distributed.barrier("checkpoint exported")  # every process may read the export next
  return str(output)


def _export(settings, model, trained, frozen, lora_scale, pad_token_id, output) -> None:
  """Every process gathers the merged weights (a collective where they span processes); the
  coordinator writes them."""
  params = trainable.host_params(train_step_lib.merged_params(trained, frozen, lora_scale,
                                                              jnp.float32))
  if not distributed.is_coordinator():
    return
  hf_export.write(output, params, model.sources, base_path=settings.model,
                  base_config=model.hf_config, config=model.config, pad_token_id=pad_token_id)


def _resumed_length(out: pathlib.Path, earlier: dict, settings: Settings, total_steps: int,
                    latest: int) -> int | None:
  """Checks that the run in `out` (its manifest: `earlier`) may go on under `settings`: every
  setting that changes what is trained as it was, the length (`--max_steps`, `--epochs`) the
  same or longer. Returns the earlier run's step count when `settings` extend it, else None."""
  before = earlier.get("settings", {})
  now = settings.to_json()
  changed = [k for k in _RESULT_FIELDS if k in before and before[k] != now[k]]
  others = [k for k in changed if k not in _LENGTH_FIELDS]
  if others:
    raise InputError(f"{out} holds checkpoints of a run with other settings "
                     f"({', '.join('--' + k for k in others)}); use a new --output_dir")
  earlier_total = int(earlier.get("total_steps", total_steps))
  if total_steps < earlier_total or total_steps < latest:
    raise InputError(f"--max_steps/--epochs give {total_steps} steps, but {out} holds a run of "
                     f"{earlier_total} steps (checkpoint at step {latest}): a run is extended, "
                     "never shortened; give as many steps or more, or use a new --output_dir")
  return earlier_total if total_steps > earlier_total else None


def run(settings: Settings) -> str:
  """Trains (or resumes, or extends) the run `settings` describe; returns its output folder. One
  run writes a folder at a time: a second, while the first lives, is refused naming it."""
  check(settings)
  out = pathlib.Path(settings.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  if not distributed.is_coordinator():  # the job's lock is its coordinator's
    return _train(settings, out)
  with WriterLock(out, LOCK_FILE, "training run"):
    return _train(settings, out)


def training_mesh(settings: Settings):
  """The `data` x `model` mesh over every device of the job (all processes': one global batch a
  step, its rows split over `data`; parameters and optimizer state split over `model`)."""
  return mesh_lib.make_mesh(settings.mesh, devices=jax.devices())


def _train(settings: Settings, out: pathlib.Path) -> str:
  mesh = training_mesh(settings)
  writes = distributed.is_coordinator()  # the files a job writes once; checkpoints: every process
  data_size = mesh.shape["data"]
  if settings.batch_size % data_size:
    raise InputError(f"--batch_size={settings.batch_size} must be a multiple of the mesh's data "
                     f"axis ({data_size})")
  base_path = default_model.resolve_model_path(settings.model)  # a GGUF alias or Hub id: its file
  model_digests = run_manifest.start_file_digests(base_path)
  model = trainable.load_base(settings.model, dtype=settings.dtype, mesh=mesh,
                              seed=settings.seed, attention=attention_lib.for_training(
                                  settings.attention, mesh.devices.flat[0].platform))
  hf_export.hf_shapes(settings.model, model.sources, model.config)  # exportable, before training
  tokenizer = item_tokens.load_tokenizer(model.tokenizer_path)
  templater = item_tokens.Templater(tokenizer, is_causal=True, max_length=settings.max_length)

  pairs = load_pairs(settings.data, settings.data_dir, "data")
  if settings.eval_data:
    train_pairs, eval_pairs = pairs, load_pairs(settings.eval_data, settings.data_dir,
                                                "eval_data")
  else:
    train_index, eval_index = pair_batches.split_indices(len(pairs), settings.eval_fraction,
                                                         settings.seed)
    train_pairs = [pairs[i] for i in train_index]
    eval_pairs = [pairs[i] for i in eval_index]
  if len(train_pairs) < settings.batch_size:
    raise InputError(f"--batch_size={settings.batch_size}: only {len(train_pairs)} training pairs")
  pad_token_id = export_pad_token_id(settings, model, tokenizer)
  pad_token = tokenizer.backend_tokenizer.id_to_token(pad_token_id) if hasattr(
      tokenizer, "backend_tokenizer") else None
  train_encoded = pair_batches.encode_pairs(templater, train_pairs)
  eval_encoded = pair_batches.encode_pairs(templater, eval_pairs)
  pair_batches.check_reading_token(train_encoded + eval_encoded, pad_token_id, pad_token)
  # A pair packed: the prompt once, both responses; so rows up to twice max_length.
  packing_args = pair_packing(settings, jax.default_backend(), data_size)
  train_margins = [p.margin for p in train_pairs]
  eval_margins = [p.margin for p in eval_pairs]
  if writes:
    tables.atomic_write_json(out / SPLIT_FILE, {
        "seed": settings.seed,
        "eval_fraction": 0.0 if settings.eval_data else settings.eval_fraction,
        "train_pairs": len(train_pairs), "eval_pairs": len(eval_pairs),
        "eval_pair_ids": [p.pair_id for p in eval_pairs]})

  per_epoch = len(train_pairs) // settings.batch_size  # micro-batches; the rest of an epoch waits
  accumulation = settings.gradient_accumulation_steps
  total_steps = settings.max_steps or max(1, settings.epochs * per_epoch // accumulation)
  state = _train_state(settings, model, mesh, total_steps)
  schedule, step_fn, frozen = state.schedule, state.step_fn, state.frozen
  trained, opt_state, rng = state.trained, state.opt_state, state.rng

  store = checkpoints_lib.Checkpoints(str(out), keep=settings.keep_checkpoints or None)
  manifest_path = out / MANIFEST_FILE
  start_step, num_tokens = 0, 0
  latest = store.latest()
  last_checkpoint = None  # the newest checkpoint there is: what a diverged run names
  if latest is not None:
    earlier = tables.read_json_object(manifest_path) if manifest_path.exists() else {}
    extended_from = _resumed_length(out, earlier, settings, total_steps, latest)
    restored, position = store.restore(latest, {"params": trained, "opt_state": opt_state,
                                                "rng": rng})
    trained, opt_state, rng = restored["params"], restored["opt_state"], restored["rng"]
    start_step, num_tokens = int(position["step"]), int(position["num_tokens"])
    last_checkpoint = os.path.join(store.directory, str(latest))
    logging.info("resuming from step %d (checkpoint %s)", start_step, last_checkpoint)
    if extended_from is not None:
      # As transformers' Trainer resumes with a larger max_steps: the schedule built for the new
      # length, read at the step reached (the optimizer state's count).
      print(f"extending the run from {extended_from} to {total_steps} steps: resuming from step "
            f"{start_step}; the learning rate follows the {settings.lr_schedule} schedule "
            f"recomputed for {total_steps} steps, from step {start_step} on (learning rate "
            f"{float(schedule(start_step)):.4g} there)", flush=True)
    else:
      print(f"resuming from step {start_step} of {total_steps}", flush=True)

  manifest = {"settings": settings.to_json(), "base": {"path": os.path.abspath(base_path)},
              "data": {"sha256": data_sha256(train_pairs), "train_pairs": len(train_pairs),
                       "eval_sha256": data_sha256(eval_pairs), "eval_pairs": len(eval_pairs)},
              "total_steps": total_steps, "micro_batches_per_epoch": per_epoch,
              "pairs_left_out_per_epoch": len(train_pairs) - per_epoch * settings.batch_size,
              "mesh": mesh_lib.describe(mesh), "versions": run_manifest.package_versions(),
              "architecture": model.config.architecture, "lora": settings.lora_rank > 0,
              "pad_token_id": pad_token_id}
  if writes:
    tables.atomic_write_json(manifest_path, manifest)

  extra_steps = set(settings.checkpoint_steps)

  def save(step: int) -> None:
    """A checkpoint of `step`, once its state is checked finite."""
    nonlocal last_checkpoint
    if not bool(divergence.all_finite((trained, opt_state))):
      store.close()
      raise divergence.not_finite_state(step, last_checkpoint)
    store.save(step, {"params": trained, "opt_state": opt_state, "rng": rng},
               {"step": step, "num_tokens": num_tokens, "micro_batches": step * accumulation})
    last_checkpoint = os.path.join(store.directory, str(step))

  if start_step == 0 and 0 in extra_steps and latest is None:
    save(0)
  log = MetricsLog(out / METRICS_FILE, start_step, trackers.open_trackers(
      settings.report_to, out, settings.run_name, settings.to_json()) if writes else (),
                   writes=writes)
  window: list[dict] = []
  losses: list[float] = []
  warned = False
  started, tokens_since = time.monotonic(), 0
  last_line = started
  for step in range(start_step, total_steps):
    for k in range(accumulation):
      micro = step * accumulation + k
      epoch, position = divmod(micro, per_epoch)
      order = pair_batches.epoch_order(len(train_pairs), settings.seed, epoch)
      chosen = order[position * settings.batch_size:(position + 1) * settings.batch_size]
      blocks = pair_batches.pack_pairs([train_encoded[i] for i in chosen],
                                       [train_margins[i] for i in chosen], **packing_args)
      trained, opt_state, metrics = step_fn.step(trained, opt_state, frozen,
                                                 [b.arrays() for b in blocks])
      sequence_tokens = sum(b.sequence_tokens for b in blocks)
      num_tokens += sequence_tokens
      tokens_since += sequence_tokens
      # The metrics come to the host to be logged: that is where divergence is checked.
      window.append({key: float(v) for key, v in jax.device_get(metrics).items()})
      if divergence.non_finite(window[-1]):
        log.add({"step": step + 1, **_mean_rows(window), "learning_rate": float(schedule(step)),
                 "num_tokens": num_tokens})
        store.close()
        raise divergence.diverged(step + 1, window[-1], last_checkpoint)
    done = step + 1
    if done % settings.log_every == 0 or done == total_steps:
      mean = _mean_rows(window)
      elapsed = time.monotonic() - started
      row = {"step": done, "epoch": round(done * accumulation / per_epoch, 4), **mean,
             "learning_rate": float(schedule(step)), "num_tokens": num_tokens,
             "tokens_per_second": round(tokens_since / max(elapsed, 1e-9), 1)}
      log.add(row)
      losses.extend(r["loss"] for r in window)
      window = []
      if (not warned and len(losses) >= LN2_WINDOW_STEPS
          and abs(np.mean(losses[-LN2_WINDOW_STEPS:]) - LN2) < LN2_TOLERANCE):
        warned = True
        logging.warning(
            "the training loss has stayed at ln 2 = %.4f for %d steps: chosen and rejected get "
            "the same reward, as when the reward is read inside the prompt or the learning rate "
            "is too small to move it", LN2, LN2_WINDOW_STEPS)
      now = time.monotonic()
      if now - last_line >= 10 or done == total_steps:
        last_line = now
        rate = (done - start_step) / max(now - started, 1e-9)
        logging.info("step %d/%d | loss %.4f | accuracy %.3f | %.0f tokens/s | ETA %.0fs", done,
                     total_steps, row["loss"], row["accuracy"], row["tokens_per_second"],
                     (total_steps - done) / max(rate, 1e-9))
    if eval_encoded and settings.eval_every and done % settings.eval_every == 0 and (
        done != total_steps):
      log.add({"step": done, **_evaluate(step_fn, trained, frozen, eval_encoded, eval_margins,
                                         packing_args)})
    if done == total_steps or done in extra_steps or (
        settings.checkpoint_every and done % settings.checkpoint_every == 0):
      save(done)
  final = {}
  if eval_encoded:
    final = _evaluate(step_fn, trained, frozen, eval_encoded, eval_margins, packing_args)
    log.add({"step": total_steps, **final})
  store.close()
  log.close()

  if not bool(divergence.all_finite(trained)):  # a finished run's rerun restored it unsaved
    raise divergence.not_finite_state(total_steps, last_checkpoint)
  _export(settings, model, trained, frozen, state.lora_scale, pad_token_id, out / MODEL_DIR)
  digests = model_digests.result()
  manifest["base"]["files"] = [{"name": n, "sha256": d} for n, d in sorted(digests.items())]
  manifest.update(final_eval=divergence.json_row(final), export=os.path.abspath(out / MODEL_DIR))
  if writes:
    tables.atomic_write_json(manifest_path, manifest)
  distributed.barrier("training exported")  # every process may read the export next
  return str(out)
