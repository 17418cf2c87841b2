"""Trains a Bradley-Terry reward model from a decoder base on preference data, in JAX.

  python -m socialrm_jax.main.train --model=BASE --data=preference:pairs.jsonl --output_dir=OUT \
      --max_steps=200 --batch_size=8 --learning_rate=1e-4 --seed=0 --checkpoint_every=50 \
      [--lora_rank=32 --lora_alpha=64] [--config=configs/FILE.py]

Every flag is a field of `orchestrators.train.Settings` (its help is the field's comment); a
`--config` file (ml_collections, `get_config()`) sets any of them, and a flag given on the
command line wins over it. The same command again resumes from the last checkpoint. What a run
writes: socialrm_jax/orchestrators/train.py.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing

from absl import flags
from ml_collections import config_flags

from socialrm_jax.base import errors
from socialrm_jax.orchestrators import train

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A config file (ml_collections, get_config()) setting any of the flags; "
    "flags given on the command line win.", lock_config=False)


def _field_help() -> dict[str, str]:
  """Each Settings field's help: the comment lines just above it in the dataclass."""
  out, comment = {}, []
  for line in inspect.getsource(train.Settings).splitlines():
    stripped = line.strip()
    if stripped.startswith("#"):
      comment.append(stripped.lstrip("# ").strip())
      continue
    match = re.match(r"(\w+): ", stripped)
    if match:
      out[match.group(1)] = " ".join(comment)
    comment = []
  return out


def _define_flags() -> dict[str, flags.FlagHolder]:
  """One flag per Settings field, of its type and default: the one place flags map to settings."""
  helps = _field_help()
  hints = typing.get_type_hints(train.Settings)
  holders = {}
  for field in dataclasses.fields(train.Settings):
    kind = hints[field.name]
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
      kind = args[0]
    help_text = helps.get(field.name) or field.name
    if field.metadata.get("specs"):  # a spec holds commas of its own (`preference:P:name=x,...`)
      holders[field.name] = flags.DEFINE_multi_string(field.name, list(field.default), help_text)
    elif typing.get_origin(kind) is tuple:
      holders[field.name] = flags.DEFINE_list(field.name, list(field.default), help_text)
    else:
      define = {str: flags.DEFINE_string, int: flags.DEFINE_integer,
                float: flags.DEFINE_float}[kind]
      holders[field.name] = define(field.name, field.default, help_text)
  return holders


_FLAGS = _define_flags()


def settings_from_flags() -> train.Settings:
  """Settings from the config file (if any), then the flags given on the command line."""
  values: dict = {}
  config = _CONFIG.value
  if config is not None:
    try:
      given = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    except OSError as e:
      reason = str(e.__cause__ or e).strip().splitlines()[-1].strip()
      raise errors.InputError(f"--config: cannot load the config file: {reason}") from None
    unknown = sorted(set(given) - set(_FLAGS))
    if unknown:
      raise errors.InputError(f"--config sets {', '.join(unknown)}, which are not settings of "
                              "socialrm-train (see --help)")
    values.update(given)
  for name, holder in _FLAGS.items():
    if flags.FLAGS[name].present or name not in values:
      values[name] = holder.value
  for field in dataclasses.fields(train.Settings):
    if isinstance(field.default, tuple) and values[field.name] is not None:
      values[field.name] = tuple(values[field.name])
  try:  # a list flag's values are strings; export_steps holds steps
    values["export_steps"] = tuple(int(step) for step in values["export_steps"])
  except ValueError:
    raise errors.InputError(f"--export_steps takes step numbers, got "
                            f"{list(values['export_steps'])}") from None
  return train.Settings(**values)


def main(argv):
  del argv
  settings = settings_from_flags()
  train.check(settings)
  errors.check_output_folder(settings.output_dir, "output_dir")
  output = train.run(settings)
  print(f"Model: {output}/{train.MODEL_DIR}\nMetrics: {output}/{train.METRICS_FILE}")


def run():
  errors.run_command("socialrm-train", main)


if __name__ == "__main__":
  run()
