"""One training run, set up for the loop and finished after it (`TrainingRun`): the checks of
socialrm-train's settings, the base and the pairs it trains on, the held-out split, the fresh or
resumed state (a resume's and an extension's checks), the manifest, the export; the folder's
files' names (docs/training.md, "What a run writes"); `export_checkpoint`. What it reads is a
`config.TrainConfig`, each field declared once with its help.
"""

from __future__ import annotations

import os
import pathlib
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
from absl import logging

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import default_model, reward_model
from socialrm_jax.runtime import distributed, provenance
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.scoring import item_tokens
from socialrm_jax.training import checkpoints as checkpoints_lib
from socialrm_jax.training import (divergence, hf_export, loop_hooks, pair_batches, trackers,
                                   trainable, trainer)
from socialrm_jax.training import train_step as train_step_lib
from socialrm_jax.training.config import LoopConfig, PairsConfig, TrainConfig

METRICS_FILE = "train_metrics.jsonl"
MANIFEST_FILE = "train_manifest.json"
SPLIT_FILE = "split.json"
MODEL_DIR = "model"
LOCK_FILE = ".train.lock"  # held by the run writing the folder (base/writer_lock.py)

# Settings that change nothing trained, so a resume may change them; every other setting a resume
# must find as the checkpoint's run had it, but the run's length (`LENGTH_FIELDS`), which a resume
# may make longer.
NOT_TRAINED = ("output_dir", "checkpoint_every", "checkpoint_steps", "keep_checkpoints",
               "log_every", "attention", "mesh", "report_to", "run_name")
LENGTH_FIELDS = ("max_steps", "epochs")


def check(config: TrainConfig) -> None:
  """Refuses settings that cannot run, one line naming the flag."""
  pairs, loop = config.pairs, config.loop
  if not config.model:
    raise InputError("--model is required")
  if not pairs.data:
    raise InputError("--data is required: the converter's dataset specs")
  if not config.output_dir:
    raise InputError("--output_dir is required")
  for name, value in (("batch_size", loop.batch_size), ("max_length", pairs.max_length),
                      ("row_length", pairs.row_length), ("log_every", loop.log_every)):
    if value < 1:
      raise InputError(f"--{name} must be at least 1, got {value}")
  for name, value in (("max_steps", loop.max_steps), ("checkpoint_every", loop.checkpoint_every),
                      ("eval_every", loop.eval_every), ("lora_rank", config.lora.lora_rank),
                      ("tokens_per_block", pairs.tokens_per_block),
                      ("keep_checkpoints", loop.keep_checkpoints)):
    if value < 0:
      raise InputError(f"--{name} must be 0 or more, got {value}")
  if loop.max_steps == 0 and loop.epochs < 1:
    raise InputError("--epochs must be at least 1 when --max_steps is 0")
  if not 0 <= pairs.eval_fraction < 1:
    raise InputError(f"--eval_fraction must be in [0, 1), got {pairs.eval_fraction}")
  if pairs.truncation not in pair_batches.TRUNCATION_MODES:
    raise InputError(f"--truncation must be one of {', '.join(pair_batches.TRUNCATION_MODES)}, "
                     f"got {pairs.truncation!r}")
  config.optimizer.check()
  reward_model.model_dtype(config.dtype)
  trackers.resolve(config.report_to)


def load_base(config: TrainConfig, mesh) -> trainable.TrainModel:
  """The base `config.model` to train, on `mesh`, with `--attention` (resolved at load) and
  `--remat_policy`."""
  return trainable.load_base(config.model, dtype=config.dtype, mesh=mesh, seed=config.seed,
                             attention=config.attention, remat_policy=config.remat_policy)


def export_pad_token_id(config: TrainConfig, model: trainable.TrainModel, tokenizer) -> int:
  if config.pad_token_id >= 0:
    return config.pad_token_id
  for candidate in (model.hf_config.get("pad_token_id"), tokenizer.pad_token_id,
                    tokenizer.eos_token_id):
    if isinstance(candidate, int):
      return candidate
  raise InputError("--pad_token_id: neither the base's config nor its tokenizer names a pad or "
                   "eos token; give the id the exported config should name")


def training_mesh(config: TrainConfig):
  """The `data` x `model` mesh over every device of the job (all processes': one global batch a
  step, its rows split over `data`; parameters and optimizer state split over `model`)."""
  return mesh_lib.make_mesh(config.mesh, devices=jax.devices())


def total_steps(loop: LoopConfig, train_pairs: int, accumulation: int) -> int:
  """Optimizer steps of a run on `train_pairs` pairs: `--max_steps`, else `--epochs` passes of
  whole micro-batches (the pairs left over a micro-batch wait), at least one."""
  return loop.max_steps or max(1, loop.epochs * (train_pairs // loop.batch_size) // accumulation)


def resumed_length(out: pathlib.Path, earlier: dict, config: TrainConfig, total: int,
                   latest: int) -> int | None:
  """Checks that the run in `out` (its manifest: `earlier`) may go on under `config`: every
  setting that changes what is trained as it was, the length (`--max_steps`, `--epochs`) the
  same or longer. Returns the earlier run's step count when `config` extends it, else None."""
  before = earlier.get("settings", {})
  now = config.to_json()
  changed = [k for k in now if k not in NOT_TRAINED and k in before and before[k] != now[k]]
  others = [k for k in changed if k not in LENGTH_FIELDS]
  if others:
    raise InputError(f"{out} holds checkpoints of a run with other settings "
                     f"({', '.join('--' + k for k in others)}); use a new --output_dir")
  earlier_total = int(earlier.get("total_steps", total))
  if total < earlier_total or total < latest:
    raise InputError(f"--max_steps/--epochs give {total} steps, but {out} holds a run of "
                     f"{earlier_total} steps (checkpoint at step {latest}): a run is extended, "
                     "never shortened; give as many steps or more, or use a new --output_dir")
  return earlier_total if total > earlier_total else None


PairLoader = Callable[[Sequence[str], "str | None", str], list[pair_batches.Pair]]


class TrainingRun:
  """One run into `out`, set up for the loop (`trainer.Trainer`): the base loaded on `mesh`, the
  pairs (`load_pairs(specs, data_dir, flag)`, the converter's) split, fitted to --max_length
  (`pair_batches.fit_pairs`, what it dropped or cut said and recorded) and encoded, split.json
  written, the fresh state or the one the newest checkpoint holds (`saver`, the checkpoint hook),
  the manifest written; `finish` exports what the loop trained."""

  def __init__(self, config: TrainConfig, out: pathlib.Path, mesh, load_pairs: PairLoader):
    self.config, self.out, self.mesh = config, out, mesh
    pairs_config, loop = config.pairs, config.loop
    self.writes = distributed.is_coordinator()  # the files a job writes once; checkpoints: all
    data_size = mesh.shape["data"]
    if loop.batch_size % data_size:
      raise InputError(f"--batch_size={loop.batch_size} must be a multiple of the mesh's "
                       f"data axis ({data_size})")
    # Before the base loads: a --tokens_per_block the data axis cannot take is refused now.
    self.layout = pair_batches.pair_packing(pairs_config.row_length, pairs_config.max_length,
                                            jax.default_backend(), data_size,
                                            pairs_config.tokens_per_block)
    base_path = default_model.resolve_model_path(config.model)  # a GGUF alias or Hub id: its file
    self.model_digests = provenance.start_file_digests(base_path)
    self.model = load_base(config, mesh)
    hf_export.hf_shapes(config.model, self.model.sources, self.model.config)  # exportable now
    tokenizer = item_tokens.load_tokenizer(self.model.tokenizer_path)

    pairs = load_pairs(pairs_config.data, pairs_config.data_dir, "data")
    if pairs_config.eval_data:
      train_pairs, eval_pairs = pairs, load_pairs(pairs_config.eval_data, pairs_config.data_dir,
                                                  "eval_data")
    else:
      train_index, eval_index = pair_batches.split_indices(len(pairs), pairs_config.eval_fraction,
                                                           config.seed)
      train_pairs = [pairs[i] for i in train_index]
      eval_pairs = [pairs[i] for i in eval_index]
    # The split first, then the long pairs: which pairs are held out does not depend on
    # --max_length or --truncation.
    fit = dict(max_length=pairs_config.max_length, truncation=pairs_config.truncation)
    train_pairs, self.train_pairs, train_long = pair_batches.fit_pairs(
        tokenizer, train_pairs, **fit, flag="data")
    eval_pairs, self.eval_pairs, eval_long = pair_batches.fit_pairs(
        tokenizer, eval_pairs, flag="eval_data" if pairs_config.eval_data else "data", **fit)
    self.long_pairs = long_pairs_record(pairs_config, train_long, eval_long)
    say_long_pairs(pairs_config, train_long, len(train_pairs), eval_long, len(eval_pairs))
    if len(train_pairs) < loop.batch_size:
      raise InputError(f"--batch_size={loop.batch_size}: only {len(train_pairs)} training "
                       "pairs" + (f" ({len(train_long.dropped)} dropped over --max_length)"
                                  if train_long.dropped else ""))
    self.pad_token_id = export_pad_token_id(config, self.model, tokenizer)
    pad_token = tokenizer.backend_tokenizer.id_to_token(self.pad_token_id) if hasattr(
        tokenizer, "backend_tokenizer") else None
    pair_batches.check_reading_token(self.train_pairs.items + self.eval_pairs.items,
                                     self.pad_token_id, pad_token)
    if self.writes:
      tables.atomic_write_json(out / SPLIT_FILE, {
          "seed": config.seed,
          "eval_fraction": 0.0 if pairs_config.eval_data else pairs_config.eval_fraction,
          "train_pairs": len(train_pairs), "eval_pairs": len(eval_pairs),
          "eval_pair_ids": [p.pair_id for p in eval_pairs]})

    # Micro-batches an epoch; the pairs left over a whole micro-batch wait.
    self.per_epoch = len(train_pairs) // loop.batch_size
    self.accumulation = config.optimizer.gradient_accumulation_steps
    self.total_steps = total_steps(loop, len(train_pairs), self.accumulation)
    self.setup = trainer.run_setup(config, self.model, mesh, self.total_steps)
    self.saver = loop_hooks.SaveCheckpoints(
        checkpoints_lib.Checkpoints(str(out), keep=loop.keep_checkpoints or None),
        self.accumulation, initial=0 in loop.checkpoint_steps)
    self.state = self.setup.state
    latest = self.saver.store.latest()
    if latest is not None:
      self._resume(latest)
    self.manifest = {
        "settings": config.to_json(), "base": {"path": os.path.abspath(base_path)},
        "data": {"sha256": pair_batches.data_sha256(train_pairs), "train_pairs": len(train_pairs),
                 "eval_sha256": pair_batches.data_sha256(eval_pairs),
                 "eval_pairs": len(eval_pairs), "long_pairs": self.long_pairs},
        "total_steps": self.total_steps, "micro_batches_per_epoch": self.per_epoch,
        "pairs_left_out_per_epoch": len(train_pairs) - self.per_epoch * loop.batch_size,
        "mesh": mesh_lib.describe(mesh), "versions": provenance.package_versions(),
        "architecture": self.model.config.architecture, "lora": config.lora.enabled,
        "pad_token_id": self.pad_token_id}
    if self.writes:
      tables.atomic_write_json(out / MANIFEST_FILE, self.manifest)

  def _resume(self, latest: int) -> None:
    """The state of checkpoint `latest`, once the run in `out` may go on under the settings
    (`resumed_length`); says from which step it resumes, and how an extension's learning rate
    goes on."""
    manifest_path = self.out / MANIFEST_FILE
    earlier = tables.read_json_object(manifest_path) if manifest_path.exists() else {}
    extended_from = resumed_length(self.out, earlier, self.config, self.total_steps, latest)
    self.state = self.saver.restore_latest(self.state)
    start, total = self.state.step, self.total_steps
    logging.info("resuming from step %d (checkpoint %s)", start, self.state.last_checkpoint)
    if extended_from is not None:
      # As transformers' Trainer resumes with a larger max_steps: the schedule built for the new
      # length, read at the step reached (the optimizer state's count).
      print(f"extending the run from {extended_from} to {total} steps: resuming from step "
            f"{start}; the learning rate follows the {self.config.optimizer.lr_schedule} "
            f"schedule recomputed for {total} steps, from step {start} on (learning rate "
            f"{float(self.setup.schedule(start)):.4g} there)", flush=True)
    else:
      print(f"resuming from step {start} of {total}", flush=True)

  def micro_batch(self, micro: int) -> list[pair_batches.PairBlock]:
    """The packed blocks of micro-batch `micro` (`trainer.Trainer`'s `micro_batches`)."""
    return self.train_pairs.micro_batch(micro, batch_size=self.config.loop.batch_size,
                                        seed=self.config.seed, layout=self.layout)

  def metrics_log(self) -> loop_hooks.MetricsLog:
    """train_metrics.jsonl from the state's step on, and the `--report_to` trackers."""
    config = self.config
    return loop_hooks.MetricsLog(self.out / METRICS_FILE, self.state.step, trackers.open_trackers(
        config.report_to, self.out, config.run_name, config.to_json(),
        resume_step=self.state.step) if self.writes else (), writes=self.writes)

  def finish(self, state: trainer.TrainState, final_eval: dict[str, float]) -> None:
    """The trained `state` checked finite, exported to OUT/model/, the manifest completed (the
    base's files' sha256, the final evaluation, the export)."""
    if not bool(divergence.all_finite(state.trained)):  # a finished run's rerun restored it unsaved
      raise divergence.not_finite_state(self.total_steps, state.last_checkpoint)
    export(self.config, self.model, state.trained, self.setup, self.pad_token_id,
           self.out / MODEL_DIR)
    digests = self.model_digests.result()
    self.manifest["base"]["files"] = [{"name": n, "sha256": d} for n, d in sorted(digests.items())]
    self.manifest.update(final_eval=divergence.json_row(final_eval),
                         export=os.path.abspath(self.out / MODEL_DIR))
    if self.writes:
      tables.atomic_write_json(self.out / MANIFEST_FILE, self.manifest)
    distributed.barrier("training exported")  # every process may read the export next


def long_pairs_record(pairs: PairsConfig, train: pair_batches.LongPairs,
                      held_out: pair_batches.LongPairs) -> dict:
  """The manifest's record of the pairs over --max_length (`data.long_pairs`): the rule, and what
  it dropped or cut of the training and of the held-out pairs."""
  return {"max_length": pairs.max_length, "truncation": pairs.truncation,
          "train": train.record(), "eval": held_out.record()}


def say_long_pairs(pairs: PairsConfig, train: pair_batches.LongPairs, train_kept: int,
                   held_out: pair_batches.LongPairs, eval_kept: int) -> None:
  """One line, before anything trains, of what became of the pairs over --max_length (none: no
  line)."""
  parts = []
  for name, long, kept in (("training", train, train_kept), ("held-out", held_out, eval_kept)):
    if long.dropped:
      parts.append(f"{len(long.dropped)} of {kept + len(long.dropped)} {name} pairs dropped "
                   f"(first {long.dropped[0]!r})")
    if long.prompt_cut:
      parts.append(f"{len(long.prompt_cut)} {name} pairs' prompts cut from the left "
                   f"(first {long.prompt_cut[0]!r})")
  if parts:
    print(f"pairs over --max_length={pairs.max_length} (--truncation={pairs.truncation}): "
          f"{'; '.join(parts)}", flush=True)


def export(config: TrainConfig, model: trainable.TrainModel, trained: dict,
           setup: trainer.RunSetup, pad_token_id: int, output: str | os.PathLike) -> None:
  """The trained reward model as a HF folder at `output` (LoRA merged). Every process gathers the
  merged weights (a collective where they span processes); the coordinator writes them."""
  params = trainable.host_params(train_step_lib.merged_params(trained, setup.frozen,
                                                              config.lora.scale, jnp.float32))
  if not distributed.is_coordinator():
    return
  hf_export.write(output, params, model.sources, base_path=config.model,
                  base_config=model.hf_config, config=model.config, pad_token_id=pad_token_id)


def export_checkpoint(config: TrainConfig, step: int, output: str | os.PathLike) -> str:
  """Writes checkpoint `step` of the run `config` describes as a HF folder at `output` (as
  `OUT/model/`, LoRA merged), for the project's commands to score; returns its path."""
  store = checkpoints_lib.Checkpoints(config.output_dir)
  if step not in store.steps():
    raise InputError(f"no checkpoint at step {step} in {store.directory}; there are: "
                     f"{', '.join(map(str, store.steps())) or 'none'}")
  mesh = training_mesh(config)
  model = load_base(config, mesh)
  setup = trainer.run_setup(config, model, mesh, total_steps=1)  # the steps shape no state
  restored, _ = store.restore(step, setup.state.tree())
  store.close()
  pad_token_id = tables.read_json_object(
      pathlib.Path(config.output_dir) / MANIFEST_FILE)["pad_token_id"]
  export(config, model, restored["params"], setup, pad_token_id, output)
  distributed.barrier("checkpoint exported")  # every process may read the export next
  return str(output)
