"""The convert command: outputs, reproducibility, and bad input that leaves nothing behind."""

import json
import pathlib
import subprocess
import sys

import pytest

from socialrm_jax.base import tables
from tests.helpers.paths import REPO_ROOT

BUNDLED = REPO_ROOT / "socialrm_jax" / "bundled"


def _convert(*args):
  return subprocess.run([sys.executable, "-m", "socialrm_jax.main.convert", *args],
                        capture_output=True, text=True)


def _tree(folder: pathlib.Path) -> dict[str, bytes]:
  return {p.relative_to(folder).as_posix(): p.read_bytes()
          for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow  # a subprocess; more than a few seconds
@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "hf"])
def test_bundled_suite_converts_identically_twice(tmp_path, fmt):
  outputs = []
  for run in ("a", "b"):
    out = tmp_path / run
    proc = _convert(f"--data_dir={BUNDLED}", "--datasets=all", f"--output_dir={out}",
                    f"--format={fmt}")
    assert proc.returncode == 0, proc.stderr
    outputs.append(out)
  assert _tree(outputs[0]) == _tree(outputs[1])
  report = json.loads((outputs[0] / "conversion_report.json").read_text())
  assert set(report["datasets"]) == {"bbq", "crows_pairs", "stereoset", "hh_rlhf", "xstest",
                                     "ethics", "moral_stories"}
  items = tables.read_rows(outputs[0], "items")
  pairs = tables.read_rows(outputs[0], "pairs")
  assert len(items) == report["totals"]["items"]
  assert len(pairs) == sum(report["totals"]["pairs"].values())
  assert isinstance(items[0]["attributes"], dict)
  assert sorted(p["pair_id"] for p in pairs) == sorted(set(p["pair_id"] for p in pairs))


def _broken_bbq(tmp_path):
  folder = tmp_path / "data" / "bbq"
  folder.mkdir(parents=True)
  (folder / "Age.jsonl").write_text('{"example_id": 0}\n')
  return tmp_path / "data"


@pytest.mark.parametrize("args, message", [
    (["--datasets=bbq,nope"], "unknown dataset 'nope'; known: bbq, crows_pairs"),
    (["--datasets=crows_pairs"], "no folder for dataset 'crows_pairs'"),
    (["--datasets=bbq"], "Age.jsonl, row 1: missing field 'question_polarity'"),
])
def test_bad_input_exits_nonzero_and_writes_nothing(tmp_path, args, message):
  out = tmp_path / "out"
  proc = _convert(f"--data_dir={_broken_bbq(tmp_path)}", f"--output_dir={out}", *args)
  assert proc.returncode == 2
  assert message in proc.stderr
  assert len(proc.stderr.strip().splitlines()) == 1
  assert not out.exists()


def test_skip_mode_writes_and_counts(tmp_path):
  # The broken row, then a good one: the good one is converted, the broken one counted. (A
  # skip that keeps no row is an error: tests/end_to_end/test_bad_inputs.py.)
  out = tmp_path / "out"
  data = _broken_bbq(tmp_path)
  good = (BUNDLED / "bbq" / "data" / "Age.jsonl").read_text().splitlines()[0]
  with open(data / "bbq" / "Age.jsonl", "a") as f:
    f.write(good + "\n")
  proc = _convert(f"--data_dir={data}", f"--output_dir={out}", "--datasets=bbq",
                  "--on_error=skip", "--format=jsonl")
  assert proc.returncode == 0, proc.stderr
  report = json.loads((out / "conversion_report.json").read_text())
  assert report["datasets"]["bbq"]["drops"] == {"malformed_row": 1}
  assert len((out / "items.jsonl").read_text().splitlines()) == report["totals"]["items"] == 1
  assert sorted(p.name for p in out.iterdir()) == [
      "conversion_report.json", "items.jsonl", "pairs.jsonl"]


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_a_failed_conversion_leaves_the_earlier_output_as_it_was(tmp_path):
  out = tmp_path / "out"
  data = _broken_bbq(tmp_path)
  (data / "bbq" / "Age.jsonl").write_text((BUNDLED / "bbq" / "data" / "Age.jsonl").read_text())
  assert _convert(f"--data_dir={data}", f"--output_dir={out}", "--datasets=bbq").returncode == 0
  before = _tree(out)
  with open(data / "bbq" / "Age.jsonl", "a") as f:
    f.write('{"example_id": 99}\n')
  proc = _convert(f"--data_dir={data}", f"--output_dir={out}", "--datasets=bbq", "--format=hf")
  assert proc.returncode == 2 and "Age.jsonl, row 21: missing field" in proc.stderr
  assert _tree(out) == before
  assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]  # no staged folder left


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_a_new_format_replaces_the_old_tables(tmp_path):
  out = tmp_path / "out"
  for fmt, expected in (("hf", ["conversion_report.json", "items", "pairs"]),
                        ("jsonl", ["conversion_report.json", "items.jsonl", "pairs.jsonl"])):
    proc = _convert(f"--data_dir={BUNDLED}", "--datasets=crows_pairs", f"--output_dir={out}",
                    f"--format={fmt}")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == expected


def imported_modules(importtime_log: str) -> set[str]:
  """The modules a `python -X importtime` run imported, from its stderr lines
  `import time: self | cumulative | <indent>module`."""
  return {line.rsplit("|", 1)[1].strip() for line in importtime_log.splitlines()
          if line.startswith("import time:") and line.count("|") == 2} - {"imported package"}


def test_converting_bbq_imports_no_matplotlib_and_no_analysis(tmp_path):
  """Input sits below scoring and analysis: reading BBQ draws nothing and selects no backend."""
  proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "socialrm_jax.main.convert",
                         f"--data_dir={BUNDLED}", "--datasets=bbq",
                         f"--output_dir={tmp_path / 'out'}", "--format=jsonl"],
                        capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert json.loads(proc.stdout)["items"] > 0
  modules = imported_modules(proc.stderr)
  # The log was read. (It names what `import` statements load, not what `importlib.import_module`
  # does, as the registry's lookup by name; what those modules import is named again.)
  assert {"socialrm_jax.datasets.registry", "socialrm_jax.sources.reading"} <= modules
  assert not {m for m in modules if m.split(".")[0] == "matplotlib"}
  assert not {m for m in modules if m.startswith(("socialrm_jax.analysis", "socialrm_jax.scoring",
                                                  "socialrm_jax.models"))}
