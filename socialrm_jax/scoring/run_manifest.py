"""run.json's `manifest`: what a scoring run's numbers can be traced back to.

- `model`: the checkpoint's path and the hash of its files (every file's name, size and bytes,
  sampled above 1 GiB: `shards.model_identity`, the same hash the output folder's manifest.json
  holds), `hub`: the Hub id and the 40-hex commit of a model named by Hub id (null for a local
  path), and its files' names, sizes and sha256 digests (each file read whole, in a thread
  beside the run: the digest the HF Hub lists for each LFS file, which `sha256sum` prints).
- `items`: where they came from, how many, and the hash of their ids, prompts and candidates
  (`shards.items_identity`, as in manifest.json).
- `tokenizer`: a hash of the tokenizer as loaded (tokenizer.json's contents and the special tokens
  the chat template sees), and `chat_template`: the template's hash (null: the plain format).
- `example`: the first item's prompt with its first candidate, rendered and tokenized as it is
  scored, and its BOS/EOS counts: as scored (the rendered text tokenized with
  `add_special_tokens=False`, item_tokens.py) and as the tokenizer's post-processor would make it
  (`add_special_tokens=True`, what a transformers tokenizer call does by default).
- `warnings`: a doubled BOS. Either the scored sequence itself starts with two BOS (the template
  writes it twice), or the template writes BOS and the post-processor adds another: this run does
  not tokenize that way, but a tool that does (RewardBench before allenai/reward-bench#164) scores
  the model on a sequence it never saw in training, so its numbers differ from these.
- the run's dtype, mesh (as resolved: axes, devices and their kind), attention implementation, the
  settings that change a score (as in manifest.json), every scoring option, package versions and
  the command line (`runtime/provenance.py`: the versions and the file digests, which training's
  manifest records too).

`analysis/outputs/provenance.py` turns it into report.md's "Run manifest" section.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import pathlib
import sys
from typing import Any, Mapping, Sequence

from absl import logging

from socialrm_jax.models import hub
from socialrm_jax.runtime import provenance
from socialrm_jax.scoring import item_tokens

def _sha256(text: str) -> str:
  return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tokenizer_identity(tokenizer) -> dict:
  """A hash of what turns text into ids: the tokenizers model as loaded (its vocabulary, merges,
  normalizer, pre- and post-processor, added tokens) and the named special tokens."""
  backend = tokenizer.backend_tokenizer
  special = json.dumps(tokenizer.special_tokens_map, sort_keys=True, ensure_ascii=False)
  return {"source": tokenizer.source,
          "sha256": _sha256(backend.to_str() + "\0" + special),
          "vocab_size": backend.get_vocab_size(with_added_tokens=True),
          "bos_token": tokenizer.bos_token, "eos_token": tokenizer.eos_token}


def chat_template_identity(tokenizer) -> dict:
  template = tokenizer.chat_template
  return {"sha256": _sha256(template) if template else None,
          "format": "chat template" if template else "plain (no chat template)"}


def special_token_counts(ids: Sequence[int], bos_id: int | None,
                         eos_id: int | None) -> dict[str, int | None]:
  """How many BOS and EOS ids a sequence holds, and how many BOS open it (None: the tokenizer has
  no such token)."""
  ids = [int(i) for i in ids]
  leading = 0
  while bos_id is not None and leading < len(ids) and ids[leading] == bos_id:
    leading += 1
  return {"bos": None if bos_id is None else ids.count(bos_id),
          "eos": None if eos_id is None else ids.count(eos_id),
          "leading_bos": None if bos_id is None else leading}


def rendered_example(templater: item_tokens.Templater, item: Mapping[str, Any]) -> dict:
  """`item`'s prompt with its first candidate as the model is given it (untruncated): the text,
  the token ids and their BOS/EOS counts, scored and with the post-processor's special tokens."""
  tokenizer = templater.tokenizer
  first = {**item, "candidates": list(item["candidates"])[:1]}
  # Untruncated: the example shows the template and the special tokens, whatever --max_length.
  whole = item_tokens.Templater(tokenizer, is_causal=templater.is_causal, max_length=sys.maxsize,
                                appended_ids=templater.appended_ids)
  ids = whole.encode(0, first).sequences[0]
  bos_id, eos_id = tokenizer.bos_token_id, tokenizer.eos_token_id
  example = {"item_id": str(item["item_id"]), "candidate": 0}
  if templater.is_causal:
    text = templater.render(list(item["prompt"]) + [
        {"role": "assistant", "content": first["candidates"][0]}], add_generation_prompt=False)
    with_special = tokenizer(text, add_special_tokens=True)["input_ids"]
    example.update(text=text, ids=[int(i) for i in ids],
                   scored=special_token_counts(ids, bos_id, eos_id),
                   with_special_tokens=special_token_counts(with_special, bos_id, eos_id))
  else:  # Encoders are scored through the post-processor already ([CLS] q [SEP] a [SEP]).
    example.update(text=tokenizer.decode(ids), ids=[int(i) for i in ids],
                   scored=special_token_counts(ids, bos_id, eos_id), with_special_tokens=None)
  return example


def bos_warnings(example: Mapping[str, Any], bos_token: str | None) -> list[str]:
  """A doubled BOS in the example, as scored or as a default tokenizer call makes it."""
  scored = example["scored"]["leading_bos"] or 0
  if scored >= 2:
    return [f"doubled BOS: the scored sequences begin with {scored} BOS tokens ({bos_token!r}); "
            "the chat template writes BOS more than once, and the model was not trained on "
            "that. Fix the template or use another tokenizer."]
  added = (example.get("with_special_tokens") or {}).get("leading_bos") or 0
  if scored == 1 and added >= 2:
    return [f"doubled BOS with special tokens: the chat template writes BOS ({bos_token!r}) and "
            "the tokenizer's post-processor adds another, so tokenizing the rendered "
            "conversation with special tokens (a transformers tokenizer call's default) gives "
            f"{added} (allenai/reward-bench#164). This run tokenizes with "
            "add_special_tokens=False and its scores see one BOS; a tool that does not differs."]
  return []


def mesh_facts(mesh) -> dict:
  """The mesh as resolved: axis sizes, device count, platform and device kind."""
  device = mesh.devices.flat[0]
  return {"axes": {str(k): int(v) for k, v in mesh.shape.items()},
          "devices": int(mesh.devices.size), "platform": device.platform,
          "device_kind": getattr(device, "device_kind", None)}


def _model_files(path: str) -> list[dict]:
  """The model's files (names and sizes) the identity hash covers, weights among them."""
  root = pathlib.Path(path)
  files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
  return [{"name": p.name if p == root else str(p.relative_to(root)), "bytes": p.stat().st_size}
          for p in files]


def add_file_digests(manifest: dict, digests: concurrent.futures.Future) -> None:
  """Puts each model file's sha256 (`provenance.start_file_digests`) beside its name and size."""
  found = digests.result()
  for entry in manifest["model"]["files"]:
    entry["sha256"] = found.get(entry["name"])


def build(identity: Mapping[str, Any], *, items_path: str | os.PathLike | None,
          templater: item_tokens.Templater, example_item: Mapping[str, Any] | None, dtype: str,
          mesh, attention: str, options) -> dict:
  """The manifest of a run; `identity` is the output folder's (`shards.ShardStore.identity`:
  model, items and score-changing settings, already hashed). Logs each warning."""
  tokenizer = templater.tokenizer
  example = rendered_example(templater, example_item) if example_item is not None else None
  warnings = bos_warnings(example, tokenizer.bos_token) if example is not None else []
  for warning in warnings:
    logging.warning("%s: %s", identity["model"]["path"], warning)
  return {
      "model": {**identity["model"], "hub": hub.origin(identity["model"]["path"]),
                "files": _model_files(identity["model"]["path"])},
      "items": {"path": None if items_path is None else str(items_path), **identity["items"]},
      "tokenizer": tokenizer_identity(tokenizer),
      "chat_template": chat_template_identity(tokenizer),
      "example": example,
      "warnings": warnings,
      "dtype": dtype,
      "mesh": mesh_facts(mesh),
      "attention": attention,
      "settings": dict(identity["settings"]),
      "options": dataclasses.asdict(options),
      "versions": provenance.package_versions(),
      "command_line": list(sys.argv),
  }
