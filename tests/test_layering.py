"""The house is one-way: every import of the package (module level, inside functions, under
TYPE_CHECKING, and the parent packages a module's import runs) goes to the importer's own layer or
one below it, and no import cycle exists. A module's layer is its folder: the package docstring
lists the layer folders, bottom first, and a module in no layer folder fails. One exception,
checked apart: the package's face takes the Python API's names from the top layer in its PEP 562
`__getattr__` (on first use), and nothing else."""

import ast
import pathlib
import subprocess
import sys
import textwrap

import pytest

import socialrm_jax

PACKAGE = pathlib.Path(socialrm_jax.__file__).parent


def module_files(root: pathlib.Path) -> dict[str, pathlib.Path]:
  """{dotted module name relative to the package ('' for its __init__): file}."""
  out = {}
  for path in sorted(root.rglob("*.py")):
    parts = path.relative_to(root).with_suffix("").parts
    out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return out


def lazy_face_nodes(tree: ast.Module) -> set[int]:
  """The ids of the nodes inside a module's top-level `__getattr__` (PEP 562)."""
  return {id(node) for top in tree.body
          if isinstance(top, ast.FunctionDef) and top.name == "__getattr__"
          for node in ast.walk(top)}


def imports(root: pathlib.Path, package: str, parents: bool = False,
            face_getattr: bool = False) -> dict[str, set[str]]:
  """{module: the package's modules it imports}: every import statement anywhere in its file
  (lazy and TYPE_CHECKING ones too), resolved to the deepest module named; with `parents`, also
  its parent packages, whose `__init__` runs first (they count for the layers, not for cycles:
  a package that re-exports its modules is no loop). The face's `__getattr__` is left out (its
  one import is checked apart), or, with `face_getattr`, is all that is read of the face."""
  files = module_files(root)

  def known(name: str) -> str | None:
    while name not in files and name:
      name = name.rpartition(".")[0]
    return name if name in files else None

  edges = {}
  for module, path in files.items():
    deps = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    lazy = lazy_face_nodes(tree) if module == "" else set()
    for node in ast.walk(tree):
      if module == "" and (id(node) in lazy) != face_getattr:
        continue
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        if node.level:
          base = module.split(".") if module else []
          base = base[:len(base) - node.level + (1 if path.name == "__init__.py" else 0)]
          prefix = ".".join([package] + base + ([node.module] if node.module else []))
        else:
          prefix = node.module or ""
        # `from pkg import module` depends on the module, `from module import name` on module.
        targets = [f"{prefix}.{a.name}" for a in node.names]
      else:
        continue
      for target in targets:
        if target == package or target.startswith(package + "."):
          found = known(target[len(package) + 1:])
          if found is not None and found != module:
            deps.add(found)
    if parents:
      parts = module.split(".") if module else []
      deps.update(".".join(parts[:i]) for i in range(len(parts)))
    deps.discard(module)
    edges[module] = deps
  return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(edges.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for v in sorted(edges):
    if v not in index:
      visit(v)
  return found


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


def layer_of(module: str, layers: list[str], packages: set[str]) -> int | None:
  """The index of the layer folder `module` lives in (a folder's own `__init__` included); -1 for
  the package's face, below every layer; None for a module in no layer folder."""
  if module == "":
    return -1
  folder = module.split(".")[0]
  in_folder = "." in module or module in packages
  return layers.index(folder) if in_folder and folder in layers else None


def violations(edges: dict[str, set[str]], layers: list[str], packages: set[str]) -> list[str]:
  names = ["the package's face"] + layers
  out = [f"{m}: in no layer folder; move it into one of {', '.join(layers)}"
         for m in sorted(edges) if layer_of(m, layers, packages) is None]
  for module in sorted(edges):
    mine = layer_of(module, layers, packages)
    for dep in sorted(edges[module]):
      theirs = layer_of(dep, layers, packages)
      if mine is not None and theirs is not None and theirs > mine:
        out.append(f"{module or 'socialrm_jax'} ({names[mine + 1]}) imports {dep} "
                   f"({names[theirs + 1]}), a layer above it")
  return out


def folders(root: pathlib.Path) -> set[str]:
  """The package's sub-packages (folders with an `__init__.py`), by dotted name."""
  return {".".join(p.parent.relative_to(root).parts) for p in root.rglob("__init__.py")} - {""}


LAYERS = written_layers(socialrm_jax.__doc__)
PACKAGES = folders(PACKAGE)


def test_the_package_has_no_import_cycle():
  assert cycles(imports(PACKAGE, "socialrm_jax")) == []


def test_every_import_goes_to_the_same_layer_or_below():
  assert violations(imports(PACKAGE, "socialrm_jax", parents=True), LAYERS, PACKAGES) == []


def test_the_written_order_reads_as_the_pipeline():
  assert LAYERS == ["base", "sources", "datasets", "models", "scoring", "analysis", "training",
                    "orchestrators", "main", "api"]


def test_the_face_reaches_only_the_api_and_only_lazily():
  """The face's `__getattr__` imports the top layer's `api` and nothing else; importing the
  package loads none of its modules, and the API's names come from `api` on first use."""
  assert imports(PACKAGE, "socialrm_jax", face_getattr=True)[""] == {"api"}
  assert LAYERS[-1] == "api"
  done = subprocess.run(
      [sys.executable, "-c", "import sys, socialrm_jax; "
       "print(sorted(m for m in sys.modules if m.startswith('socialrm_jax.')))"],
      capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
  assert done.stdout.strip() == "[]"
  from socialrm_jax import api
  assert all(getattr(socialrm_jax, name) is getattr(api, name) for name in socialrm_jax.API_NAMES)
  assert set(socialrm_jax.API_NAMES) <= set(dir(socialrm_jax))
  with pytest.raises(AttributeError, match="no attribute 'nothing'"):
    socialrm_jax.nothing  # pylint: disable=pointless-statement


def test_every_folder_of_the_package_is_a_layer():
  """`ls socialrm_jax` shows the layer folders, the package's face and its data, nothing else."""
  top = {p.name for p in PACKAGE.iterdir() if not p.name.startswith((".", "__pycache__"))}
  assert top == {"__init__.py", "bundled", *LAYERS}, sorted(top)


def _package(tmp_path, files: dict[str, str]) -> pathlib.Path:
  root = tmp_path / "pkg"
  for name, text in files.items():
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
  return root


def test_a_planted_lazy_or_type_checking_cycle_is_found(tmp_path):
  root = _package(tmp_path, {
      "__init__.py": "",
      "low.py": """
          from typing import TYPE_CHECKING
          if TYPE_CHECKING:
            from pkg.high import Thing
          """,
      "high.py": """
          def f():
            from pkg import low  # a lazy import is a dependency too
          """,
      "sub/__init__.py": "from pkg.sub import leaf\n",
      "sub/leaf.py": "from .. import low\n",
  })
  edges = imports(root, "pkg")
  assert edges["low"] == {"high"} and edges["high"] == {"low"}
  assert edges["sub.leaf"] == {"low"}  # a relative import
  assert imports(root, "pkg", parents=True)["sub.leaf"] == {"low", "sub", ""}
  assert cycles(edges) == [["high", "low"]]


def test_an_import_against_the_written_order_is_named(tmp_path):
  root = _package(tmp_path, {
      "__init__.py": "", "low/__init__.py": "", "low/a.py": "import pkg.high.b\n",
      "high/__init__.py": "", "high/b.py": "", "stray.py": "", "elsewhere/__init__.py": "",
      "elsewhere/c.py": ""})
  layers = ["low", "high"]
  assert violations(imports(root, "pkg", parents=True), layers, folders(root)) == [
      "elsewhere: in no layer folder; move it into one of low, high",
      "elsewhere.c: in no layer folder; move it into one of low, high",
      "stray: in no layer folder; move it into one of low, high",
      "low.a (low) imports high.b (high), a layer above it"]


def test_a_module_is_in_the_layer_of_its_folder():
  def layer(module):
    found = layer_of(module, LAYERS, PACKAGES)
    return found if found is None or found < 0 else LAYERS[found]

  assert layer("datasets") == "datasets"  # a layer folder's own `__init__`
  assert layer("analysis.datasets.bbq") == "analysis"  # a folder inside a layer is that layer
  assert layer("sources.reading") == "sources"
  assert layer("datasets.bbq") == "datasets"
  assert layer("orchestrators.plan.report") == "orchestrators"
  assert layer("") == -1 and layer("nowhere") is None


if __name__ == "__main__":
  pytest.main([__file__])
