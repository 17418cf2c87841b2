"""Plans a scoring run on a TPU slice without a TPU: compiles the engine's own step for the slice
and says what fits and how long it would take (a roofline estimate).

  python -m socialrm_jax.main.plan --topology=v5e:4x4 --model_shape=llama3.1-8b \
      --output_dir=plans/8b-v5e-16 [--chips_per_host=2x2] [--num_slices=1] \
      [--model=PATH (a config.json, or a folder holding one; of its *.safetensors only the
      tensor names and shapes are read, for a custom reward head)] \
      [--mesh=data:4,model:4] [--max_length=2048] [--tokens_per_batch=16384] \
      [--dtype=bfloat16] [--proxy=none|loglik|implicit|judge] [--attention=auto] \
      [--items=CONVERTED --tokenizer=PATH]

Writes plan.json and plan.md into --output_dir. A model that does not fit is a plan too (exit
0): plan.md says by how much and names the smallest model axis that fits. Needs libtpu
(`pip install socialrm_jax[tpu]`; the test extra has it). How: socialrm_jax/orchestrators/tpu_sizing/.
"""

from __future__ import annotations

import os
import time

from absl import flags

from socialrm_jax.base import errors, tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import default_model, heads, weights
from socialrm_jax.orchestrators.tpu_sizing import compiler, hardware, projection, report, shapes
from socialrm_jax.scoring import engine

_DEFAULTS = engine.ScoringOptions()

_TOPOLOGY = flags.DEFINE_string("topology", None, "TPU slice as libtpu names it: CHIP:GRID with "
                                f"CHIP one of {', '.join(hardware.CHIPS)}, e.g. v5e:4x4, "
                                "v5p:2x2x2.", required=True)
_CHIPS_PER_HOST = flags.DEFINE_string("chips_per_host", None, "Chips per host, e.g. 2x4 (default: "
                                      "libtpu's for the chip, 2x2 for v5e).")
_NUM_SLICES = flags.DEFINE_integer("num_slices", 1, "Slices of --topology in the job.")
_MODEL = flags.DEFINE_string("model", None, "A model's config.json, or its folder (config.json, "
                             "and the tensor names of its *.safetensors where it has a custom "
                             "reward head; no weight is read), or its Hub id org/name[@REVISION] "
                             "(its config and tokenizer files are downloaded).")
_MODEL_SHAPE = flags.DEFINE_enum("model_shape", None, list(shapes.MODEL_SHAPES),
                                 "A real model's shape as a reward model (one-output score head).")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where plan.json and plan.md go.",
                                  required=True)
_MESH = flags.DEFINE_string("mesh", _DEFAULTS.mesh, "data:N,model:M (default: the engine's, every "
                            "device of a host on data); a model axis above a host's chips spans "
                            "hosts.")
_MAX_LENGTH = flags.DEFINE_integer("max_length", _DEFAULTS.max_length, "Longest sequence, tokens.")
_TOKENS_PER_BATCH = flags.DEFINE_integer("tokens_per_batch", _DEFAULTS.tokens_per_batch,
                                         "Batch size in token slots (rows x row length).")
_CHUNK_SIZE = flags.DEFINE_integer("chunk_size", _DEFAULTS.chunk_size, "Items per output shard.")
_DTYPE = flags.DEFINE_enum("dtype", _DEFAULTS.dtype, ["float32", "bfloat16"],
                           "Parameter/compute dtype.")
_PROXY = flags.DEFINE_enum("proxy", _DEFAULTS.proxy, list(engine.PROXIES),
                           "As socialrm-score's (default: loglik for LM heads, else none); "
                           "implicit plans a reference model of the model's own shape.")
_ATTENTION = flags.DEFINE_enum("attention", _DEFAULTS.attention, ["auto", "xla", "splash"],
                               "Attention kernel: auto = splash on TPU where the model allows.")
_ITEMS = flags.DEFINE_string("items", None, "Converted items to project a run of (batches per "
                             "shape from their real packing, and the run's time).")
_TOKENIZER = flags.DEFINE_string("tokenizer", None, "With --items: the tokenizer (a model folder, "
                                 "a .gguf file or 'smollm2'; default: --model's folder).")


def _model_config() -> tuple[str, str, dict, weights.TensorSource | None]:
  """(name, source, config.json dict, the checkpoint's tensor headers or None) of --model or
  --model_shape. A custom reward head (ArmoRM, GRM, ...) is described from its tensors' names and
  shapes (`heads.describe`), so such a model needs its folder with the *.safetensors."""
  if (_MODEL.value is None) == (_MODEL_SHAPE.value is None):
    raise InputError("give exactly one of --model (a config.json or its folder) and "
                     f"--model_shape ({', '.join(shapes.MODEL_SHAPES)})")
  if _MODEL_SHAPE.value is not None:
    return _MODEL_SHAPE.value, f"shape:{_MODEL_SHAPE.value}", shapes.reward_model_config(
        _MODEL_SHAPE.value), None
  path = default_model.resolve_model_path(_MODEL.value, weights=False)
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


def _tokenizer_path() -> str:
  if _TOKENIZER.value:
    return default_model.resolve_model_path(_TOKENIZER.value)
  if _MODEL.value and os.path.isdir(model := default_model.resolve_model_path(_MODEL.value,
                                                                             weights=False)):
    return model
  raise InputError("--items needs a tokenizer: pass --tokenizer (a model folder, a .gguf file, "
                   "or 'smollm2'); a --model_shape has none of its own")


def main(argv):
  del argv
  errors.check_output_folder(_OUTPUT_DIR.value, "output_dir")
  if _ITEMS.value is not None:
    errors.check_exists(_ITEMS.value, "items")
    tokenizer = _tokenizer_path()
    errors.check_exists(tokenizer, "tokenizer")
  name, source, hf_config, tensors = _model_config()
  options = engine.ScoringOptions(
      max_length=_MAX_LENGTH.value, tokens_per_batch=_TOKENS_PER_BATCH.value,
      chunk_size=_CHUNK_SIZE.value, dtype=_DTYPE.value, proxy=_PROXY.value, mesh=_MESH.value,
      attention=_ATTENTION.value, compilation_cache="",
      ref_model="(the model's own shape)" if _PROXY.value == "implicit" else None)
  topology = hardware.topology(_TOPOLOGY.value, _CHIPS_PER_HOST.value, _NUM_SLICES.value)
  start = time.perf_counter()
  setup = compiler.build(topology, hf_config, source, options, tensors)
  batches = [compiler.compile_shape(setup, shape) for shape in compiler.shapes(setup)]
  fitting = None
  if not all(entry["fits"] for entry in batches):
    fitting = compiler.smallest_fitting_model_axis(topology, hf_config, source, options,
                                                   larger_than=setup.mesh.shape["model"],
                                                   tensors=tensors)
  projected = None
  if _ITEMS.value is not None:
    projected = projection.project(setup, _ITEMS.value, tokenizer, options)
  plan = report.build_plan(setup, name, source, options, batches, fitting, projected,
                           _TOKENIZER.value or _MODEL.value)
  plan["plan_seconds"] = round(time.perf_counter() - start, 1)
  report.write(_OUTPUT_DIR.value, plan)
  print(report.render_markdown(plan), end="")


def run():
  errors.run_command("socialrm-plan", main, plans_tpu=True)


if __name__ == "__main__":
  run()
