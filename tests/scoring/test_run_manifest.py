"""run.json's manifest: the hashes, the rendered example and its BOS count, the run's settings, and
a doubled BOS flagged; its report.md section."""

import hashlib
import json
import logging
import shutil
import subprocess
import sys

import jax
import pytest
import tokenizers
from tokenizers import processors

from socialrm_jax.analysis.outputs import provenance
from socialrm_jax.base import tables
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.models.tokenizer import load_tokenizer
from socialrm_jax.runtime import mesh as mesh_lib
from socialrm_jax.runtime import provenance as run_provenance
from socialrm_jax.scoring import engine, item_tokens, run_manifest, shards
from tests.helpers import scoring_fixtures as fx

OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=1024, chunk_size=4)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
  """A tiny Llama reward model's run over the fixture items: (folder, its run.json, the model)."""
  tmp = tmp_path_factory.mktemp("manifest")
  fx.make_llama(tmp / "rm")
  items = fx.all_items()
  tables.write_rows(tmp / "items" / "items.jsonl", items)
  engine.score_items(load_reward_model(tmp / "rm"), items, tmp / "scores", options=OPTIONS,
                     model_path=str(tmp / "rm"), items_path=tmp / "items")
  return tmp, json.loads((tmp / "scores" / "run.json").read_text())


def test_the_manifest_records_what_the_scores_came_from(scored):
  tmp, run = scored
  manifest = run["manifest"]
  folder = json.loads((tmp / "scores" / shards.MANIFEST).read_text())
  # The output folder's hashes, not computed twice: the model's files (weights included), the items.
  assert manifest["model"]["sha256"] == folder["model"]["sha256"]
  assert manifest["model"]["path"] == str((tmp / "rm").resolve())
  weights = tmp / "rm" / "model.safetensors"
  assert {"name": "model.safetensors", "bytes": weights.stat().st_size,
          "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()} in manifest["model"]["files"]
  # Every file's own digest, as the HF Hub lists it for LFS files and sha256sum prints it.
  sha256sum = subprocess.run(["sha256sum", *sorted(p.name for p in (tmp / "rm").iterdir())],
                             cwd=tmp / "rm", capture_output=True, text=True, check=True).stdout
  assert {f["name"]: f["sha256"] for f in manifest["model"]["files"]} == {
      name: digest for digest, name in (line.split() for line in sha256sum.splitlines())}
  assert manifest["items"] == {"path": str(tmp / "items"), **folder["items"]}
  assert manifest["settings"] == folder["settings"]
  tokenizer = load_tokenizer(tmp / "rm")
  assert manifest["tokenizer"]["sha256"] == run_manifest.tokenizer_identity(tokenizer)["sha256"]
  assert manifest["chat_template"]["sha256"] == hashlib.sha256(
      fx.CHAT_TEMPLATE.encode()).hexdigest()
  # The example is the first item's first candidate as scored: one BOS, no warning.
  item = fx.all_items()[0]
  example = manifest["example"]
  assert example["text"] == tokenizer.apply_chat_template(
      item["prompt"] + [{"role": "assistant", "content": item["candidates"][0]}], tokenize=False)
  sequences, _ = fx.reference_sequences(tokenizer, item)
  assert example["ids"] == sequences[0] and example["ids"][0] == tokenizer.bos_token_id
  assert example["scored"] == {"bos": 1, "eos": 0, "leading_bos": 1}
  assert example["with_special_tokens"]["leading_bos"] == 1
  assert manifest["warnings"] == []
  assert manifest["dtype"] == "float32" and manifest["attention"] == "xla"
  assert manifest["mesh"] == {"axes": {"data": 1, "model": 1}, "devices": 1, "platform": "cpu",
                              "device_kind": jax.devices()[0].device_kind}
  assert manifest["options"]["max_length"] == 256 and manifest["options"]["chunk_size"] == 4
  assert manifest["versions"]["jax"] == jax.__version__
  assert manifest["versions"]["tokenizers"] == tokenizers.__version__
  assert all(manifest["versions"][name] for name in run_provenance.PACKAGES)
  assert manifest["command_line"] == sys.argv


def _tokenizer_folder(tmp_path, base, template_start: str, post_processor_adds_bos: bool):
  folder = tmp_path / "tok"
  shutil.copytree(base, folder)
  (folder / "chat_template.jinja").write_text(
      fx.CHAT_TEMPLATE.replace("{{ bos_token }}", template_start, 1))
  if post_processor_adds_bos:  # As Llama's and Gemma's tokenizers do.
    backend = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    bos = backend.token_to_id("<s>")
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    backend.save(str(folder / "tokenizer.json"))
  return folder


@pytest.fixture(scope="module")
def trained_tokenizer(tmp_path_factory):
  folder = tmp_path_factory.mktemp("tokenizer")
  fx.train_chat_tokenizer(folder)
  return folder


@pytest.mark.parametrize("template_start, post_processor_adds_bos, scored_bos, added_bos, warning", [
    ("{{ bos_token }}", False, 1, 1, None),
    ("{{ bos_token }}", True, 1, 2, "doubled BOS with special tokens"),  # reward-bench #164
    ("{{ bos_token }}{{ bos_token }}", False, 2, 2, "doubled BOS: the scored sequences begin"),
    ("", True, 0, 1, None),  # The post-processor's BOS alone is no double.
])
def test_a_doubled_bos_is_flagged(tmp_path, trained_tokenizer, caplog, template_start,
                                  post_processor_adds_bos, scored_bos, added_bos, warning):
  folder = _tokenizer_folder(tmp_path, trained_tokenizer, template_start, post_processor_adds_bos)
  templater = item_tokens.Templater(load_tokenizer(folder), is_causal=True, max_length=256)
  items = fx.all_items()
  identity = {"model": shards.model_identity(folder), "items": shards.items_identity(items),
              "settings": {"proxy": "none"}}
  with caplog.at_level(logging.WARNING):
    manifest = run_manifest.build(identity, items_path=None, templater=templater,
                                  example_item=items[0], dtype="float32",
                                  mesh=mesh_lib.make_mesh(), attention="xla", options=OPTIONS)
  example = manifest["example"]
  assert example["scored"]["leading_bos"] == example["scored"]["bos"] == scored_bos
  assert example["with_special_tokens"]["leading_bos"] == added_bos
  if warning is None:
    assert manifest["warnings"] == []
    assert not [r for r in caplog.records if "BOS" in r.getMessage()]
  else:
    assert len(manifest["warnings"]) == 1 and manifest["warnings"][0].startswith(warning)
    assert any(warning in r.getMessage() for r in caplog.records)


def test_the_report_section_shortens_hashes_and_states_warnings_and_invariance(scored, tmp_path):
  tmp, run = scored
  lines = provenance.report_section({"tiny-rm": tmp / "scores"})
  text = "\n".join(lines)
  assert lines[0] == "## Run manifest" and "**tiny-rm**" in text
  model_hash = run["manifest"]["model"]["sha256"]
  assert f"`{model_hash[:provenance.SHORT_HASH]}`" in text and model_hash not in text
  assert "not checked" in text and "warning" not in text
  assert "| BOS / EOS in an example | 1 / 0 (item bbq-0000, candidate 0) |" in text
  # A checked run with a warning; and a run.json written before manifests existed.
  checked = {**run, "invariance": {"items": 8, "max_abs_diff": 3e-7, "dtype": "float32",
                                   "tolerance": 1e-5, "compositions": ["a", "b"]}}
  checked["manifest"] = {**run["manifest"], "warnings": ["doubled BOS: ..."]}
  tables.atomic_write_json(tmp_path / "checked" / "run.json", checked)
  tables.atomic_write_json(tmp_path / "old" / "run.json", {"model": "x"})
  text = "\n".join(provenance.report_section({"checked": tmp_path / "checked",
                                                "old": tmp_path / "old",
                                                "no run file": tmp_path / "nowhere"}))
  assert ("largest difference 3.00e-07 over 8 items re-scored in 2 other batch compositions "
          "(a, b); within the 1e-05 bound of float32") in text
  assert "- warning: doubled BOS: ..." in text
  assert "**old**: its run.json has no manifest" in text and "no run file" not in text
  assert provenance.report_section({"none": tmp_path / "nowhere"}) == []
