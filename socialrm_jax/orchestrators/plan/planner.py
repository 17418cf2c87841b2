"""socialrm-plan's stage: its settings, the model it plans for, and the plan itself (compiled
programs, what fits, the largest batch, training's steps, a projected run), written as plan.json
and plan.md (`report`). `main/plan.py` is the command."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from socialrm_jax.base import errors, settings, tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import default_model, heads, weights
from socialrm_jax.orchestrators import train as train_command
from socialrm_jax.orchestrators.plan import compiler, hardware, projection, report, shapes
from socialrm_jax.orchestrators.plan import training as plan_training
from socialrm_jax.scoring import engine

# The scoring settings a plan compiles for (the others do not change the compiled step).
PLANNED_SCORING = ("max_length", "tokens_per_batch", "chunk_size", "dtype", "proxy", "mesh",
                   "attention")


@dataclasses.dataclass(frozen=True)
class PlanSettings:
  """socialrm-plan's settings (each a flag of the same name); the scoring ones are socialrm-score's
  (`engine.ScoringOptions`), those that shape the compiled step."""
  topology: str = settings.field(None, "TPU slice as libtpu names it, CHIP:GRID with CHIP one of "
                                 f"{', '.join(hardware.CHIPS)} (e.g. v5e:4x4, v5p:2x2x2); or one "
                                 "host's NVIDIA GPUs, GPU[xCOUNT] with GPU one of "
                                 f"{', '.join(hardware.GPUS)} (e.g. h100, h200, h100x8).",
                                 required=True)
  chips_per_host: str | None = settings.field(None, "Chips per host, e.g. 2x4 (default: libtpu's "
                                              "for the chip, 2x2 for v5e).")
  num_slices: int = settings.field(1, "Slices of --topology in the job.")
  model: str | None = settings.field(None, "A model's config.json, or its folder (config.json, "
                                     "and the tensor names of its *.safetensors where it has a "
                                     "custom reward head; no weight is read), or its Hub id "
                                     "org/name[@REVISION] (config and tokenizer files fetched).")
  model_shape: str | None = settings.field(
      None, "A real model's shape as a reward model (one-output score head).",
      choices=list(shapes.MODEL_SHAPES))
  output_dir: str = settings.field(None, "Where plan.json and plan.md go.", required=True)
  items: str | None = settings.field(None, "Converted items to project a run of (batches per "
                                     "shape from their real packing, and the run's time).")
  tokenizer: str | None = settings.field(None, "With --items: the tokenizer (a model folder, a "
                                         ".gguf file or 'smollm2'; default: --model's folder).")
  memory_fraction: float | None = settings.field(
      None, "GPUs: the share of a GPU's memory JAX's allocator takes on the GPU machine "
      f"(XLA_CLIENT_MEM_FRACTION there; default JAX's {hardware.DEFAULT_GPU_MEMORY_FRACTION}).")
  largest_batch: bool = settings.field(
      True, "Also find the largest --tokens_per_batch that fits: --tokens_per_batch times a power "
      "of two (up to --chunk_size rows of --max_length, the engine's largest batch), every batch "
      "shape of each compiled.")
  train: tuple[str, ...] = settings.field(
      (), "Also compile socialrm-train's step: full, lora, or both (full,lora), with --max_length, "
      "--dtype, --mesh, --attention and the training flags below.")
  scoring: engine.ScoringOptions = settings.group(engine.ScoringOptions,
                                                  flags_of=PLANNED_SCORING, compilation_cache="")
  training: train_command.TrainConfig = settings.group(
      train_command.TrainConfig, flags_of=plan_training.PLANNED_TRAINING,
      lora_rank=plan_training.PLAN_LORA_RANK)


def model_config(config: PlanSettings) -> tuple[str, str, dict, weights.TensorSource | None]:
  """(name, source, config.json dict, the checkpoint's tensor headers or None) of --model or
  --model_shape. A custom reward head (ArmoRM, GRM, ...) is described from its tensors' names and
  shapes (`heads.describe`), so such a model needs its folder with the *.safetensors."""
  if (config.model is None) == (config.model_shape is None):
    raise InputError("give exactly one of --model (a config.json or its folder) and "
                     f"--model_shape ({', '.join(shapes.MODEL_SHAPES)})")
  if config.model_shape is not None:
    return config.model_shape, f"shape:{config.model_shape}", shapes.reward_model_config(
        config.model_shape), None
  path = default_model.resolve_model_path(config.model, weights=False)
  config_path = os.path.join(path, "config.json") if os.path.isdir(path) else path
  errors.check_exists(config_path, "model")
  name = os.path.basename(os.path.normpath(path if os.path.isdir(path) else os.path.dirname(path)
                                           or path))
  hf_config = tables.read_json_object(config_path)
  architecture = (hf_config.get("architectures") or [None])[0]
  tensors = None
  if architecture is not None and heads.may_carry_custom_head(architecture):
    folder = os.path.dirname(config_path) or "."
    if any(n.endswith(".safetensors") for n in os.listdir(folder)):
      tensors = weights.SafetensorsSource(folder)
    elif architecture in heads.REWARD_CLASSES:
      raise InputError(f"{architecture} has a custom reward head, which is described from its "
                       "checkpoint's tensor names: give --model the folder with its "
                       "*.safetensors (only their headers are read)", path)
  return name, path, hf_config, tensors


def tokenizer_path(config: PlanSettings) -> str:
  if config.tokenizer:
    return default_model.resolve_model_path(config.tokenizer)
  if config.model and os.path.isdir(
      model := default_model.resolve_model_path(config.model, weights=False)):
    return model
  raise InputError("--items needs a tokenizer: pass --tokenizer (a model folder, a .gguf file, "
                   "or 'smollm2'); a --model_shape has none of its own")


class ChecksFailed(Exception):
  """A planned step failed a check (plan.md lists each); the plan is written."""


def check(config: PlanSettings) -> None:
  """The settings' checks before anything compiles: the output folder, --items and its
  tokenizer, --train's modes."""
  errors.check_output_folder(config.output_dir, "output_dir")
  if config.items is not None:
    errors.check_exists(config.items, "items")
    errors.check_exists(tokenizer_path(config), "tokenizer")
  unknown = [mode for mode in config.train if mode not in plan_training.MODES]
  if unknown:
    raise InputError(f"--train: {', '.join(unknown)} unknown; one or both of "
                     f"{', '.join(plan_training.MODES)}")


def run(config: PlanSettings) -> dict[str, Any]:
  """Compiles the plan `config` asks for and writes it into `config.output_dir` (`report.write`);
  returns plan.json's tree. Checked settings (`check`)."""
  name, source, hf_config, tensors = model_config(config)
  options = config.scoring
  trainings = [plan_training.settings_for(options, config.training, mode)
               for mode in plan_training.MODES if mode in config.train]
  if options.proxy == "implicit":
    options = dataclasses.replace(options, ref_model="(the model's own shape)")
  topology = hardware.topology(config.topology, config.chips_per_host, config.num_slices,
                               config.memory_fraction)
  start = time.perf_counter()
  setup = compiler.build(topology, hf_config, source, options, tensors)
  # socialrm-train's mesh spans the job.
  train_setup = plan_training.job_setup(setup) if trainings else None
  for settings in trainings:  # a block size the mesh cannot take, refused before compiling
    plan_training.target_settings(settings, train_setup)
  progress = compiler.Progress()
  batches, checks = compiler.compile_all(setup, progress)
  fits = all(entry["fits"] for entry in batches)
  fitting = None
  if not fits:
    fitting = compiler.smallest_fitting_model_axis(topology, hf_config, source, options,
                                                   larger_than=setup.mesh.shape["model"],
                                                   tensors=tensors, progress=progress)
  largest = None
  if config.largest_batch:
    largest = compiler.largest_fitting_tokens_per_batch(topology, hf_config, source, options,
                                                        fits, tensors, progress)
  steps = []
  if trainings:
    model = plan_training.abstract_train_model(train_setup, hf_config, source,
                                               config.training.remat_policy)
    for settings in trainings:
      step = plan_training.compile_training(train_setup, model, settings, progress)
      step["remedy"] = plan_training.fitting_remedy(train_setup, hf_config, source, settings,
                                                    step, progress)
      steps.append(step)
  projected = None
  if config.items is not None:
    projected = projection.project(setup, config.items, tokenizer_path(config), options)
  plan = report.build_plan(setup, name, source, options, batches, fitting, projected,
                           config.tokenizer or config.model, checks, largest, steps)
  plan["plan_seconds"] = round(time.perf_counter() - start, 1)
  report.write(config.output_dir, plan)
  return plan
