"""One training run, set up for the loop and finished after it (`TrainingRun`): the checks of
socialrm-train's settings, the base and the pairs it trains on, the held-out split, the fresh or
resumed state (a resume's and an extension's checks), the manifest, the export; the folder's
files' names (docs/training.md, "What a run writes"); `export_checkpoint`.

`settings` here is socialrm-train's `Settings` (`orchestrators/train.py`, which declares each
field once with its help), read by field name.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Callable, Sequence

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
from socialrm_jax.training import (divergence, hf_export, hooks, optimizer, pair_batches,
                                   trackers, trainable, trainer)
from socialrm_jax.training import train_step as train_step_lib

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


def check(settings: Any) -> None:
  """Refuses settings that cannot run, one line naming the flag."""
  if not settings.model:
    raise InputError("--model is required")
  if not settings.data:
    raise InputError("--data is required: the converter's dataset specs")
  if not settings.output_dir:
    raise InputError("--output_dir is required")
  for name in ("batch_size", "max_length", "row_length", "log_every"):
    if getattr(settings, name) < 1:
      raise InputError(f"--{name} must be at least 1, got {getattr(settings, name)}")
  for name in ("max_steps", "checkpoint_every", "eval_every", "lora_rank", "keep_checkpoints"):
    if getattr(settings, name) < 0:
      raise InputError(f"--{name} must be 0 or more, got {getattr(settings, name)}")
  if settings.max_steps == 0 and settings.epochs < 1:
    raise InputError("--epochs must be at least 1 when --max_steps is 0")
  if not 0 <= settings.eval_fraction < 1:
    raise InputError(f"--eval_fraction must be in [0, 1), got {settings.eval_fraction}")
  optimizer.OptimizerConfig.of(settings).check()
  reward_model.model_dtype(settings.dtype)
  trackers.resolve(settings.report_to)


def load_base(settings: Any, mesh) -> trainable.TrainModel:
  """The base `settings.model` to train, on `mesh`, with `--attention` (resolved at load)."""
  return trainable.load_base(settings.model, dtype=settings.dtype, mesh=mesh, seed=settings.seed,
                             attention=settings.attention)


def export_pad_token_id(settings: Any, model: trainable.TrainModel, tokenizer) -> int:
  if settings.pad_token_id >= 0:
    return settings.pad_token_id
  for candidate in (model.hf_config.get("pad_token_id"), tokenizer.pad_token_id,
                    tokenizer.eos_token_id):
    if isinstance(candidate, int):
      return candidate
  raise InputError("--pad_token_id: neither the base's config nor its tokenizer names a pad or "
                   "eos token; give the id the exported config should name")


def training_mesh(settings: Any):
  """The `data` x `model` mesh over every device of the job (all processes': one global batch a
  step, its rows split over `data`; parameters and optimizer state split over `model`)."""
  return mesh_lib.make_mesh(settings.mesh, devices=jax.devices())


def resumed_length(out: pathlib.Path, earlier: dict, settings: Any, total: int,
                   latest: int) -> int | None:
  """Checks that the run in `out` (its manifest: `earlier`) may go on under `settings`: every
  setting that changes what is trained as it was, the length (`--max_steps`, `--epochs`) the
  same or longer. Returns the earlier run's step count when `settings` extend it, else None."""
  before = earlier.get("settings", {})
  now = settings.to_json()
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
  pairs (`load_pairs(specs, data_dir, flag)`, the converter's) split and encoded, split.json
  written, the fresh state or the one the newest checkpoint holds (`saver`, the checkpoint
  hook), the manifest written; `finish` exports what the loop trained."""

  def __init__(self, settings: Any, out: pathlib.Path, mesh, load_pairs: PairLoader):
    self.settings, self.out, self.mesh = settings, out, mesh
    self.writes = distributed.is_coordinator()  # the files a job writes once; checkpoints: all
    data_size = mesh.shape["data"]
    if settings.batch_size % data_size:
      raise InputError(f"--batch_size={settings.batch_size} must be a multiple of the mesh's "
                       f"data axis ({data_size})")
    base_path = default_model.resolve_model_path(settings.model)  # a GGUF alias or Hub id: its file
    self.model_digests = provenance.start_file_digests(base_path)
    self.model = load_base(settings, mesh)
    hf_export.hf_shapes(settings.model, self.model.sources, self.model.config)  # exportable now
    tokenizer = item_tokens.load_tokenizer(self.model.tokenizer_path)
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
      raise InputError(f"--batch_size={settings.batch_size}: only {len(train_pairs)} training "
                       "pairs")
    self.pad_token_id = export_pad_token_id(settings, self.model, tokenizer)
    pad_token = tokenizer.backend_tokenizer.id_to_token(self.pad_token_id) if hasattr(
        tokenizer, "backend_tokenizer") else None
    self.train_pairs = pair_batches.EncodedPairs.encode(templater, train_pairs)
    self.eval_pairs = pair_batches.EncodedPairs.encode(templater, eval_pairs)
    pair_batches.check_reading_token(self.train_pairs.items + self.eval_pairs.items,
                                     self.pad_token_id, pad_token)
    self.layout = pair_batches.pair_packing(settings.row_length, settings.max_length,
                                            jax.default_backend(), data_size)
    if self.writes:
      tables.atomic_write_json(out / SPLIT_FILE, {
          "seed": settings.seed,
          "eval_fraction": 0.0 if settings.eval_data else settings.eval_fraction,
          "train_pairs": len(train_pairs), "eval_pairs": len(eval_pairs),
          "eval_pair_ids": [p.pair_id for p in eval_pairs]})

    # Micro-batches an epoch; the pairs left over a whole micro-batch wait.
    self.per_epoch = len(train_pairs) // settings.batch_size
    self.accumulation = settings.gradient_accumulation_steps
    self.total_steps = settings.max_steps or max(
        1, settings.epochs * self.per_epoch // self.accumulation)
    self.setup = trainer.setup(settings, self.model, mesh, self.total_steps)
    self.saver = hooks.SaveCheckpoints(
        checkpoints_lib.Checkpoints(str(out), keep=settings.keep_checkpoints or None),
        self.accumulation, initial=0 in settings.checkpoint_steps)
    self.state = self.setup.state
    latest = self.saver.store.latest()
    if latest is not None:
      self._resume(latest)
    self.manifest = {
        "settings": settings.to_json(), "base": {"path": os.path.abspath(base_path)},
        "data": {"sha256": pair_batches.data_sha256(train_pairs), "train_pairs": len(train_pairs),
                 "eval_sha256": pair_batches.data_sha256(eval_pairs),
                 "eval_pairs": len(eval_pairs)},
        "total_steps": self.total_steps, "micro_batches_per_epoch": self.per_epoch,
        "pairs_left_out_per_epoch": len(train_pairs) - self.per_epoch * settings.batch_size,
        "mesh": mesh_lib.describe(mesh), "versions": provenance.package_versions(),
        "architecture": self.model.config.architecture, "lora": settings.lora_rank > 0,
        "pad_token_id": self.pad_token_id}
    if self.writes:
      tables.atomic_write_json(out / MANIFEST_FILE, self.manifest)

  def _resume(self, latest: int) -> None:
    """The state of checkpoint `latest`, once the run in `out` may go on under the settings
    (`resumed_length`); says from which step it resumes, and how an extension's learning rate
    goes on."""
    manifest_path = self.out / MANIFEST_FILE
    earlier = tables.read_json_object(manifest_path) if manifest_path.exists() else {}
    extended_from = resumed_length(self.out, earlier, self.settings, self.total_steps, latest)
    self.state = self.saver.restore_latest(self.state)
    start, total = self.state.step, self.total_steps
    logging.info("resuming from step %d (checkpoint %s)", start, self.state.last_checkpoint)
    if extended_from is not None:
      # As transformers' Trainer resumes with a larger max_steps: the schedule built for the new
      # length, read at the step reached (the optimizer state's count).
      print(f"extending the run from {extended_from} to {total} steps: resuming from step "
            f"{start}; the learning rate follows the {self.settings.lr_schedule} schedule "
            f"recomputed for {total} steps, from step {start} on (learning rate "
            f"{float(self.setup.schedule(start)):.4g} there)", flush=True)
    else:
      print(f"resuming from step {start} of {total}", flush=True)

  def micro_batch(self, micro: int) -> list[pair_batches.PairBlock]:
    """The packed blocks of micro-batch `micro` (`trainer.Trainer`'s `micro_batches`)."""
    return self.train_pairs.micro_batch(micro, batch_size=self.settings.batch_size,
                                        seed=self.settings.seed, layout=self.layout)

  def metrics_log(self) -> hooks.MetricsLog:
    """train_metrics.jsonl from the state's step on, and the `--report_to` trackers."""
    settings = self.settings
    return hooks.MetricsLog(self.out / METRICS_FILE, self.state.step, trackers.open_trackers(
        settings.report_to, self.out, settings.run_name, settings.to_json(),
        resume_step=self.state.step) if self.writes else (), writes=self.writes)

  def finish(self, state: trainer.TrainState, final_eval: dict[str, float]) -> None:
    """The trained `state` checked finite, exported to OUT/model/, the manifest completed (the
    base's files' sha256, the final evaluation, the export)."""
    if not bool(divergence.all_finite(state.trained)):  # a finished run's rerun restored it unsaved
      raise divergence.not_finite_state(self.total_steps, state.last_checkpoint)
    export(self.settings, self.model, state.trained, self.setup, self.pad_token_id,
           self.out / MODEL_DIR)
    digests = self.model_digests.result()
    self.manifest["base"]["files"] = [{"name": n, "sha256": d} for n, d in sorted(digests.items())]
    self.manifest.update(final_eval=divergence.json_row(final_eval),
                         export=os.path.abspath(self.out / MODEL_DIR))
    if self.writes:
      tables.atomic_write_json(self.out / MANIFEST_FILE, self.manifest)
    distributed.barrier("training exported")  # every process may read the export next


def export(settings: Any, model: trainable.TrainModel, trained: dict, setup: trainer.Setup,
           pad_token_id: int, output: str | os.PathLike) -> None:
  """The trained reward model as a HF folder at `output` (LoRA merged). Every process gathers the
  merged weights (a collective where they span processes); the coordinator writes them."""
  params = trainable.host_params(train_step_lib.merged_params(trained, setup.frozen,
                                                              setup.lora_scale, jnp.float32))
  if not distributed.is_coordinator():
    return
  hf_export.write(output, params, model.sources, base_path=settings.model,
                  base_config=model.hf_config, config=model.config, pad_token_id=pad_token_id)


def export_checkpoint(settings: Any, step: int, output: str | os.PathLike) -> str:
  """Writes checkpoint `step` of the run `settings` describe as a HF folder at `output` (as
  `OUT/model/`, LoRA merged), for the project's commands to score; returns its path."""
  store = checkpoints_lib.Checkpoints(settings.output_dir)
  if step not in store.steps():
    raise InputError(f"no checkpoint at step {step} in {store.directory}; there are: "
                     f"{', '.join(map(str, store.steps())) or 'none'}")
  mesh = training_mesh(settings)
  model = load_base(settings, mesh)
  setup = trainer.setup(settings, model, mesh, total_steps=1)  # the steps shape no state
  restored, _ = store.restore(step, setup.state.tree())
  store.close()
  pad_token_id = tables.read_json_object(
      pathlib.Path(settings.output_dir) / MANIFEST_FILE)["pad_token_id"]
  export(settings, model, restored["params"], setup, pad_token_id, output)
  distributed.barrier("checkpoint exported")  # every process may read the export next
  return str(output)
