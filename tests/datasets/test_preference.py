"""The generic preference source (`preference:PATH`): every layout and file kind gives the same
items; malformed rows name the file and the row (or are counted when skipping) and nothing is
written; an exported pairs folder read back as a source gives the same pairs."""

import gzip
import json
import pathlib
import subprocess
import sys

import datasets
import pytest

from socialrm_jax.base import records, tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.orchestrators import convert as convert_lib
from socialrm_jax.sources import hf_reading
from tests.helpers import preference_fixtures as pf

LAYOUTS = ("strings", "conversational", "implicit_conversational", "hh_transcripts")


def convert(spec: str, **kw) -> convert_lib.Conversion:
  return convert_lib.convert_all(None, spec, **kw)


def essentials(items):
  """What a layout must not change: prompt, candidates, subset, domain, label."""
  return [(it["prompt"], it["candidates"], it["subset"], it["domain"],
           it["attributes"].get("label")) for it in items]


def expected(layout):
  rows = [p for p in pf.PAIRS if layout != "strings" or len(p[0]) == 1]
  return [([{"role": r, "content": t} for r, t in turns], [chosen, rejected], subset,
           domain or "general", label) for turns, chosen, rejected, subset, label, domain in rows]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("writer", ["jsonl", "parquet", "saved"])
def test_every_layout_and_file_kind_gives_the_same_items(tmp_path, layout, writer):
  rows = pf.rows(layout)
  path = {"jsonl": lambda: pf.write_jsonl(tmp_path / "mine.jsonl", rows),
          "parquet": lambda: pf.write_parquet(tmp_path / "mine.parquet", rows),
          "saved": lambda: pf.write_saved(tmp_path / "mine", rows)}[writer]()
  result = convert(f"preference:{path}")
  assert essentials(result.items) == expected(layout)
  report = result.report["datasets"]["mine"]
  assert [t["layout"] for t in report["tables"]] == [layout]
  assert report["rows_read"] == len(rows) and report["items"] == len(rows)
  item = result.items[0]
  assert item["item_id"] == "mine/1" and item["dataset"] == "mine" and item["split"] == "all"
  assert item["roles"] == [records.CHOSEN, records.REJECTED] and item["desirability"] == [1, -1]
  assert [(p["chosen"], p["rejected"], p["label_source"]) for p in result.pairs] == [
      (c, r, "gold") for _, (c, r), *_ in expected(layout)]


def test_csv_json_and_a_saved_dataset_dict_with_columns_mapped(tmp_path):
  rows = [{"question": "q1", "good": "multi\nline", "bad": "b1"}, {"question": "q2", "good": "g",
                                                                    "bad": "b2"}]
  (tmp_path / "x.csv").write_text('question,good,bad\nq1,"multi\nline",b1\n\nq2,g,b2\n')
  (tmp_path / "x.json").write_text(json.dumps(rows))
  datasets.DatasetDict({"test": datasets.Dataset.from_list(rows),
                        "train": datasets.Dataset.from_list(rows[:1])}).save_to_disk(
                            str(tmp_path / "saved"))
  columns = {"columns": "prompt=question,chosen=good,rejected=bad"}
  for source in ("x.csv", "x.json"):
    result = convert(f"preference:{tmp_path / source}", path_options=columns)
    assert [it["candidates"] for it in result.items] == [["multi\nline", "b1"], ["g", "b2"]]
    assert [it["attributes"]["row"] for it in result.items] == [1, 2]  # CSV: blank line uncounted
  saved = convert(f"preference:{tmp_path / 'saved'}:name=dd", path_options=columns)
  assert [(it["item_id"], it["split"], it["subset"]) for it in saved.items] == [
      ("dd/test/1", "test", "test"), ("dd/test/2", "test", "test"),
      ("dd/train/1", "train", "train")]


def test_csv_and_json_lines_saved_with_a_bom_read_as_without(tmp_path):
  """A byte-order mark (Excel's UTF-8 CSV) is no part of the first column's name or row."""
  columns = {"columns": "prompt=question,chosen=good,rejected=bad"}
  for name, text in (("x.csv", 'question,good,bad\nq1,g1,b1\nq2,"g\n2",b2\n'),
                     ("x.jsonl", '{"question": "q1", "good": "g1", "bad": "b1"}\n')):
    (tmp_path / "plain").mkdir(exist_ok=True)
    (tmp_path / "bom").mkdir(exist_ok=True)
    (tmp_path / "plain" / name).write_text(text, encoding="utf-8")
    (tmp_path / "bom" / name).write_text(text, encoding="utf-8-sig")
    plain = convert(f"preference:{tmp_path / 'plain' / name}", path_options=columns)
    bom = convert(f"preference:{tmp_path / 'bom' / name}", path_options=columns)
    assert bom.items == plain.items and bom.pairs == plain.pairs and plain.items


def test_a_row_whose_chosen_equals_its_rejected_is_dropped_and_counted(tmp_path):
  """Identical responses carry no preference: the row is left out and counted with its reason,
  the rows around it converted."""
  path = tmp_path / "p.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in (
      {"prompt": "q1", "chosen": "same", "rejected": "same"},
      {"prompt": "q2", "chosen": "good", "rejected": "bad"})))
  converted = convert(f"preference:{path}")
  assert [it["prompt"][-1]["content"] for it in converted.items] == ["q2"]
  assert len(converted.pairs) == 1
  totals = converted.report["totals"]
  assert totals["rows_read"] == 2 and totals["drops"] == {convert_lib.IDENTICAL_CANDIDATES: 1}


def test_json_lines_rows_are_numbered_by_line(tmp_path):
  rows = pf.rows("strings")
  path = tmp_path / "gaps.jsonl"
  path.write_text(json.dumps(rows[0]) + "\n\n\n" + json.dumps(rows[1]) + "\n")
  assert [it["attributes"]["row"] for it in convert(f"preference:{path}").items] == [1, 4]


def test_a_gzipped_file_reads_as_the_file_itself_its_rows_named_in_it(tmp_path):
  """HH-RLHF ships `train.jsonl.gz`: read as the JSON-lines file inside, rows numbered by its
  lines, a broken row named in the `.gz` file; bytes that are not gzip are one line."""
  rows = pf.rows("hh_transcripts")
  plain = pf.write_jsonl(tmp_path / "plain" / "train.jsonl", rows)
  lines = plain.read_bytes().splitlines(keepends=True)
  zipped = tmp_path / "train.jsonl.gz"
  zipped.write_bytes(gzip.compress(lines[0] + b"\n" + b"".join(lines[1:])))  # a blank line 2
  got, want = convert(f"preference:{zipped}"), convert(f"preference:{plain}")
  assert essentials(got.items) == essentials(want.items)
  assert [t["layout"] for t in got.report["datasets"]["train"]["tables"]] == ["hh_transcripts"]
  assert [it["attributes"]["row"] for it in got.items][:2] == [1, 3]
  zipped.write_bytes(gzip.compress(lines[0] + lines[1][:-5] + b"\n"))
  with pytest.raises(InputError, match=rf"^{zipped}, row 2: broken JSON line"):
    convert(f"preference:{zipped}")
  zipped.write_bytes(b"not gzip at all")
  with pytest.raises(InputError, match=rf"^{zipped}: not a readable gzip file"):
    convert(f"preference:{zipped}")
  (tmp_path / "x.txt.gz").write_bytes(gzip.compress(b"a"))
  with pytest.raises(InputError, match=r"cannot read a .txt.gz file; give a .jsonl, .json, .csv, "
                     r".parquet file \(or one gzipped: .gz\)"):
    convert(f"preference:{tmp_path / 'x.txt.gz'}")


def test_options_domain_and_a_prompt_column_declared_absent(tmp_path):
  path = pf.write_jsonl(tmp_path / "hh.jsonl", [{**r, "prompt": "unused"}
                                                 for r in pf.rows("hh_transcripts")])
  result = convert(f"preference:{path}:domain=morality",
                   path_options={"columns": "prompt=,domain="})
  assert {it["domain"] for it in result.items} == {"morality"}
  assert essentials(result.items)[1][0] == expected("hh_transcripts")[1][0]
  with pytest.raises(InputError, match="domain='fairness' is not one of"):
    convert(f"preference:{path}:domain=fairness")
  with pytest.raises(InputError, match="no column answer_a .for chosen.; found"):
    convert(f"preference:{path}", path_options={"columns": "chosen=answer_a"})


# -- malformed input -------------------------------------------------------------------------

def _truncated_parquet(tmp_path):
  whole = pf.write_parquet(tmp_path / "whole.parquet", pf.rows("strings")).read_bytes()
  (tmp_path / "cut.parquet").write_bytes(whole[:len(whole) // 2])
  return tmp_path / "cut.parquet"


def _missing_column(tmp_path):
  return pf.write_jsonl(tmp_path / "nocol.jsonl", [
      {k: v for k, v in r.items() if k != "rejected"} for r in pf.rows("strings")])


def _empty_response(tmp_path):
  rows = pf.rows("conversational")
  rows[2]["rejected"] = [{"role": "assistant", "content": "  "}]
  return pf.write_jsonl(tmp_path / "empty.jsonl", rows)


def _not_utf8(tmp_path):
  lines = [json.dumps(r).encode() for r in pf.rows("strings")]
  lines[1] = lines[1].replace(b'"chosen": "', b'"chosen": "\xff')
  (tmp_path / "bytes.jsonl").write_bytes(b"\n".join(lines) + b"\n")
  return tmp_path / "bytes.jsonl"


def _broken_line(tmp_path):
  lines = [json.dumps(r) for r in pf.rows("strings")]
  lines[3] = lines[3][:-5]
  (tmp_path / "broken.jsonl").write_text("\n".join(lines) + "\n")
  return tmp_path / "broken.jsonl"


def _csv_record(tmp_path):
  (tmp_path / "extra.csv").write_bytes(b"prompt,chosen,rejected\nq1,a,b\nq2,a,b,c\nq3,\xff,b\n"
                                       b"q4,a,d\n")
  return tmp_path / "extra.csv"


# (make the file, the error, how many rows a skipping run drops; None: the file is unreadable)
MALFORMED = {
    "missing column": (_missing_column, "nocol.jsonl: missing column(s) rejected; found prompt, "
                       "chosen, subset, label, domain (map yours with --columns=rejected=NAME)",
                       None),
    "empty response": (_empty_response, "empty.jsonl, row 3: empty rejected response", 1),
    "non-UTF-8 line": (_not_utf8, "bytes.jsonl, row 2: a value is not UTF-8 text", 1),
    "broken JSON line": (_broken_line, "broken.jsonl, row 4: broken JSON line", 1),
    "CSV records": (_csv_record, "extra.csv, row 2: expected 3 fields (prompt,chosen,rejected), "
                    "got 4", 2),
    "truncated parquet": (_truncated_parquet, "cut.parquet: cannot be read as parquet "
                          "(ArrowInvalid: Parquet magic bytes not found", None),
}


def _cli(path, out, *args):
  return subprocess.run([sys.executable, "-m", "socialrm_jax.main.convert",
                         f"--datasets=preference:{path}", f"--output_dir={out}", *args],
                        capture_output=True, text=True)


@pytest.mark.slow  # a subprocess; more than a few seconds
@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_input_is_one_error_line_naming_file_and_row_and_nothing_is_written(
    tmp_path, case):
  make, message, _ = MALFORMED[case]
  path = make(tmp_path)
  proc = _cli(path, tmp_path / "out")
  assert proc.returncode == 2
  assert proc.stderr.startswith(f"socialrm-convert: error: {path.parent}/")
  assert message in proc.stderr
  assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
  assert not (tmp_path / "out").exists()
  assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staged folder left


@pytest.mark.parametrize("case", MALFORMED)
def test_skipping_counts_and_lists_malformed_rows(tmp_path, case):
  make, message, dropped = MALFORMED[case]
  path = make(tmp_path)
  if dropped is None:  # a file that cannot be read at all stops the run either way
    with pytest.raises(InputError) as error:
      convert(f"preference:{path}", on_error="skip")
    assert message in str(error.value)
    return
  result = convert(f"preference:{path}", on_error="skip")
  report = result.report["datasets"][path.stem]
  assert report["drops"] == {"malformed_row": dropped}
  assert report["items"] == report["rows_read"] - dropped == len(result.items) > 0
  assert any(message in e for e in report["skipped_row_errors"])


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_skipping_from_the_command_writes_the_readable_rows(tmp_path):
  out = tmp_path / "out"
  proc = _cli(_not_utf8(tmp_path), out, "--on_error=skip", "--format=jsonl")
  assert proc.returncode == 0, proc.stderr
  report = json.loads((out / "conversion_report.json").read_text())
  assert report["totals"]["drops"] == {"malformed_row": 1}
  assert len(tables.read_rows(out, "items")) == len(pf.rows("strings")) - 1


# -- export round trip -------------------------------------------------------------------------

def test_exported_pairs_read_back_as_a_source_give_the_same_pairs(tmp_path):
  source = pf.write_jsonl(tmp_path / "mine.jsonl", pf.rows("conversational"))
  first = convert(f"preference:{source}")
  convert_lib.write(first, tmp_path / "hf", "hf")
  saved = datasets.load_from_disk(str(tmp_path / "hf" / "pairs"))
  again = convert(f"preference:{tmp_path / 'hf' / 'pairs'}:name=mine")
  assert [t["layout"] for t in again.report["datasets"]["mine"]["tables"]] == ["conversational"]
  fields = ("prompt", "chosen", "rejected", "subset", "domain", "label_source")
  assert [[p[f] for f in fields] for p in again.pairs] == [[p[f] for f in fields]
                                                           for p in first.pairs]
  assert [p["chosen"] for p in first.pairs] == [c[0]["content"] for c in saved["chosen"]]
  assert tables.read_rows(tmp_path / "hf", "pairs") == first.pairs


def test_rows_are_read_and_written_in_batches(tmp_path, monkeypatch):
  """The converter never asks the source for more than a batch of rows, and writes each batch
  as it comes (so a large file is never held whole)."""
  monkeypatch.setattr(hf_reading, "BATCH_ROWS", 2)
  monkeypatch.setattr(tables, "BATCH_ROWS", 2)
  read, written = [], []
  getitem, flush = datasets.Dataset.__getitem__, tables.TableWriter._flush

  def spy_getitem(self, key):
    read.append(key.stop - key.start if isinstance(key, slice) else 1)
    return getitem(self, key)

  def spy_flush(self):
    written.append((self.path.name, len(self._buffer)))
    flush(self)
  monkeypatch.setattr(datasets.Dataset, "__getitem__", spy_getitem)
  monkeypatch.setattr(tables.TableWriter, "_flush", spy_flush)
  path = pf.write_jsonl(tmp_path / "mine.jsonl", pf.rows("conversational"))
  convert_lib.convert_to(tmp_path / "out", None, f"preference:{path}", "jsonl")
  assert read == [2, 2, 2]
  assert [n for name, n in written if name == "items.jsonl"] == [2, 2, 2]
  assert len(tables.read_rows(tmp_path / "out", "items")) == len(pf.PAIRS)
