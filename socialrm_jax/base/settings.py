"""One declaration of a command's settings, from which its flags and its config come.

A command declares its settings once, as a dataclass whose fields are made with `field` (a default
and a help line, and where they apply the choices or `required`). Everything else is derived:

- `define_flags(Settings)` defines one absl flag per field and returns a holder whose `.value` is
  the parsed flags as a `Settings`. A field holding another settings dataclass (made with `group`)
  contributes its fields' flags unprefixed, so `socialrm-score`'s `--max_length` is
  `ScoreSettings.scoring.max_length`; `group` may set that command's own defaults and pick which of
  the group's fields become flags (the others keep their defaults).
- `config_dict(Settings)` / `from_config(Settings, config)`: the same fields as an ml_collections
  `ConfigDict` (a None default becomes a typed placeholder, so `--config.models.x.proxy=loglik`
  still parses) and back.
- `parse_arg(arg, key=default, ...)`: a config file's argument string (`--config=FILE:key=v,...`)
  parsed as big_vision's `parse_arg` does: each value typed as its default, defaults for what is
  absent, and an unknown key refused with one line naming it and the known ones.

A new command needs three lines beside its dataclass (in `main/train.py`):

    _SETTINGS = settings.define_flags(TrainSettings)      # at module level, before app.run
    ...
    def main(argv):
      config = _SETTINGS.value                             # a TrainSettings, typed
    ...
    def run():
      command.run_command("socialrm-train", main)          # socialrm_jax.main.command

Types map to flags as: bool -> DEFINE_bool, int -> DEFINE_integer, float -> DEFINE_float, str ->
DEFINE_string (DEFINE_enum with `choices`), list[...] / tuple[...] -> DEFINE_list (items converted
to the element type; DEFINE_multi_string with `repeatable`).
`X | None` is X with None allowed as the default.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Generic, Iterator, Mapping, Sequence, TypeVar

from absl import flags
import ml_collections

from socialrm_jax.base.errors import InputError

S = TypeVar("S")

# The flags `define_flags` defines belong to the module that called it (the command's, whose
# `--help` lists them), not to this one.
flags.disclaim_key_flags()

# The keys of a field's metadata this module reads.
_HELP, _CHOICES, _REQUIRED, _REPEATABLE, _FLAGS = (
    "help", "choices", "required", "repeatable", "flags")


def field(default: Any = dataclasses.MISSING, help: str = "", *,  # pylint: disable=redefined-builtin
          choices: Sequence[str] | None = None, required: bool = False, repeatable: bool = False,
          default_factory: Any = dataclasses.MISSING) -> Any:
  """A setting: its default (or `default_factory`), one help line, the values it may take (a flag
  refuses others), whether the command line must give it, and (a list) whether its flag may be
  repeated, each time adding one value, instead of taking a comma-separated list."""
  metadata = {_HELP: help, _CHOICES: tuple(choices) if choices is not None else None,
              _REQUIRED: required, _REPEATABLE: repeatable}
  if default_factory is not dataclasses.MISSING:
    return dataclasses.field(default_factory=default_factory, metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def field_of(cls: type, name: str, **default: Any) -> Any:
  """Another command's setting `name` of `cls` as this command's own, declared once: the same
  help and choices (and default, unless `default=` gives this command's)."""
  known = {f.name: f for f in dataclasses.fields(cls)}
  if name not in known:
    raise TypeError(f"{cls.__name__} has no setting {name!r}")
  source = known[name]
  value = default.pop("default", source.default)
  if default:
    raise TypeError(f"field_of takes only default=, got {sorted(default)}")
  return dataclasses.field(default=value, metadata=source.metadata)


def group(cls: type, *, flags_of: Sequence[str] | None = None, **defaults) -> Any:
  """A field holding settings of their own (`cls`), with this command's `defaults`; `flags_of`
  names the fields that become flags (default: all)."""
  return dataclasses.field(default_factory=lambda: cls(**defaults),
                           metadata={_FLAGS: None if flags_of is None else tuple(flags_of)})


def _unwrap(kind: Any) -> Any:
  """`X | None` (or Optional[X]) as X."""
  if typing.get_origin(kind) in (typing.Union, types.UnionType):
    kinds = [k for k in typing.get_args(kind) if k is not type(None)]
    if len(kinds) == 1:
      return kinds[0]
  return kind


def _leaves(cls: type, default: Any, only: Sequence[str] | None = None
            ) -> Iterator[tuple[tuple[str, ...], dataclasses.Field, Any, Any]]:
  """(path, field, type, default value) of every flag-bearing field of `cls` (with `default`, an
  instance, giving the defaults), nested groups flattened."""
  hints = typing.get_type_hints(cls)
  for f in dataclasses.fields(cls):
    if only is not None and f.name not in only:
      continue
    kind, value = _unwrap(hints[f.name]), getattr(default, f.name)
    if dataclasses.is_dataclass(kind):
      for path, leaf, leaf_kind, leaf_value in _leaves(kind, value, f.metadata.get(_FLAGS)):
        yield (f.name, *path), leaf, leaf_kind, leaf_value
    else:
      yield (f.name,), f, kind, value


def _default_instance(cls: type) -> Any:
  """`cls` with its defaults, its required fields None."""
  return cls(**{f.name: None for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING})


def flag_names(cls: type) -> list[str]:
  """The flags `define_flags(cls)` defines, in declaration order."""
  return [path[-1] for path, *_ in _leaves(cls, _default_instance(cls))]


def _define(name: str, f: dataclasses.Field, kind: Any, default: Any,
            flag_values: flags.FlagValues) -> flags.FlagHolder:
  meta = dict(f.metadata)
  common = dict(help=meta.get(_HELP) or name, flag_values=flag_values,
                required=meta.get(_REQUIRED, False))
  origin = typing.get_origin(kind)
  if kind is bool:
    return flags.DEFINE_bool(name, default, **common)
  if kind is int:
    return flags.DEFINE_integer(name, default, **common)
  if kind is float:
    return flags.DEFINE_float(name, default, **common)
  if kind is str and meta.get(_CHOICES):
    return flags.DEFINE_enum(name, default, list(meta[_CHOICES]), **common)
  if kind is str:
    return flags.DEFINE_string(name, default, **common)
  if origin in (list, tuple) and meta.get(_REPEATABLE):
    return flags.DEFINE_multi_string(name, default, **common)
  if origin in (list, tuple):
    return flags.DEFINE_list(name, None if default is None else [str(v) for v in default],
                             **common)
  raise TypeError(f"setting {name}: no flag for type {kind!r}")


def _typed_list(name: str, kind: Any, values: list[str] | None) -> Any:
  """A list flag's strings as the field's `list[T]` or `tuple[T, ...]`."""
  if values is None:
    return None
  element = (typing.get_args(kind) or (str,))[0]
  try:
    converted = [element(v) for v in values]
  except ValueError:
    raise InputError(f"--{name}: each item must be a {element.__name__}, got "
                     f"{','.join(values)}") from None
  return tuple(converted) if typing.get_origin(kind) is tuple else converted


class SettingsHolder(Generic[S]):
  """What `define_flags` returns: `.value` is the parsed flags as the settings dataclass."""

  def __init__(self, cls: type[S], holders: Mapping[tuple[str, ...], tuple[Any, flags.FlagHolder]]):
    self._cls, self._holders = cls, holders

  @property
  def value(self) -> S:
    settings = _default_instance(self._cls)
    for path, (kind, holder) in self._holders.items():
      value = holder.value
      if typing.get_origin(kind) in (list, tuple):
        value = _typed_list(path[-1], kind, value)
      settings = _replace_at(settings, path, value)
    return settings


def _replace_at(settings: Any, path: tuple[str, ...], value: Any) -> Any:
  if len(path) == 1:
    return dataclasses.replace(settings, **{path[0]: value})
  inner = _replace_at(getattr(settings, path[0]), path[1:], value)
  return dataclasses.replace(settings, **{path[0]: inner})


def define_flags(cls: type[S], flag_values: flags.FlagValues = flags.FLAGS) -> SettingsHolder[S]:
  """One absl flag per setting of `cls` (nested groups flattened); `.value` of what it returns is
  the parsed flags as a `cls`. A flag name two fields would share is a TypeError here."""
  holders = {}
  for path, f, kind, default in _leaves(cls, _default_instance(cls)):
    if any(p[-1] == path[-1] for p in holders):
      raise TypeError(f"{cls.__name__}: two settings would both be --{path[-1]}")
    holders[path] = (kind, _define(path[-1], f, kind, default, flag_values))
  return SettingsHolder(cls, holders)


def config_dict(cls: type, **overrides) -> ml_collections.ConfigDict:
  """`cls`'s settings with their defaults (and `overrides`) as a ConfigDict: every field once, a
  None default as a placeholder of the field's type, so a command-line override is typed."""
  hints = typing.get_type_hints(cls)
  unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
  if unknown:
    raise InputError(f"unknown {cls.__name__} setting {unknown[0]!r}; known: "
                     f"{', '.join(f.name for f in dataclasses.fields(cls))}")
  values = {}
  for name, value in dataclasses.asdict(_default_instance(cls)).items():
    value = overrides.get(name, value)
    kind = _unwrap(hints[name])
    if value is None:
      value = ml_collections.config_dict.placeholder(typing.get_origin(kind) or kind)
    values[name] = value
  return ml_collections.ConfigDict(values)


def from_config(cls: type[S], config: Mapping[str, Any]) -> S:
  """The fields of `cls` that `config` holds, as a `cls` (other keys of `config` are left)."""
  names = {f.name for f in dataclasses.fields(cls)}
  return cls(**{k: (tuple(v) if isinstance(v, list) else v)
                for k, v in config.items() if k in names})


def _typed(key: str, text: str, default: Any) -> Any:
  """A config argument's value as its default's type (a None default: a string)."""
  if isinstance(default, bool):
    if text.lower() in ("true", "1", "yes"):
      return True
    if text.lower() in ("false", "0", "no"):
      return False
    raise InputError(f"config argument {key}={text!r}: use true or false")
  if default is None or isinstance(default, str):
    return text
  try:
    return type(default)(text)
  except ValueError:
    raise InputError(f"config argument {key}={text!r}: not a {type(default).__name__}") from None


def parse_arg(arg: str | None, **spec: Any) -> types.SimpleNamespace:
  """A config file's argument (`--config=FILE:key=value,...`) as a namespace of the keys of
  `spec`, each typed as its default and set to it when absent. A key not in `spec` is refused,
  naming it and the known ones (a misspelt key would otherwise run a different audit)."""
  values = dict(spec)
  for pair in arg.split(",") if arg else ():
    key, sep, text = pair.partition("=")
    if not sep or not key:
      raise InputError(f"config argument {pair!r} is not key=value; known keys: "
                       f"{', '.join(spec)}")
    if key not in spec:
      raise InputError(f"unknown config argument {key!r}; known: {', '.join(spec)}")
    values[key] = _typed(key, text, spec[key])
  return types.SimpleNamespace(**values)
