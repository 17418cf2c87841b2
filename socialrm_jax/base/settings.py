"""One declaration of a command's settings, from which its flags and its config file come.

A command declares its settings once, as a dataclass whose fields are made with `field` (a default
and a help line, and where they apply the choices or `required`). Everything else is derived:

- `define_flags(Settings)` defines `--config=FILE` and one absl flag per field, and returns a
  holder whose `.value` is the command's settings as a `Settings`: the defaults, then what the
  config file sets, then the flags given on the command line (a flag wins over the file).
  A field holding another settings dataclass made with `group` contributes its fields unprefixed,
  as flags and as the file's keys, so `socialrm-score`'s `--max_length` (and a config file's
  `config.max_length`) is `ScoreSettings.scoring.max_length`; `group` may set that command's own
  defaults and pick which of the group's fields become flags (the others keep their defaults),
  both by flag name (a group within a group is flattened too: socialrm-train's `--lora_rank` is
  `TrainConfig.lora.lora_rank`).
  A field made with `nested` (settings of one part: the audit's `metrics`) or `named` (a dict of
  them by name: the audit's `models`) is a group of the config file only, set as
  `--config.<name>.<field>=...` (`--config.models.<key>.max_length=512`); it has no flags.
- The config file is ml_collections' (`get_config()`, or `get_config(arg)` for `FILE:arg`; its
  fields overridden as `--config.<key>=...`). Its keys are the command's settings by their flag
  names; a key of no setting is refused with one line naming it, as is a value of the wrong
  type; a required setting given neither way is refused naming its flag.
- `config_dict(Settings)` / `from_config(Settings, config)`: the same tree of settings as an
  ml_collections `ConfigDict` (every field with its default; a None default becomes a typed
  placeholder, so `--config.models.x.proxy=loglik` still parses) and back, refusing unknown keys.
- `flat(settings)` / `replace(settings, name=value, ...)`: a command's settings by their flag
  names, groups flattened (a manifest's record of a run, a caller's change of a few).
- `parse_arg(arg, key=default, ...)`: a config file's argument string (`--config=FILE:key=v,...`)
  parsed as big_vision's `parse_arg` does: each value typed as its default, defaults for what is
  absent, and an unknown key refused with one line naming it and the known ones.

A new command needs two lines beside its dataclass and its `main` (in `main/score.py`):

    def main(config: ScoreSettings) -> None:               # the parsed settings, typed
    ...
    COMMAND = command.Command("socialrm-score", ScoreSettings, main)  # socialrm_jax.main.command
    def run():
      COMMAND.run()                # define_flags(ScoreSettings), then app.run; holder.value

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
from ml_collections import config_flags

from socialrm_jax.base.errors import InputError

S = TypeVar("S")

# The flags `define_flags` defines belong to the module that called it (the command's, whose
# `--help` lists them), not to this one.
flags.disclaim_key_flags()

# The keys of a field's metadata this module reads.
_HELP, _CHOICES, _REQUIRED, _REPEATABLE, _FLAGS, _NESTED = (
    "help", "choices", "required", "repeatable", "flags", "nested")

CONFIG_FLAG = "config"
CONFIG_HELP = ("A config file (ml_collections: get_config(), or get_config(arg) for FILE:arg) "
               "whose keys are this command's settings by their flag names (groups of the file "
               "only: --config.GROUP.FIELD=...); a flag given on the command line wins over it.")


def field(default: Any = dataclasses.MISSING, help: str = "", *,  # pylint: disable=redefined-builtin
          choices: Sequence[str] | None = None, required: bool = False, repeatable: bool = False,
          default_factory: Any = dataclasses.MISSING) -> Any:
  """A setting: its default (or `default_factory`), one help line, the values it may take (a flag
  refuses others), whether the command must be given it (by a flag or its config file), and (a
  list) whether its flag may be repeated, each time adding one value, instead of taking a
  comma-separated list."""
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
  """A field holding settings of their own (`cls`), with this command's `defaults`, whose fields
  are the command's flags and config keys unprefixed; `flags_of` names those that are (default:
  all). Both name settings by their flag names, so a group's own groups' too."""
  return dataclasses.field(default_factory=lambda: replace(cls(), **defaults),
                           metadata={_FLAGS: None if flags_of is None else tuple(flags_of)})


def nested(cls: type, **defaults) -> Any:
  """A field holding the settings of one part of a command (`cls`, with this command's
  `defaults`), a group of its config file (`--config.<field>.<setting>=...`) with no flags."""
  return dataclasses.field(default_factory=lambda: cls(**defaults), metadata={_NESTED: True})


def named(cls: type) -> Any:
  """A field `dict[str, cls]`: settings of several parts by name (the audit's models), in the
  config file as `--config.<field>.<name>.<setting>=...`; no flags."""
  del cls  # the field's type says it; given for the reader
  return dataclasses.field(default_factory=dict, metadata={_NESTED: True})


def _unwrap(kind: Any) -> Any:
  """`X | None` (or Optional[X]) as X."""
  if typing.get_origin(kind) in (typing.Union, types.UnionType):
    kinds = [k for k in typing.get_args(kind) if k is not type(None)]
    if len(kinds) == 1:
      return kinds[0]
  return kind


def _optional(kind: Any) -> bool:
  return (typing.get_origin(kind) in (typing.Union, types.UnionType)
          and type(None) in typing.get_args(kind))


@dataclasses.dataclass(frozen=True)
class _Key:
  """One key of a command's settings: a setting (`kind` its type) or a group of the config file
  (`part`: its settings dataclass; `by_name`: a dict of them)."""
  path: tuple[str, ...]
  field: dataclasses.Field
  kind: Any
  optional: bool = False
  part: type | None = None
  by_name: bool = False


def _keys(cls: type, only: Sequence[str] | None = None) -> Iterator[_Key]:
  """Every key of `cls`'s settings, `group`s flattened, in declaration order; `only`: those of
  these names (a group's name: all of its keys)."""
  hints = typing.get_type_hints(cls)
  for f in dataclasses.fields(cls):
    kind = _unwrap(hints[f.name])
    if dataclasses.is_dataclass(kind) and not f.metadata.get(_NESTED):
      for key in _keys(kind, f.metadata.get(_FLAGS)):
        if only is None or f.name in only or key.path[-1] in only:
          yield dataclasses.replace(key, path=(f.name, *key.path))
      continue
    if only is not None and f.name not in only:
      continue
    if f.metadata.get(_NESTED):
      by_name = typing.get_origin(kind) is dict
      part = typing.get_args(kind)[1] if by_name else kind
      yield _Key((f.name,), f, kind, part=part, by_name=by_name)
    else:
      yield _Key((f.name,), f, kind, _optional(hints[f.name]))


def _flag_keys(cls: type) -> list[_Key]:
  return [key for key in _keys(cls) if key.part is None]


def _default_instance(cls: type) -> Any:
  """`cls` with its defaults, its required fields None."""
  return cls(**{f.name: None for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING})


def flag_names(cls: type) -> list[str]:
  """The setting flags `define_flags(cls)` defines (beside `--config`), in declaration order."""
  return [key.path[-1] for key in _flag_keys(cls)]


def _define(name: str, f: dataclasses.Field, kind: Any, default: Any,
            flag_values: flags.FlagValues) -> flags.FlagHolder:
  meta = dict(f.metadata)
  common = dict(help=meta.get(_HELP) or name, flag_values=flag_values)
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


def flat(settings: Any) -> dict[str, Any]:
  """A command's settings by their flag names (`group`s flattened, as its flags and config keys
  are), in declaration order; `nested` and `named` parts as they are."""
  return {key.path[-1]: _get_at(settings, key.path) for key in _keys(type(settings))}


def replace(settings: S, **values: Any) -> S:
  """`settings` with the settings named by their flag names (a `group`'s unprefixed, as on the
  command line) set to `values`; a name of no setting is a TypeError."""
  keys = {key.path[-1]: key for key in _keys(type(settings))}
  for name, value in values.items():
    if name not in keys:
      raise TypeError(f"{type(settings).__name__} has no setting {name!r}")
    settings = _replace_at(settings, keys[name].path, value)
  return settings


def _get_at(settings: Any, path: tuple[str, ...]) -> Any:
  for name in path:
    settings = getattr(settings, name)
  return settings


def _replace_at(settings: Any, path: tuple[str, ...], value: Any) -> Any:
  if len(path) == 1:
    return dataclasses.replace(settings, **{path[0]: value})
  inner = _replace_at(getattr(settings, path[0]), path[1:], value)
  return dataclasses.replace(settings, **{path[0]: inner})


def _checked(where: str, key: _Key, value: Any, source: str = "--config") -> Any:
  """A config value as its setting's type; a value of another type is refused, naming it."""
  kind, choices = key.kind, key.field.metadata.get(_CHOICES)
  if value is None:
    if key.optional or key.field.default is None:
      return None
    raise InputError(f"{source}: {where} cannot be None")
  origin = typing.get_origin(kind)
  if origin in (list, tuple):
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
      raise InputError(f"{source}: {where} must be a list, got {value!r}")
    element = (typing.get_args(kind) or (str,))[0]
    items = [_checked(f"{where}[{i}]", _Key(key.path, key.field, element), v, source)
             for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else items
  if kind is float and isinstance(value, int) and not isinstance(value, bool):
    value = float(value)
  if kind in (bool, int, float, str) and (
      not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
    article = "an" if kind.__name__[0] in "aeiou" else "a"
    raise InputError(f"{source}: {where} must be {article} {kind.__name__}, got {value!r}")
  if choices and value not in choices:
    raise InputError(f"{source}: {where}={value!r}: use one of {', '.join(choices)}")
  return value


def _as_mapping(where: str, config: Any, source: str) -> Mapping[str, Any]:
  if isinstance(config, ml_collections.ConfigDict):
    return config.to_dict()
  if isinstance(config, Mapping):
    return config
  raise InputError(f"{source}: {where.rstrip('.') or 'get_config()'} must be a ConfigDict or a "
                   f"dict of settings, got {type(config).__name__}")


def _read(settings: S, cls: type[S], config: Any, where: str = "",
          source: str = "--config") -> S:
  """`settings` with what `config` (a mapping of `cls`'s keys) sets; a key of no setting of
  `cls` is refused, naming it (its place `where`, what gave it `source`) and the known ones."""
  keys = {key.path[-1]: key for key in _keys(cls)}
  for name, value in _as_mapping(where, config, source).items():
    key = keys.get(name)
    if key is None:
      raise InputError(f"{source} sets {where}{name}, which is no setting of "
                       f"{where.rstrip('.') or 'this command'} (known: {', '.join(keys)})")
    if key.by_name:
      parts = {part: _read(_default_instance(key.part), key.part, spec, f"{where}{name}.{part}.",
                           source)
               for part, spec in _as_mapping(f"{where}{name}", value, source).items()}
      settings = _replace_at(settings, key.path, parts)
    elif key.part is not None:
      inner = _read(_get_at(settings, key.path), key.part, value, f"{where}{name}.", source)
      settings = _replace_at(settings, key.path, inner)
    else:
      settings = _replace_at(settings, key.path, _checked(where + name, key, value, source))
  return settings


def _check_required(settings: Any, cls: type) -> None:
  for key in _flag_keys(cls):
    if key.field.metadata.get(_REQUIRED) and _get_at(settings, key.path) is None:
      raise InputError(f"--{key.path[-1]} is required (a flag, or a key of the --config file)")


def _loaded(holder: flags.FlagHolder, example: str | None) -> Any:
  """The config file flag's config (None: no file). A file that could not be loaded comes back
  from the flag as an object that raises OSError when first used; that is the user's error,
  named here."""
  config = holder.value
  if config is None:
    if example is not None:
      raise InputError(f"--config is required (e.g. {example})")
    return None
  try:
    config.get(CONFIG_FLAG)
  except OSError as e:
    reason = str(e.__cause__ or e).strip().splitlines()[-1].strip()
    raise InputError(f"--config: cannot load the config file: {reason}") from None
  except AttributeError:  # no `get`: `_as_mapping` names what it is
    pass
  return config


class SettingsHolder(Generic[S]):
  """What `define_flags` returns: `.value` is the command's settings: the defaults, what the
  config file sets, and the flags given on the command line, in that order."""

  def __init__(self, cls: type[S], holders: Mapping[_Key, flags.FlagHolder],
               config: flags.FlagHolder, flag_values: flags.FlagValues, example: str | None):
    self._cls, self._holders, self._config = cls, holders, config
    self._flag_values, self._example = flag_values, example

  @property
  def config(self) -> Any:
    """The config file's own config (None when none was given)."""
    return _loaded(self._config, self._example)

  @property
  def value(self) -> S:
    settings = _default_instance(self._cls)
    config = self.config
    if config is not None:
      settings = _read(settings, self._cls, config)
    for key, holder in self._holders.items():
      if not self._flag_values[holder.name].present:
        continue
      value = holder.value
      if typing.get_origin(key.kind) in (list, tuple):
        value = _typed_list(key.path[-1], key.kind, value)
      settings = _replace_at(settings, key.path, value)
    _check_required(settings, self._cls)
    return settings


def define_flags(cls: type[S], flag_values: flags.FlagValues = flags.FLAGS, *,
                 config_example: str | None = None) -> SettingsHolder[S]:
  """`--config=FILE` and one absl flag per setting of `cls` (groups flattened); `.value` of what
  it returns is the command's settings as a `cls`. `config_example`: the command needs a config
  file (its groups of the file: the audit's models), and this one is named when it is missing.
  A flag name two fields would share is a TypeError here."""
  holders: dict[_Key, flags.FlagHolder] = {}
  defaults = _default_instance(cls)
  for key in _flag_keys(cls):
    if any(k.path[-1] == key.path[-1] for k in holders):
      raise TypeError(f"{cls.__name__}: two settings would both be --{key.path[-1]}")
    holders[key] = _define(key.path[-1], key.field, key.kind, _get_at(defaults, key.path),
                           flag_values)
  config = config_flags.DEFINE_config_file(CONFIG_FLAG, None, CONFIG_HELP,
                                           flag_values=flag_values, lock_config=True)
  return SettingsHolder(cls, holders, config, flag_values, config_example)


def config_dict(cls: type, *, source: str = "--config", **overrides) -> ml_collections.ConfigDict:
  """`cls`'s settings with their defaults (and `overrides`) as a ConfigDict: every key once (a
  `nested` part as a ConfigDict of its own), a None default as a placeholder of the setting's
  type, so a command-line override is typed. An override of no setting is refused, naming it
  and what gave it (`source`)."""
  settings = _read(_default_instance(cls), cls, overrides, source=source)
  return _as_config(settings, cls)


def _as_config(settings: Any, cls: type) -> ml_collections.ConfigDict:
  values = {}
  for key in _keys(cls):
    value = _get_at(settings, key.path)
    if key.by_name:
      value = ml_collections.ConfigDict({k: _as_config(v, key.part) for k, v in value.items()})
    elif key.part is not None:
      value = _as_config(value, key.part)
    elif value is None:
      value = ml_collections.config_dict.placeholder(typing.get_origin(key.kind) or key.kind)
    values[key.path[-1]] = value
  return ml_collections.ConfigDict(values)


def from_config(cls: type[S], config: Any, where: str = "", source: str = "--config") -> S:
  """`config` (a ConfigDict or a mapping of `cls`'s keys) as a `cls`: the defaults and what it
  sets, each value checked against its setting's type; a key of no setting is refused, naming it
  after `where` (its place in the config: "models.rm.") and what gave it (`source`)."""
  return _read(_default_instance(cls), cls, config, where, source)


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
