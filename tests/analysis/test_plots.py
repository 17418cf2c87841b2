"""The report's figures are drawn on `matplotlib.figure.Figure` objects: no library module chooses
a backend for the process or goes through pyplot's global state."""

import ast
import pathlib
import subprocess
import sys

import socialrm_jax

PACKAGE = pathlib.Path(socialrm_jax.__file__).parent


def process_wide_matplotlib(source: str) -> list[str]:
  """`matplotlib.use(...)` calls and pyplot imports in one module's source."""
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr == "use" and isinstance(node.func.value, ast.Name) \
        and node.func.value.id == "matplotlib":
      found.append(f"{node.lineno}: matplotlib.use")
    names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
             [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom)
             else [])
    found += [f"{node.lineno}: {n}" for n in names if n.startswith("matplotlib.pyplot")]
  return sorted(found)


def test_no_module_chooses_a_backend_or_imports_pyplot():
  found = {str(p.relative_to(PACKAGE)): hits for p in sorted(PACKAGE.rglob("*.py"))
           if (hits := process_wide_matplotlib(p.read_text(encoding="utf-8")))}
  assert found == {}
  # The check can fail: the code this module replaced.
  assert process_wide_matplotlib('import matplotlib\nmatplotlib.use("Agg")\n'
                                 "import matplotlib.pyplot as plt\n") == [
      "2: matplotlib.use", "3: matplotlib.pyplot"]


def test_drawing_the_figures_leaves_the_process_backend_alone(tmp_path):
  code = f"""
import sys
from socialrm_jax.analysis.outputs import plots
models = {{"a": {{"domains": {{"bias": {{"accuracy": 0.4, "ci95": [0.3, 0.5]}}}},
                "datasets": {{"bbq": {{"bias_avoidance": 0.6, "context_faithfulness": 0.7}}}}}}}}
drawn = plots.write_all(models, {str(tmp_path)!r})
print(sorted(name for name, path in drawn.items() if path))
print("matplotlib.pyplot" in sys.modules, "matplotlib.backends.backend_agg" in sys.modules)
"""
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  drawn, loaded = out.stdout.splitlines()
  assert drawn == "['bias_tradeoff.png', 'domain_accuracy.png']"
  assert (tmp_path / "domain_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert loaded == "False True"  # saved with Agg's canvas, chosen for the figure only
