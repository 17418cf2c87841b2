"""Converts a HF checkpoint folder or a GGUF file into the native orbax checkpoint.

  python -m socialrm_jax.main.convert_checkpoint --input=HF_DIR_or_GGUF --output=DIR [--dtype=bfloat16]

The native folder (see models/checkpoint.py) gives bit-identical outputs to the source at the
same dtype. Tokenizer files are copied alongside (for GGUF input, the tokenizer
transformers builds from the GGUF metadata is saved).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time

from socialrm_jax.base import errors, settings
from socialrm_jax.main import command
from socialrm_jax.scoring import engine


@dataclasses.dataclass(frozen=True)
class ConvertCheckpointSettings:
  """socialrm-convert-checkpoint's settings (each a flag of the same name)."""
  input: str = settings.field(None, "HF checkpoint folder, .gguf file, or folder with one.",
                              required=True)
  output: str = settings.field(None, "Folder for the native checkpoint.", required=True)
  dtype: str = settings.field_of(engine.ScoringOptions, "dtype")  # the parameters' as stored
  overwrite: bool = settings.field(False, "Replace a non-empty --output folder.")


# Files in a HF folder that are weights (not copied); everything else is tokenizer/config.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".msgpack", ".h5")
_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def copy_tokenizer_files(model, output: str) -> list[str]:
  """Puts the tokenizer files (tokenizer.json and its configs) into `output`; returns the names
  written."""
  from socialrm_jax.models import checkpoint  # after absl parsed JAX flags
  source = model.tokenizer_path
  if os.path.isfile(source):  # a GGUF file: its tokenizer lives in its metadata
    from socialrm_jax.models import tokenizer as tokenizer_lib  # imported only for GGUF input
    return list(tokenizer_lib.load_tokenizer(source).save_pretrained(output))
  copied = []
  for name in sorted(os.listdir(source)):
    path = os.path.join(source, name)
    if (os.path.isfile(path) and not name.endswith(_WEIGHT_SUFFIXES)
        and name not in _WEIGHT_INDEXES and name != checkpoint.MANIFEST):
      shutil.copy2(path, os.path.join(output, name))
      copied.append(name)
  return copied


def convert(input_path: str, output: str, dtype: str = "float32", overwrite: bool = False) -> dict:
  errors.check_exists(input_path, "input")
  errors.check_output_folder(output, "output")
  if os.path.isdir(output) and os.listdir(output) and not overwrite:
    raise errors.InputError("--output: the folder is not empty (pass --overwrite to replace it)",
                            output)
  from socialrm_jax.models import checkpoint, load_reward_model  # after absl parsed JAX flags
  model = load_reward_model(input_path, dtype=dtype)
  family_name = model.family.__name__.rsplit(".", 1)[-1]
  checkpoint.save(output, model.module, family_name, model.config)
  tokenizer_files = copy_tokenizer_files(model, output)
  return {"output": output, "family": family_name, "architecture": model.config.architecture,
          "dtype": dtype, "tokenizer_files": [os.path.basename(f) for f in tokenizer_files]}


def main(config: ConvertCheckpointSettings) -> None:
  start = time.perf_counter()
  summary = convert(config.input, config.output, config.dtype, config.overwrite)
  summary["seconds"] = round(time.perf_counter() - start, 1)
  print(json.dumps(summary, indent=2))


COMMAND = command.Command("socialrm-convert-checkpoint", ConvertCheckpointSettings, main)


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
