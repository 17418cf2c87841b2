"""SourceReader reads a source's lines as they are needed, with the errors of a whole-file read."""

import gzip
import json

import pytest

from socialrm_jax.base.errors import InputError
from socialrm_jax.base.templates import PromptTemplate
from socialrm_jax.sources.reading import SourceReader


def _reader(folder) -> SourceReader:
  return SourceReader("toy", folder, PromptTemplate("toy.default", 1, {"": "{x}"}))


def test_jsonl_rows_of_a_plain_and_a_gzip_file_with_a_bom_blank_lines_and_crlf(tmp_path):
  rows = [{"a": 1}, {"a": "é"}]
  text = "\ufeff" + json.dumps(rows[0]) + "\r\n\n" + json.dumps(rows[1], ensure_ascii=False)
  (tmp_path / "x.jsonl").write_bytes(text.encode())
  (tmp_path / "y.jsonl.gz").write_bytes(gzip.compress(text.encode()))
  for name in ("x.jsonl", "y.jsonl.gz"):
    reader = _reader(tmp_path)
    assert list(reader.jsonl_rows(tmp_path / name, "all")) == [(1, rows[0]), (3, rows[1])]
    assert reader.rows_read["all"] == 2


def test_csv_rows_keep_a_quoted_newline_within_its_field(tmp_path):
  (tmp_path / "x.csv").write_bytes(b'q,label\r\n"two\nlines",1\r\nthree,0\r\n')
  assert list(_reader(tmp_path).csv_rows(tmp_path / "x.csv", "all")) == [
      (1, {"q": "two\nlines", "label": "1"}), (2, {"q": "three", "label": "0"})]


@pytest.mark.parametrize("content, message", [
    (b'{"a": 1}\n{"a": "\xff"}\n', r"x\.jsonl, row 2: not UTF-8 text \(byte 7 of the line\)"),
    (b"\n  \n", r"x\.jsonl: empty file"),
])
def test_a_file_that_is_not_utf8_or_has_no_text_is_one_error_naming_it(tmp_path, content,
                                                                        message):
  (tmp_path / "x.jsonl").write_bytes(content)
  with pytest.raises(InputError, match=message):
    list(_reader(tmp_path).jsonl_rows(tmp_path / "x.jsonl", "all"))


def test_a_broken_gzip_file_is_one_error_naming_it(tmp_path):
  whole = gzip.compress(b'{"a": 1}\n' * 100)
  (tmp_path / "x.jsonl.gz").write_bytes(whole[:len(whole) // 2])
  with pytest.raises(InputError, match=r"x\.jsonl\.gz: not a readable gzip file"):
    list(_reader(tmp_path).jsonl_rows(tmp_path / "x.jsonl.gz", "all"))
