"""Metrics for several scores sets at once: one metrics.json per model, comparisons.json (each
pair of models compared on the same items, see `compare`), one report.

The library side of `python -m socialrm_jax.main.metrics`, used by the audit
(`orchestrators/audit`) too.
"""

from __future__ import annotations

import pathlib
import time
from typing import Sequence

from absl import logging

from socialrm_jax.analysis import evaluate
from socialrm_jax.analysis.outputs import (plots, provenance, report, report_html,
                                           rewardbench2_results)
from socialrm_jax.analysis.studies import compare, objectives, template_spread
from socialrm_jax.analysis.tables import evidence, pairs, reward_tables
from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError


def model_names(paths: list[str], names: list[str]) -> list[str]:
  """One distinct display name per scores set (a repeated name gets `-2`, `-3`, ...)."""
  if names and len(names) != len(paths):
    raise InputError(f"--names has {len(names)} names for {len(paths)} scores sets")
  chosen = names or [reward_tables.model_name(p) for p in paths]
  seen: dict[str, int] = {}
  out = []
  for name in chosen:
    seen[name] = seen.get(name, 0) + 1
    out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
  return out


def run_json(score_path: str) -> dict | None:
  """The run.json beside a scores set (scoring/run_manifest.py), or None."""
  path = pathlib.Path(score_path)
  path = (path if path.is_dir() else path.parent) / provenance.RUN_FILE
  return tables.read_json_object(str(path)) if path.is_file() else None


def output_names(score_path: str) -> tuple[str, ...]:
  """A custom reward head's output names, as its scoring run recorded them (run.json's
  `reward_head`; scoring/proxies.py), or () for any other scores."""
  head = (run_json(score_path) or {}).get("reward_head") or {}
  return tuple(head.get("outputs", ()))


def evaluate_all(items_path: str, score_paths: list[str], output_dir: str, names: list[str],
                 options: evaluate.Options,
                 sections: Sequence[Sequence[str]] = ()) -> dict[str, dict]:
  """Everything the command does, importable: returns {name: metrics}. `sections`: further
  report sections (markdown lines), e.g. the audit's value probes.

  comparisons.json is written with any number of models (with one, it lists no pair), so a
  folder never keeps the comparisons of an earlier run beside new metrics."""
  folder = pathlib.Path(items_path)
  # Read in batches, checked, and kept as columns without their texts (`pairs.ItemTable`).
  items = pairs.read_items(items_path, options.item_fields)
  pair_table = pairs.read_pairs(folder if folder.is_dir() else folder.parent, items)
  paths = dict(zip(model_names(score_paths, names), score_paths))
  joined: dict[str, pairs.Scored] = {}  # kept for the paired comparisons
  per_objective = {}
  for name, path in paths.items():
    start = time.perf_counter()
    # The scores are read a part at a time (`reward_tables.score_parts`): never whole.
    joined[name] = pairs.join(items, pair_table, reward_tables.score_parts(path, vectors=False),
                              options.allow_missing, ids=pairs.ids_reader(items_path))
    per_objective[name] = objectives.per_objective(
        items, pair_table, lambda path=path: reward_tables.score_parts(path), options,
        output_names(path))
    logging.info("%s: joined in %.1f s", name, time.perf_counter() - start)
  # Every set joined: the scored items keep what the metrics read, not the tables' ids (the few
  # the evidence shows are read again).
  del items, pair_table
  tables.release_unused_memory()
  models = {}
  for name, path in paths.items():
    start = time.perf_counter()
    metrics = evaluate.metrics_from_scored(joined[name], options)
    metrics.update(per_objective.pop(name))
    metrics["template_spread"] = template_spread.from_scored(joined[name], options)
    models[name] = {"model": name, "scores": str(path), "items": str(items_path), **metrics}
    logging.info("%s: metrics in %.1f s", name, time.perf_counter() - start)
  # The worst pairs' texts, every model's at once, from the items table's rows with their ids.
  evidence.add_texts(models.values(), lambda ids: tables.iter_rows(
      items_path, "items", evidence.ITEM_COLUMNS, item_ids=ids))
  tables.release_unused_memory()
  for name, metrics in models.items():
    tables.atomic_write_json(pathlib.Path(output_dir) / name / "metrics.json", metrics)
    # RewardBench 2's own result files, where the items had its rows (a leaderboard submission).
    rewardbench2_results.write(output_dir, name, joined[name], metrics, run_json(paths[name]),
                               lambda ids: tables.iter_rows(
                                   items_path, "items", rewardbench2_results.ITEM_COLUMNS,
                                   item_ids=ids))
  start = time.perf_counter()
  comparisons = compare.compare_models(joined, options)
  tables.atomic_write_json(pathlib.Path(output_dir) / "comparisons.json", comparisons)
  logging.info("comparisons of %d pairs of models in %.1f s", len(comparisons["pairs"]),
               time.perf_counter() - start)
  figures = plots.write_all(models, output_dir)
  report_sections = [evidence.report_lines(models), objectives.report_lines(models),
                     template_spread.report_lines(models), compare.report_lines(comparisons),
                     *sections,
                     provenance.report_section({name: m["scores"] for name, m in models.items()})]
  report.write(models, pathlib.Path(output_dir) / "report.md", figures, report_sections)
  # The same report as one page for a browser: filters, sorting, folded worst pairs.
  report_html.write(models, pathlib.Path(output_dir) / "report.html", figures, report_sections)
  return models
