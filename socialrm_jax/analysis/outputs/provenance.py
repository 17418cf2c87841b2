"""report.md's "Run manifest" section: what each model's scores came from.

It reads the run.json beside each scores set: its `manifest` (scoring/run_manifest.py: hashes of
the model, items, tokenizer and chat template, a rendered example's BOS/EOS counts and warnings,
dtype, mesh, versions) and the `--check_invariance` result (scoring/invariance.py) where the run
made one.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Mapping

from socialrm_jax.analysis.outputs import report

# Hex digits of a hash shown in report.md (run.json keeps them whole).
SHORT_HASH = 12
RUN_FILE = "run.json"


def _short(digest: str | None) -> str:
  return f"`{digest[:SHORT_HASH]}`" if digest else "–"


def invariance_sentence(invariance: Mapping[str, Any] | None) -> str:
  """What the run's `--check_invariance` found, in words."""
  if not invariance:
    return "not checked (`--check_invariance=N` re-scores N items in other batch compositions)"
  if invariance.get("max_abs_diff") is None:
    return f"{invariance.get('items', 0)} items re-scored, not compared"
  text = (f"largest difference {invariance['max_abs_diff']:.2e} over {invariance['items']} items "
          f"re-scored in {len(invariance['compositions'])} other batch compositions "
          f"({', '.join(invariance['compositions'])})")
  tolerance = invariance.get("tolerance")
  if tolerance is not None:
    within = invariance["max_abs_diff"] <= tolerance
    text += f"; {'within' if within else 'OVER'} the {tolerance:g} bound of {invariance['dtype']}"
  return text


def report_lines(run_json: Mapping[str, Any], model_name: str) -> list[str]:
  """One model's part of the "Run manifest" section: a table of what its scores came from."""
  manifest = run_json.get("manifest")
  if not manifest:
    return [f"**{model_name}**: its run.json has no manifest (scored by an earlier version).", ""]
  example = manifest.get("example") or {}
  scored = example.get("scored") or {}
  mesh = manifest["mesh"]
  versions = manifest["versions"]
  rows = [
      ["model", f"{manifest['model']['path']} {_short(manifest['model']['sha256'])} (its "
                f"{len(manifest['model']['files'])} file(s), weights included)"],
      ["items", f"{manifest['items']['count']} from {manifest['items']['path'] or '–'} "
                f"{_short(manifest['items']['sha256'])}"],
      ["tokenizer", _short(manifest["tokenizer"]["sha256"])],
      ["chat template", f"{manifest['chat_template']['format']} "
                        f"{_short(manifest['chat_template']['sha256'])}"],
      ["BOS / EOS in an example", f"{report.fmt(scored.get('bos'))} / "
                                  f"{report.fmt(scored.get('eos'))} (item "
                                  f"{example.get('item_id', '–')}, candidate 0)"],
      ["dtype, attention", f"{manifest['dtype']}, {manifest['attention']}"],
      ["mesh", f"{', '.join(f'{k}:{v}' for k, v in mesh['axes'].items())} on {mesh['devices']} "
               f"{mesh['device_kind'] or mesh['platform']}"],
      ["versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v is not None)],
      ["invariance", invariance_sentence(run_json.get("invariance"))],
  ]
  hub = manifest["model"].get("hub")
  if hub:  # a model named by Hub id: the commit its files were taken at, whole
    rows.insert(1, ["Hub", f"{hub['id']} at commit {hub['commit']}"])
  lines = [f"**{model_name}**", ""] + report.table(["", ""], rows) + [""]
  lines += [f"- warning: {w}" for w in manifest.get("warnings", [])]
  return lines + ([""] if manifest.get("warnings") else [])


def read_run(scores_path: str | os.PathLike) -> dict | None:
  """The run.json beside a scores set (a folder of shards, or a file in one); None if absent."""
  path = pathlib.Path(scores_path)
  run_file = (path if path.is_dir() else path.parent) / RUN_FILE
  if not run_file.is_file():
    return None
  try:
    return json.loads(run_file.read_text(encoding="utf-8"))
  except json.JSONDecodeError:
    return None


def report_section(scores_paths: Mapping[str, str | os.PathLike]) -> list[str]:
  """report.md's "Run manifest" section for {model name: its scores path} (empty if no scores
  set has a run.json beside it)."""
  runs = {name: run for name, path in scores_paths.items() if (run := read_run(path)) is not None}
  if not runs:
    return []
  lines = ["## Run manifest", "",
           "What each model's scores came from (run.json's `manifest` beside the scores; hashes "
           f"shortened to {SHORT_HASH} hex digits, whole in run.json), and whether a reward "
           "depends on the batch it was scored in.", ""]
  for name, run in runs.items():
    lines += report_lines(run, name)
  return lines
