"""The house is one-way. import-linter's contracts in pyproject.toml (`[tool.importlinter]`) check
every import of the package, module level, inside a function and under TYPE_CHECKING alike: each
goes to the importer's own layer or one below it (the layers contract, exhaustive: a module in no
layer folder breaks it), the package's face imports none of its modules, no modules of one
package import each other around a loop (acyclic_siblings, at every depth), and analysis reaches
datasets only through their registry. `lint-imports` runs
here on the package and on copies of it with a bad import planted; beside it, what import-linter
does not check: the contract's layers are the ones the package docstring lists, and `ls
socialrm_jax` shows nothing but them, the face and the bundled data; and the face's one exception
(its PEP 562 `__getattr__` takes the Python API's names from the top layer on first use, and
nothing else), which the face contract lets through and a test here checks."""

import ast
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

import pytest

import socialrm_jax

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "socialrm_jax"
# The console script `lint-imports`, run with this interpreter whatever its folder is on PATH.
LINT_IMPORTS = [sys.executable, "-c",
                "import sys; from importlinter.cli import lint_imports_command; "
                "sys.exit(lint_imports_command())", "--no-cache"]


def lint_imports(root: pathlib.Path) -> subprocess.CompletedProcess:
  """`lint-imports` on the package under `root`, with `root`'s pyproject.toml."""
  env = dict(os.environ, PYTHONPATH=str(root))
  return subprocess.run(LINT_IMPORTS, cwd=root, env=env, capture_output=True, text=True,
                        check=False, timeout=120)


def written_layers(docstring: str) -> list[str]:
  """The layer folders, bottom first, from the docstring's 'Layers, bottom first' list: the
  first word of each indented line."""
  table = docstring.split("Layers, bottom first, one folder each:\n", 1)[1]
  rows = []
  for line in table.splitlines():
    if not line.startswith("  "):
      break
    rows.append(line.split()[0])
  return rows


LAYERS = written_layers(socialrm_jax.__doc__)


def test_lint_imports_keeps_every_contract():
  result = lint_imports(ROOT)
  assert result.returncode == 0, result.stdout + result.stderr
  assert "4 kept, 0 broken" in result.stdout, result.stdout


def test_the_contracts_layers_are_the_written_ones_and_read_as_the_pipeline():
  contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
  layers = next(c for c in contracts["contracts"] if c["type"] == "layers")
  assert layers["layers"] == LAYERS[::-1] and layers["exhaustive"]
  assert LAYERS == ["base", "sources", "datasets", "models", "runtime", "scoring", "analysis",
                    "training", "orchestrators", "main", "api"]


def face_getattr_imports() -> set[str]:
  """The modules the face's top-level `__getattr__` imports; and the face's imports elsewhere."""
  tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
  inside = {id(node) for top in tree.body
            if isinstance(top, ast.FunctionDef) and top.name == "__getattr__"
            for node in ast.walk(top)}
  found: dict[bool, set[str]] = {True: set(), False: set()}
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("socialrm_jax"):
      found[id(node) in inside].update(f"{node.module}.{a.name}" for a in node.names)
    elif isinstance(node, ast.Import):
      found[id(node) in inside].update(a.name for a in node.names
                                       if a.name.startswith("socialrm_jax"))
  assert not found[False], f"the face imports {sorted(found[False])} outside __getattr__"
  return found[True]


def test_the_face_reaches_only_the_api_and_only_lazily():
  """The face's `__getattr__` imports the top layer's `api` and nothing else; importing the
  package loads none of its modules, and the API's names come from `api` on first use."""
  assert face_getattr_imports() == {"socialrm_jax.api"} and LAYERS[-1] == "api"
  done = subprocess.run(
      [sys.executable, "-c", "import sys, socialrm_jax; "
       "print(sorted(m for m in sys.modules if m.startswith('socialrm_jax.')))"],
      capture_output=True, text=True, check=True, cwd=ROOT)
  assert done.stdout.strip() == "[]"
  from socialrm_jax import api  # pylint: disable=import-outside-toplevel
  assert all(getattr(socialrm_jax, name) is getattr(api, name) for name in socialrm_jax.API_NAMES)
  assert set(socialrm_jax.API_NAMES) <= set(dir(socialrm_jax))
  with pytest.raises(AttributeError, match="no attribute 'nothing'"):
    socialrm_jax.nothing  # pylint: disable=pointless-statement


def test_every_folder_of_the_package_is_a_layer():
  """`ls socialrm_jax` shows the layer folders, the package's face and its data, nothing else
  (import-linter sees Python modules only: a folder without one would pass it)."""
  top = {p.name for p in PACKAGE.iterdir() if not p.name.startswith((".", "__pycache__"))}
  assert top == {"__init__.py", "bundled", *LAYERS}, sorted(top)


# (file, text appended to it, a line lint-imports prints for the broken contract)
PLANTED = {
    "lazy_upward": ("base/records.py",
                    "\ndef planted():\n  from socialrm_jax.orchestrators import audit\n",
                    "socialrm_jax.base is not allowed to import socialrm_jax.orchestrators:"),
    "type_checking_upward": ("models/weights.py",
                             "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                             "  from socialrm_jax.analysis.outputs import report\n",
                             "socialrm_jax.models is not allowed to import socialrm_jax.analysis:"),
    "cycle_in_a_layer": ("base/errors.py",
                         "\ndef planted():\n  from socialrm_jax.base import tables\n",
                         "No cycles are allowed in socialrm_jax.base."),
    "face_imports_a_module": ("__init__.py", "\nfrom socialrm_jax.base import errors\n",
                              "socialrm_jax is not allowed to import socialrm_jax.base.errors:"),
    "module_in_no_layer": ("stray.py", "", "- socialrm_jax.stray"),
    "analysis_imports_an_adapter": ("analysis/metrics/best_of_n.py",
                                    "\nfrom socialrm_jax.datasets import preference\n",
                                    "socialrm_jax.analysis is not allowed to import "
                                    "socialrm_jax.datasets:"),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_lint_imports_fails_on_a_planted_import(tmp_path, case):
  shutil.copytree(PACKAGE, tmp_path / "socialrm_jax",
                  ignore=shutil.ignore_patterns("__pycache__", "bundled"))
  shutil.copy(ROOT / "pyproject.toml", tmp_path)
  name, text, message = PLANTED[case]
  with open(tmp_path / "socialrm_jax" / name, "a", encoding="utf-8") as f:
    f.write(text)
  result = lint_imports(tmp_path)
  assert result.returncode == 1, result.stdout + result.stderr
  assert message in result.stdout, result.stdout
  assert "0 broken" not in result.stdout


if __name__ == "__main__":
  pytest.main([__file__])
