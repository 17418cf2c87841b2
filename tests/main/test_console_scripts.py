"""Every console script's `--help` lists the command's own flags, `--config` among them.

absl's `--help` lists the flags of the module `sys.argv[0]` names; for a console script that is
pip's wrapper, which defines none, so `socialrm-convert --help` once printed its usage line and
"Try --helpfull" only. Each script runs here as pip installs it: a wrapper file that imports the
entry point and calls it (the one line added reports, at exit, the flags the package's modules
defined: what the help must list).
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import command_help

# pip's console-script wrapper, with the report of the flags the command defined.
WRAPPER = """\
import atexit, json, sys
atexit.register(lambda: print("DEFINED", json.dumps(sorted(
    f.name for m, fs in __import__("absl.flags").flags.FLAGS.flags_by_module_dict().items()
    if m.startswith("socialrm_jax.") for f in fs)), file=sys.stderr))
from {module} import {function}
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit({function}())
"""


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_every_console_script_help_lists_its_flags(tmp_path):
  scripts = command_help.console_scripts()
  assert len(scripts) >= 9 and all(name.startswith("socialrm-") for name in scripts)
  commands = []
  for name, target in scripts.items():
    module, function = target.split(":")
    wrapper = tmp_path / name
    wrapper.write_text(WRAPPER.format(module=module, function=function))
    commands.append([sys.executable, str(wrapper), "--help"])
  missing, no_usage, no_config = {}, [], []
  for name, done in zip(scripts, command_help.run_all(commands)):
    line = next((l for l in done.stderr.splitlines() if l.startswith("DEFINED ")), None)
    assert line is not None, f"{name}: {done.stderr[-2000:]}"
    defined = set(json.loads(line.split(" ", 1)[1]))
    assert defined - {"debug"}, f"{name} defines no flag of its own"
    if defined - command_help.listed_flags(done.stdout):
      missing[name] = sorted(defined - command_help.listed_flags(done.stdout))
    # Every command takes a config file (base/settings.py: one way to configure every command).
    if "config" not in defined or "config" not in command_help.listed_flags(done.stdout):
      no_config.append(name)
    # The usage is the command's docstring, as under `python -m`.
    if "python -m socialrm_jax.main." not in done.stdout:
      no_usage.append(name)
  assert not missing, f"flags a console script's --help leaves out: {missing}"
  assert not no_usage, f"console scripts whose --help shows no usage: {no_usage}"
  assert not no_config, f"console scripts whose --help lists no --config: {no_config}"
