"""Dataset plug-ins: no stage names a dataset outside its own module and the registry, a plug-in
installed from another package joins every stage, and dataset specs parse as documented."""

import json
import pathlib
import re
import sys
import textwrap

import pytest

import socialrm_jax
from socialrm_jax import registry
from socialrm_jax.analysis import evaluate, runner
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import convert

PACKAGE = pathlib.Path(socialrm_jax.__file__).parent


def test_no_dataset_is_named_outside_its_module_and_the_registry():
  """A quoted built-in dataset name anywhere else in the package is dispatch by name."""
  names = [n for n in registry.BUILT_IN]
  quoted = re.compile(r"""(["'])(%s)\1""" % "|".join(map(re.escape, names)))
  allowed = {PACKAGE / "registry" / "__init__.py"} | {
      PACKAGE / "datasets" / f"{n}.py" for n in names}
  found = []
  for path in sorted(PACKAGE.rglob("*.py")):
    if path in allowed:
      continue
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
      match = quoted.search(line)
      if match:
        found.append(f"{path.relative_to(PACKAGE)}:{number}: {match.group(0)}")
  assert not found, "dataset names outside their module and the registry:\n" + "\n".join(found)
  # The check can fail: the registry itself names every dataset, quoted.
  source = (PACKAGE / "registry" / "__init__.py").read_text()
  assert all(quoted.search(f'"{n}"') and f'"{n}"' in source for n in names)


# A dataset from another package: one module, registered by an entry point.
_PLUGIN_MODULE = '''
from socialrm_jax.analysis import estimates
from socialrm_jax.base import records
from socialrm_jax.base.templates import PromptTemplate
from socialrm_jax.datasets.plugin import DatasetPlugin



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


PLUGIN = DatasetPlugin(name="toy", convert=convert, summary=summary,
                       templates=(PromptTemplate("toy.default", 1, {"": "{q}"}),),
                       report_metrics=("accuracy", "loss_rate"), findings=findings)
'''


@pytest.fixture()
def toy_plugin(tmp_path, monkeypatch):
  site = tmp_path / "site"
  site.mkdir()
  (site / "toy_dataset.py").write_text(_PLUGIN_MODULE)
  info = site / "toy_dataset-1.0.dist-info"
  info.mkdir()
  (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-dataset\nVersion: 1.0\n")
  (info / "entry_points.txt").write_text(
      f"[{registry.ENTRY_POINT_GROUP}]\ntoy = toy_dataset:PLUGIN\n")
  monkeypatch.syspath_prepend(str(site))
  registry.plugins.cache_clear()
  yield
  sys.modules.pop("toy_dataset", None)
  registry.plugins.cache_clear()


def test_an_installed_plugin_joins_conversion_metrics_and_report(toy_plugin, tmp_path):
  assert "toy" in registry.plugins() and "toy" in registry.folder_names()
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
                               evaluate.Options(n_resamples=20, plugins=registry.plugins()))
  node = models["m"]["datasets"]["toy"]
  assert node["accuracy"] == 0.0 and node["loss_rate"] == 1.0
  report = (tmp_path / "report" / "report.md").read_text()
  assert "| loss_rate | 1.000" in report and "- toy loss rate 1.00" in report


def test_an_entry_point_that_is_not_a_plugin_is_refused(toy_plugin, tmp_path):
  info = next((tmp_path / "site").glob("*.dist-info"))
  (info / "entry_points.txt").write_text(
      f"[{registry.ENTRY_POINT_GROUP}]\ntoy = toy_dataset:convert\n")
  with pytest.raises(InputError, match="should be a DatasetPlugin of that name"):
    registry.plugins()


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
    ("domain=safety", "follows no <plugin>:PATH spec"),
    ("preference:x.jsonl:colour=red", "option 'colour=red' is not key=value"),
    ("preference:a/x.jsonl,preference:b/x.csv", "two sources are named 'x'"),
    ("preference:data/bbq.jsonl", "the name 'bbq' is a registered dataset's"),
    ("", "no dataset named"),
])
def test_bad_dataset_specs(values, message):
  with pytest.raises(InputError, match=re.escape(message)):
    registry.parse_specs(values)


def test_items_of_a_path_source_are_evaluated_by_the_generic_plugin():
  assert registry.for_dataset("someone_elses") is registry.plugins()[registry.GENERIC]
  assert registry.for_dataset("bbq") is registry.plugins()["bbq"]
