"""How every `socialrm-*` command runs: absl's `app.run` with bad input reported as one line.

A command is a `Command`: its console script's name, its settings dataclass (`base/settings.py`)
and its `main`, which takes the settings. `Command.run` defines the flags (when the command runs,
not when its module is imported, so every command's module imports into one process), parses them
and runs `main` through `run_command`: a refused flag or an `errors.InputError` is one line on
stderr, `socialrm-<command>: error: <what>` (`error_line`), and exit code 2 (`--debug` shows the
traceback). Before that it keeps JAX from starting libtpu or its CUDA
plugin where no TPU or GPU is (`skip_absent_accelerators`), makes `--help` list the command's
flags under a console script, and freezes the garbage collector at exit.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import gc
import glob
import importlib.util
import os
import sys
from typing import Callable, Generic, Mapping, Sequence, TypeVar

from absl import app, flags

from socialrm_jax.base import settings
from socialrm_jax.base.errors import InputError, USER_ERROR_EXIT_CODE, one_line

S = TypeVar("S")

# The flags a `Command` defines belong to the command's module, which called `run` (its `--help`
# lists them), not to this one.
flags.disclaim_key_flags()


def error_line(program: str, message: str) -> str:
  """The one line on stderr with which `program` refuses bad input."""
  return f"{program}: error: {one_line(message)}"


def _fail(program: str, message: str, exit_code: int = USER_ERROR_EXIT_CODE) -> None:
  print(error_line(program, message), file=sys.stderr)
  sys.exit(exit_code)


def flag_refusal(error: Exception) -> str | None:
  """What a command says of an error its flags' parsing raised, when the user is at fault: a
  refused flag, or a `--config.*` override of a field the config file lacks (None: another
  error, a bug, re-raised)."""
  if isinstance(error, flags.Error):
    return str(error)
  return unknown_config_field(error)


def _parse_flags(program: str, argv: Sequence[str]) -> list[str]:
  """absl's flag parsing, with a refused flag (or a `--config.*` override of a field the config
  file lacks) reported as every other user error."""
  try:
    return flags.FLAGS(argv)
  except Exception as error:  # pylint: disable=broad-except  # re-raised unless it is the user's
    message = flag_refusal(error)
    if message is None:
      raise
    _fail(program, message)


def _debug_flag() -> flags.FlagHolder[bool]:
  # Defined by the command, not when this module is imported: every library module imports it.
  if "debug" not in flags.FLAGS:
    return flags.DEFINE_bool("debug", False, "Show the traceback of an input error instead of "
                             "the one-line message.")
  return flags.FlagHolder(flags.FLAGS, flags.FLAGS["debug"])


def _main_reporting_errors(program: str, main: Callable[[list[str]], None],
                           exit_codes: Mapping[type[BaseException], int],
                           debug: flags.FlagHolder[bool], argv: list[str]) -> None:
  try:
    main(argv)
  except (InputError, *exit_codes) as error:
    if debug.value:
      raise
    code = next((c for kind, c in exit_codes.items() if isinstance(error, kind)),
                USER_ERROR_EXIT_CODE)
    _fail(program, str(error), code)


# Modules of the accelerator runtimes JAX starts when it first needs a device: libtpu, and JAX's
# CUDA plugins (the `plan` command's extras; `make test` installs them).
ACCELERATOR_RUNTIMES = ("libtpu", "jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13")


def _installed(module: str) -> bool:
  try:
    return importlib.util.find_spec(module) is not None
  except ModuleNotFoundError:  # its parent package is absent
    return False


# Device files through which the runtimes reach an accelerator: a TPU chip is /dev/accel<N> (TPU
# v2 to v4) or a VFIO group /dev/vfio/<N> (v5e and later); an NVIDIA GPU is /dev/nvidia<N> or
# /dev/nvidiactl (containers), or /dev/dxg under WSL2 (the files JAX's CUDA discovery looks for).
ACCELERATOR_DEVICE_FILES = ("/dev/accel[0-9]*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*",
                            "/dev/nvidiactl", "/dev/dxg")


def _accelerator_device_present() -> bool:
  return any(glob.glob(pattern) for pattern in ACCELERATOR_DEVICE_FILES)


def skip_absent_accelerators() -> None:
  """Keeps JAX from starting libtpu or its CUDA plugin on a machine without a TPU chip or GPU.

  Where installed, each is one of the backends JAX tries when it first needs a device, and on a
  machine without the device its start prints errors (libtpu: `unexpected worker hostname ...`,
  `Failed to find host bounds ...`; the CUDA plugin: a traceback of its library version checks)
  before JAX falls back to the CPU; a CUDA plugin that failed its start also makes no
  compile-only GPUs for `socialrm-plan`. So, unless the user chose the platforms (`JAX_PLATFORMS`,
  or JAX's `jax_platforms` setting), a machine with none of the accelerators' device files
  (`ACCELERATOR_DEVICE_FILES`) gets `jax_platforms = "cpu"`, what JAX would have chosen anyway
  (and, were its backends already up, what they are). TPU and GPU machines keep JAX's own
  discovery. Read from the device files: JAX's own probes are in no public module.
  """
  if os.environ.get("JAX_PLATFORMS") or not any(map(_installed, ACCELERATOR_RUNTIMES)):
    return
  if _accelerator_device_present():
    return
  import jax  # pylint: disable=import-outside-toplevel
  if jax.config.jax_platforms:
    return
  jax.config.update("jax_platforms", "cpu")


def _help_lists_the_commands_flags(main: Callable[[list[str]], None]) -> None:
  """absl's `--help` lists the key flags of the module `sys.argv[0]` names, under the docstring of
  `__main__`. Under `python -m` that is the command's own module; under a console script it is
  pip's wrapper, which defines no flag and has no docstring, so `--help` printed a bare usage line
  and "Try --helpfull". Every flag a module of this package defined is the command's (its own,
  the scoring flags it shares, `--debug`): each becomes a key flag of `sys.argv[0]`, and the
  command's docstring the wrapper's."""
  package = __name__.split(".")[0] + "."
  for module, defined in flags.FLAGS.flags_by_module_dict().items():
    if module.startswith(package):
      for flag in defined:
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  wrapper, command = sys.modules.get("__main__"), sys.modules.get(main.__module__)
  if wrapper is not None and command is not None and wrapper is not command and not wrapper.__doc__:
    wrapper.__doc__ = command.__doc__


def run_command(program: str, main: Callable[[list[str]], None], *,
                exit_codes: Mapping[type[BaseException], int] | None = None) -> None:
  """`app.run(main)` for the command `program` (`socialrm-score`): a refused flag or an
  `InputError` is one line on stderr and exit code 2 (no traceback unless `--debug`).

  `exit_codes`: further errors reported the same way, with their own codes (the scorer's
  non-finite reward: 3).
  Where no TPU chip or GPU is, JAX is kept from starting their runtimes
  (`skip_absent_accelerators`); `socialrm-plan` compiles for them all the same.
  """
  skip_absent_accelerators()
  # At exit, the interpreter's last collections walk every object jax, scipy and matplotlib made
  # (about 1 s of a 35M-model vocabulary scan's 35 s on a 2-core CPU). By then the command's files
  # are written and renamed and its locks are the OS's to drop, so the collector is told to leave
  # those objects (they are freed by refcount, or with the process).
  atexit.register(gc.freeze)
  debug = _debug_flag()
  _help_lists_the_commands_flags(main)
  app.run(functools.partial(_main_reporting_errors, program, main, dict(exit_codes or {}), debug),
          flags_parser=functools.partial(_parse_flags, program))


@dataclasses.dataclass(frozen=True)
class Command(Generic[S]):
  """A `socialrm-*` command: `program`, its console script's name; `settings`, its settings
  dataclass, from which its flags and config file's keys come; `main`, the work, given the
  settings; `config_example`, the config file named when the command needs one and none is given;
  `exit_codes`, errors besides `InputError` that end it with one line and their own exit code."""
  program: str
  settings: type[S]
  main: Callable[[S], None]
  config_example: str | None = None
  exit_codes: Mapping[type[BaseException], int] = dataclasses.field(default_factory=dict)

  def define_flags(self, flag_values: flags.FlagValues = flags.FLAGS
                   ) -> settings.SettingsHolder[S]:
    return settings.define_flags(self.settings, flag_values, config_example=self.config_example)

  def run(self) -> None:
    """The console script: the flags defined, parsed and `main` run (`run_command`)."""
    holder = self.define_flags()

    def main(argv: list[str]) -> None:
      del argv
      self.main(holder.value)

    main.__module__ = self.main.__module__  # whose docstring `--help` shows
    run_command(self.program, main, exit_codes=self.exit_codes)


def unknown_config_field(error: Exception) -> str | None:
  """The message for what the config file flag's parser (`base/settings.py`) raises when an
  override names a field the config lacks (`--config.metrics.nofield=1`): a KeyError, or an
  AttributeError holding one."""
  if not isinstance(error, (KeyError, AttributeError)) or not error.args:
    return None
  name = error.args[0]
  if isinstance(name, KeyError) and name.args:
    name = name.args[0]
  return f"a --config.* override names a field the config does not have: {name}"
