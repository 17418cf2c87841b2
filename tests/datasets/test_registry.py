"""Datasets: no stage names a dataset outside its own modules (its adapter, its analysis) and the
registry, a dataset installed from another package joins every stage, and dataset specs parse as
documented."""

import json
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

import socialrm_jax
from socialrm_jax.analysis import dataset_analysis, evaluate, runner
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.datasets import registry
from socialrm_jax.orchestrators import convert

PACKAGE = pathlib.Path(socialrm_jax.__file__).parent


def test_no_dataset_is_named_outside_its_modules_and_the_registry():
  """A quoted built-in dataset name anywhere else in the package is dispatch by name."""
  names = [n for n in registry.BUILT_IN]
  quoted = re.compile(r"""(["'])(%s)\1""" % "|".join(map(re.escape, names)))
  # The coverage validation re-reads the bundled HH-RLHF items as a user's own preference data:
  # a choice of data for its simulation, not a dispatch on a dataset's name.
  allowed = {PACKAGE / "datasets" / "registry.py",
             PACKAGE / "orchestrators" / "interval_coverage.py"} | {
      PACKAGE / folder / f"{n}.py" for n in names for folder in ("datasets", "analysis/datasets")}
  found = []
  for path in sorted(PACKAGE.rglob("*.py")):
    if path in allowed:
      continue
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
      match = quoted.search(line)
      if match:
        found.append(f"{path.relative_to(PACKAGE)}:{number}: {match.group(0)}")
  assert not found, "dataset names outside their modules and the registry:\n" + "\n".join(found)
  # The check can fail: the registry itself names every dataset, quoted.
  source = (PACKAGE / "datasets" / "registry.py").read_text()
  assert all(quoted.search(f'"{n}"') and f'"{n}"' in source for n in names)


# A dataset from another package: one module, named by an entry point, that registers its adapter
# and its analysis under the dataset's name.
_DATASET_MODULE = '''
from socialrm_jax.analysis import dataset_analysis
from socialrm_jax.analysis.resampling import estimates
from socialrm_jax.base import records
from socialrm_jax.base.templates import PromptTemplate
from socialrm_jax.datasets import registry


@registry.register("toy", templates=(PromptTemplate("toy.default", 1, {"": "{q}"}),))
def convert(reader):
  for path in reader.find("*.jsonl"):
    for number, row in reader.jsonl_rows(path, "all"):
      yield records.Item(
          item_id=records.make_item_id("toy", number), domain="safety", dataset="toy",
          subset="all", split="test", prompt=records.user_prompt(reader.template.render(q=row["q"])),
          candidates=[row["good"], row["bad"]], roles=[records.CHOSEN, records.REJECTED],
          desirability=[1, -1], context_condition=None, template=reader.template.name,
          attributes={}, pairs=records.gold_pairs([1, -1]))


def summary(view):
  node = {}
  estimates.put(node, "loss_rate", 1 - estimates.ratio(view.sums.total("gold_wins"),
                                                       view.sums.total("gold_pairs")), "none")
  return node


def findings(name, node):
  return [(1.0, f"{name} loss rate {node['loss_rate']:.2f}")] if node["loss_rate"] > 0.5 else []


dataset_analysis.register("toy", dataset_analysis.DatasetAnalysis(
    summary=summary, findings=findings, report_metrics=("accuracy", "loss_rate")))
'''


@pytest.fixture()
def installed_toy(tmp_path, monkeypatch):
  site = tmp_path / "site"
  site.mkdir()
  (site / "toy_dataset.py").write_text(_DATASET_MODULE)
  info = site / "toy_dataset-1.0.dist-info"
  info.mkdir()
  (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-dataset\nVersion: 1.0\n")
  (info / "entry_points.txt").write_text(
      f"[{registry.ENTRY_POINT_GROUP}]\ntoy = toy_dataset\n")
  monkeypatch.syspath_prepend(str(site))
  _forget_installed()
  yield
  _forget_installed()


def _forget_installed():
  sys.modules.pop("toy_dataset", None)
  registry.ADAPTERS.forget_entry_points()
  dataset_analysis.ANALYSES.forget_entry_points()


def test_an_installed_dataset_joins_conversion_metrics_and_report(installed_toy, tmp_path):
  assert "toy" in registry.adapters() and "toy" in registry.folder_names()
  data = tmp_path / "data" / "toy"
  data.mkdir(parents=True)
  (data / "t.jsonl").write_text("".join(json.dumps({"q": f"q{i}", "good": "yes", "bad": f"no{i}"})
                                        + "\n" for i in range(6)))
  converted = convert.convert_all(tmp_path / "data", "toy")
  convert.write(converted, tmp_path / "conv", "jsonl")
  scores = [{"item_id": it["item_id"], "candidate": k, "reward": float(k)}  # rejected always wins
            for it in converted.items for k in range(2)]
  tables.write_rows(tmp_path / "scores" / "scores.jsonl", scores)
  models = runner.evaluate_all(str(tmp_path / "conv"), [str(tmp_path / "scores")],
                               str(tmp_path / "report"), ["m"],
                               evaluate.Options(n_resamples=20))
  node = models["m"]["datasets"]["toy"]
  assert node["accuracy"] == 0.0 and node["loss_rate"] == 1.0
  report = (tmp_path / "report" / "report.md").read_text()
  assert "| loss_rate | 1.000" in report and "- toy loss rate 1.00" in report


def test_an_entry_point_whose_module_registers_no_dataset_of_its_name_is_refused(
    installed_toy, tmp_path):
  info = next((tmp_path / "site").glob("*.dist-info"))
  (info / "entry_points.txt").write_text(
      f"[{registry.ENTRY_POINT_GROUP}]\ntoy = toy_dataset\nmissing = toy_dataset\n")
  with pytest.raises(InputError, match=re.escape(
      "entry point missing in group socialrm_jax.datasets should name a module that registers "
      "dataset 'missing'")):
    registry.adapters()


def test_an_entry_point_that_registers_a_known_name_again_is_refused(installed_toy, tmp_path):
  module = tmp_path / "site" / "toy_dataset.py"
  module.write_text(module.read_text().replace('register("toy", templates', 'register("bbq", templates'))
  with pytest.raises(InputError, match=re.escape(
      "entry point toy = toy_dataset in group socialrm_jax.datasets: dataset 'bbq' is registered "
      "twice")):
    registry.adapters()


@pytest.mark.parametrize("values, expected", [
    ("all", [(n, None, {}) for n in registry.folder_names()]),
    (["moral_stories,bbq", "bbq"], [("bbq", None, {}), ("moral_stories", None, {})]),
    ("xstest,preference:d/my.data.jsonl:name=mine,domain=safety,bbq",
     [("bbq", None, {}), ("xstest", None, {}), ("mine", "d/my.data.jsonl", {"domain": "safety"})]),
    (["preference:/x/rb.parquet", "preference:/y/saved:domain=bias"],
     [("rb", "/x/rb.parquet", {}), ("saved", "/y/saved", {"domain": "bias"})]),
])
def test_dataset_specs(values, expected):
  specs = registry.parse_specs(values)
  assert [(s.name, s.path and str(s.path), s.options) for s in specs] == expected


@pytest.mark.parametrize("values, message", [
    ("bbq,nope", "unknown dataset 'nope'"),
    ("preference", "dataset 'preference' reads a path: write preference:PATH"),
    ("bbq:x.jsonl", "dataset 'bbq' reads <data_dir>/bbq/, not a path"),
    ("domain=safety", "follows no <adapter>:PATH spec"),
    ("preference:x.jsonl:colour=red", "option 'colour=red' is not key=value"),
    ("preference:a/x.jsonl,preference:b/x.csv", "two sources are named 'x'"),
    ("preference:data/bbq.jsonl", "the name 'bbq' is a registered dataset's"),
    ("", "no dataset named"),
])
def test_bad_dataset_specs(values, message):
  with pytest.raises(InputError, match=re.escape(message)):
    registry.parse_specs(values)


def test_every_dataset_has_an_adapter_and_an_analysis_of_its_name():
  for name in registry.BUILT_IN:
    assert registry.get(name).name == name
    assert dataset_analysis.ANALYSES.lookup(name) is not None, name


def test_converting_imports_no_analysis():
  """The adapters sit below scoring and analysis: reading every one imports neither."""
  code = ("import sys; from socialrm_jax.datasets import registry; registry.adapters(); "
          "print(sorted(m for m in sys.modules if m.startswith(('socialrm_jax.analysis', "
          "'socialrm_jax.scoring', 'socialrm_jax.models', 'matplotlib', 'jax'))))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"
