"""report.md's "Run manifest" section (analysis/outputs/provenance.py) from a run.json written by
hand: the table of what the scores came from, the invariance check in words, and the run.json
found beside a scores set (tests/scoring/test_run_manifest.py renders a real run's)."""

from socialrm_jax.analysis.outputs import provenance
from socialrm_jax.base import tables

HASH = "0123456789abcdef" * 4

MANIFEST = {
    "model": {"path": "/models/rm", "sha256": HASH, "files": ["config.json", "model.safetensors"],
              "hub": {"id": "org/rm", "commit": "c0ffee"}},
    "items": {"count": 7, "path": "converted/items.jsonl", "sha256": "ab" * 32},
    "tokenizer": {"sha256": "cd" * 32},
    "chat_template": {"format": "chatml", "sha256": "ef" * 32},
    "example": {"item_id": "bbq-1", "scored": {"bos": 1, "eos": 2}},
    "dtype": "bfloat16", "attention": "xla",
    "mesh": {"axes": {"data": 2, "model": 1}, "devices": 2, "device_kind": None,
             "platform": "cpu"},
    "versions": {"jax": "0.4.1", "flax": None},
    "warnings": ["doubled BOS"],
}


def test_invariance_in_words():
  assert provenance.invariance_sentence(None).startswith("not checked")
  assert provenance.invariance_sentence({"items": 4, "max_abs_diff": None}) == (
      "4 items re-scored, not compared")
  over = {"items": 8, "max_abs_diff": 2e-3, "compositions": ["a", "b", "c"], "tolerance": 1e-3,
          "dtype": "bfloat16"}
  assert provenance.invariance_sentence(over) == (
      "largest difference 2.00e-03 over 8 items re-scored in 3 other batch compositions "
      "(a, b, c); OVER the 0.001 bound of bfloat16")
  assert provenance.invariance_sentence({**over, "max_abs_diff": 1e-3}).endswith(
      "; within the 0.001 bound of bfloat16")
  assert provenance.invariance_sentence({**over, "tolerance": None}).endswith("(a, b, c)")


def test_one_models_table_by_hand():
  lines = provenance.report_lines({"manifest": MANIFEST}, "rm")
  assert lines[:2] == ["**rm**", ""]
  rows = lines[4:14]
  assert rows == [
      "| model | /models/rm `0123456789ab` (its 2 file(s), weights included) |",
      "| Hub | org/rm at commit c0ffee |",  # after the model row, for a model named by Hub id
      "| items | 7 from converted/items.jsonl `abababababab` |",
      "| tokenizer | `cdcdcdcdcdcd` |",
      "| chat template | chatml `efefefefefef` |",
      "| BOS / EOS in an example | 1 / 2 (item bbq-1, candidate 0) |",
      "| dtype, attention | bfloat16, xla |",
      "| mesh | data:2, model:1 on 2 cpu |",  # the platform where no device kind is known
      "| versions | jax 0.4.1 |",
      "| invariance | not checked (`--check_invariance=N` re-scores N items in other batch "
      "compositions) |"]
  assert lines[14:] == ["", "- warning: doubled BOS", ""]


def test_a_manifest_without_hashes_or_hub_shows_dashes():
  manifest = {**MANIFEST, "model": {"path": "rm", "sha256": None, "files": []},
              "items": {"count": 0, "path": None, "sha256": None}, "example": None,
              "warnings": []}
  text = "\n".join(provenance.report_lines({"manifest": manifest}, "rm"))
  assert "| model | rm – (its 0 file(s), weights included) |" in text
  assert "| items | 0 from – – |" in text
  assert "| BOS / EOS in an example | null / null (item –, candidate 0) |" in text
  assert "Hub" not in text and "warning" not in text


def test_the_section_reads_the_run_json_beside_each_scores_set(tmp_path):
  tables.atomic_write_json(tmp_path / "new" / "run.json", {"manifest": MANIFEST})
  tables.atomic_write_json(tmp_path / "old" / "run.json", {"model": "x"})
  (tmp_path / "damaged").mkdir()
  (tmp_path / "damaged" / "run.json").write_text("{not json")
  assert provenance.read_run(tmp_path / "damaged") is None
  assert provenance.read_run(tmp_path / "new" / "scores.parquet") == {"manifest": MANIFEST}
  lines = provenance.report_section({"new": tmp_path / "new" / "scores.parquet",
                                     "old": tmp_path / "old", "gone": tmp_path / "nowhere",
                                     "damaged": tmp_path / "damaged"})
  assert lines[0] == "## Run manifest"
  text = "\n".join(lines)
  assert "**new**" in text and "**old**: its run.json has no manifest" in text
  assert "gone" not in text and "damaged" not in text
  assert provenance.report_section({"gone": tmp_path / "nowhere"}) == []
