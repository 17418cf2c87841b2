"""Prompt templates: every dataset has a default and a documented paraphrase, each renders the
source row it is given and survives the items table, `--templates=all` converts every one into
one table without id collisions, the main metrics use each dataset's primary template only, and
the metrics command reports the template spread (tests/analysis/test_template_spread.py tests
it)."""

import csv
import gzip
import inspect
import json
import pathlib
import re
import subprocess
import sys

import pytest

from socialrm_jax.datasets import registry
from socialrm_jax.analysis import evaluate, runner
from socialrm_jax.base import records, tables, templates
from socialrm_jax.base.errors import InputError
from socialrm_jax.datasets.hh_rlhf import parse_transcript, SPEAKERS
from socialrm_jax.orchestrators import convert, audit
from tests.helpers.paths import REPO_ROOT
from tests.helpers.scored_fixtures import templated


BUNDLED = REPO_ROOT / "socialrm_jax" / "bundled"
OPTIONS = evaluate.Options(n_resamples=100)


def test_every_adapter_has_a_default_and_a_documented_paraphrase():
  for name, adapter in registry.adapters().items():
    names = [t.name for t in adapter.templates]
    assert len(names) >= 2 and names[0] == templates.default_template(name), name
    assert len(set(names)) == len(names) and all(n.startswith(f"{name}.") for n in names)
    default = adapter.templates[0]
    source = inspect.getsource(sys.modules[adapter.convert.__module__]).splitlines()
    for template in adapter.templates[1:]:
      # The adapter picks variants by the default's names: a paraphrase must have each of them.
      assert set(template.variants) == set(default.variants), template.name
      line = next(i for i, text in enumerate(source) if f'"{template.name}"' in text)
      assert source[line - 1].strip().startswith("#"), f"{template.name} has no comment"


# -- each template on a real bundled row, through the items table --------------------------------


def _jsonl_first(path: pathlib.Path) -> dict:
  opener = gzip.open if path.suffix == ".gz" else open
  with opener(path, "rt", encoding="utf-8") as lines:
    return json.loads(next(lines))


def _csv_first(path: pathlib.Path) -> dict:
  with open(path, newline="", encoding="utf-8") as fh:
    return next(csv.DictReader(fh))


def _expected_prompts() -> dict[str, list[tuple[str, str, dict, list]]]:
  """dataset -> [(default item id, variant, source fields, earlier messages)], each read straight
  from a bundled source file; the prompt is the earlier messages, then the rendered user turn."""
  bbq = _jsonl_first(BUNDLED / "bbq/data/Age.jsonl")
  crows = _csv_first(BUNDLED / "crows_pairs/crows_pairs_anonymized.csv")
  stereo = _jsonl_first(BUNDLED / "stereoset/test.jsonl")
  ethics = BUNDLED / "ethics"
  virtue = _csv_first(ethics / "virtue/virtue_test.csv")["scenario"].split(" [SEP] ")[0]
  story = _jsonl_first(BUNDLED / "moral_stories/original_ms/action+norm/norm_distance/dev.jsonl")
  hh = parse_transcript(_jsonl_first(BUNDLED / "hh_rlhf/harmless-base/test.jsonl.gz")["chosen"])
  earlier = [{"role": SPEAKERS[s], "content": t} for s, t in hh[:-2]]
  with open(BUNDLED / "xstest/xstest_prompts.csv", newline="", encoding="utf-8") as fh:
    xstest = {row["id"]: row["prompt"] for row in csv.DictReader(fh)}
  return {
      "bbq": [(f"bbq/Age/{bbq['example_id']}", "",
               {"context": bbq["context"], "question": bbq["question"]}, [])],
      "crows_pairs": [(f"crows_pairs/{crows['']}", "", {}, [])],
      "stereoset": [("stereoset/test/1", stereo["type"], {"context": stereo["context"]}, [])],
      "ethics": [
          ("ethics/commonsense/test/1", "commonsense",
           {"input": _csv_first(ethics / "commonsense/cm_test.csv")["input"]}, []),
          ("ethics/deontology/test/1", "deontology",
           {"scenario": _csv_first(ethics / "deontology/deontology_test.csv")["scenario"]}, []),
          ("ethics/justice/test/1", "justice", {}, []),
          ("ethics/virtue/test/1", "virtue", {"sentence": virtue}, []),
          ("ethics/utilitarianism/test/1", "utilitarianism", {}, [])],
      "moral_stories": [(f"moral_stories/dev/{story['ID'][:-1]}/{condition}", condition,
                         {"norm": story["norm"]}, [])
                        for condition in (records.WITH_NORM, records.WITHOUT_NORM)],
      "hh_rlhf": [("hh_rlhf/harmless-base/test/1", "", {"transcript": hh[-2][1]}, earlier)],
      # The first prompt is answered by compliances and refusals both, so it makes an item.
      "xstest": [("xstest/1", "", {"prompt": xstest["1"]}, [])],
  }


@pytest.fixture(scope="module")
def expected_prompts():
  return _expected_prompts()


@pytest.mark.parametrize("dataset", registry.folder_names())
def test_each_template_renders_a_source_row_and_round_trips(tmp_path, dataset, expected_prompts):
  report = convert.convert_to(tmp_path, BUNDLED, dataset, "parquet",
                                  templates=f"{dataset}={templates.ALL}")
  rows = {row["item_id"]: row for row in tables.read_rows(tmp_path, "items")}
  adapter = registry.get(dataset)
  assert list(report["datasets"][dataset]["templates"]) == [t.name for t in adapter.templates]
  for template in adapter.templates:
    for default_id, variant, fields, earlier in expected_prompts[dataset]:
      item_id = (default_id if templates.is_default(template.name)
                 else records.templated_item_id(default_id, template.name))
      row = rows[item_id]
      assert row["template"] == template.name
      assert row["prompt"] == earlier + records.user_prompt(template.render(variant, **fields))
      assert row["candidates"] == rows[default_id]["candidates"]
  for default_id, variant, fields, _ in expected_prompts[dataset]:  # each its own wording
    texts = {template.render(variant, **fields) for template in adapter.templates}
    assert len(texts) == len(adapter.templates), default_id


def test_a_path_source_frames_only_its_final_user_turn(tmp_path):
  source = tmp_path / "mine.jsonl"
  conversation = [{"role": "user", "content": "Hi {there}"},
                  {"role": "assistant", "content": "Hello"},
                  {"role": "user", "content": "What is 2+2?"}]
  source.write_text(json.dumps({"prompt": conversation, "chosen": "4", "rejected": "5"}) + "\n")
  default, framed = convert.convert_all(None, f"preference:{source}",
                                            templates="preference=all").items
  assert (default["item_id"], framed["item_id"]) == ("mine/1", "mine/1@preference.framed")
  assert default["prompt"] == conversation
  assert framed["prompt"] == conversation[:2] + [
      {"role": "user", "content": templates.REPLY_FRAMING + "What is 2+2?"}]


# -- every template in one run ---------------------------------------------------------------------


def _convert(*args):
  return subprocess.run([sys.executable, "-m", "socialrm_jax.main.convert", *args],
                        capture_output=True, text=True)


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_templates_all_converts_every_template_of_the_bundled_suite_into_onetemplated(tmp_path):
  proc = _convert(f"--data_dir={BUNDLED}", "--datasets=all", f"--output_dir={tmp_path / 'all'}",
                  "--templates=all")
  assert proc.returncode == 0, proc.stderr
  default = convert.convert_all(BUNDLED, "all")
  report = json.loads((tmp_path / "all" / "conversion_report.json").read_text())
  items = tables.read_rows(tmp_path / "all", "items")
  pairs = tables.read_rows(tmp_path / "all", "pairs")
  ids = [row["item_id"] for row in items]
  assert len(set(ids)) == len(ids) == report["totals"]["items"]
  assert len({p["pair_id"] for p in pairs}) == len(pairs) == sum(report["totals"]["pairs"].values())
  # Default items keep their ids and contents; each template makes as many items as the default.
  by_id = {row["item_id"]: row for row in items}
  assert all(by_id[row["item_id"]] == row for row in default.items)
  for name, node in report["datasets"].items():
    per_template = node["templates"]
    assert list(per_template) == [t.name for t in registry.get(name).templates]
    counts = {t: sum(row["dataset"] == name and row["template"] == t for row in items)
              for t in per_template}
    assert counts == {t: r["items"] for t, r in per_template.items()}
    assert set(counts.values()) == {default.report["datasets"][name]["items"]}
    assert node["items"] == sum(counts.values())


@pytest.mark.parametrize("spec, expected", [
    ("", {"bbq": ["bbq.default"], "xstest": ["xstest.default"]}),
    ("all", {"bbq": ["bbq.default", "bbq.paraphrase", "bbq.instructed"],
             "xstest": ["xstest.default", "xstest.framed"]}),
    (["bbq=instructed+default", "all"], {"bbq": ["bbq.instructed", "bbq.default"],
                                         "xstest": ["xstest.default", "xstest.framed"]}),
    ({"bbq": "bbq.instructed"}, {"bbq": ["bbq.instructed"], "xstest": ["xstest.default"]}),
])
def test_template_selection(spec, expected):
  selection = templates.parse_selection(spec, registry.adapters())
  assert {name: templates.chosen(name, registry.get(name).templates, selection)
          for name in expected} == expected


@pytest.mark.parametrize("spec, message", [
    ("bbq", "'bbq' is not 'all', DATASET=all or DATASET=TEMPLATE"),
    ("nope=all", "'nope=all' names no known dataset"),
    ("bbq=all,bbq=default", "'bbq' is given templates twice"),
    ("bbq=default+shouted", "bbq=default+shouted: unknown template 'shouted'; bbq has "
                            "bbq.default, bbq.paraphrase, bbq.instructed (or all)"),
    ("bbq=default+bbq.default", "bbq=default+bbq.default: a template is listed twice"),
])
def test_bad_template_selections_are_refused(spec, message):
  with pytest.raises(InputError, match=re.escape(f"{templates.FLAG}: {message}")):
    templates.chosen("bbq", registry.get("bbq").templates,
                     templates.parse_selection(spec, registry.adapters()))


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_the_command_names_a_bad_template_and_writes_nothing(tmp_path):
  proc = _convert(f"--data_dir={BUNDLED}", "--datasets=bbq", f"--output_dir={tmp_path / 'out'}",
                  "--templates=bbq=polite")
  assert proc.returncode == 2 and not (tmp_path / "out").exists()
  assert f"error: {templates.FLAG}: bbq=polite: unknown template 'polite'" in proc.stderr


def test_the_audit_passes_its_templates_to_the_converter(tmp_path, monkeypatch):
  seen = {}

  def convert_to(*args, templates, **kwargs):
    seen["templates"] = templates
    raise InterruptedError  # stop before scoring

  monkeypatch.setattr(convert, "convert_to", convert_to)
  config = audit.audit_config(str(tmp_path))
  assert config.templates == ""
  config.templates = "all"
  config.models = audit.models(audit.model_config("m", "smollm2"))
  with pytest.raises(InterruptedError):
    audit.run_audit(config)
  assert seen["templates"] == "all"


# -- metrics: the primary template, and the spread ---------------------------------------------


def test_metrics_use_the_default_template_and_count_no_row_twice():
  alone = evaluate.compute_metrics(*templated(("preference.default", [True] * 12)), OPTIONS)
  mixed = evaluate.compute_metrics(*templated(("preference.framed", [False] * 12),
                                           ("preference.default", [True] * 12)), OPTIONS)
  assert mixed["primary_templates"] == {"mine": "preference.default"}
  assert mixed["datasets"]["mine"]["accuracy"] == 1.0 and mixed["datasets"]["mine"]["n_items"] == 12
  assert {k: v for k, v in mixed.items() if k not in ("primary_templates", "coverage")} == {
      k: v for k, v in alone.items() if k != "coverage"}
  assert "primary_templates" not in alone


def test_without_a_default_the_first_template_in_the_table_is_primary():
  metrics = evaluate.compute_metrics(*templated(("preference.framed", [False] * 6),
                                             ("preference.other", [True] * 6)), OPTIONS)
  assert metrics["primary_templates"] == {"mine": "preference.framed"}
  assert metrics["datasets"]["mine"]["accuracy"] == 0.0


def test_the_metrics_command_reports_the_spread(tmp_path):
  items, pairs, scores = templated(("preference.default", [True] * 20),
                                ("preference.framed", [True, False] * 10))
  tables.write_rows(tmp_path / "conv" / "items.jsonl", items)
  tables.write_rows(tmp_path / "conv" / "pairs.jsonl", pairs)
  tables.write_rows(tmp_path / "scores" / "scores.jsonl", [
      {"item_id": i, "candidate": int(c), "reward": float(r)}
      for i, c, r in zip(scores.item_id, scores.candidate, scores.reward)])
  runner.evaluate_all(str(tmp_path / "conv"), [str(tmp_path / "scores")], str(tmp_path / "out"),
                      ["m"], OPTIONS)
  metrics = json.loads((tmp_path / "out" / "m" / "metrics.json").read_text())
  assert metrics["template_spread"]["datasets"]["mine"]["fragile_findings"] == ["accuracy"]
  assert "## Template sensitivity" in (tmp_path / "out" / "report.md").read_text()
