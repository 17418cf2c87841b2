"""benchmarks/gpu/gpu_throughput.py's table: each run's row (pairs/s, tokens, FLOP/s), the score
agreement of ours with the PyTorch loops, and the report written beside the runs' logs."""

from __future__ import annotations

import dataclasses
import pathlib
import shutil

import numpy as np

from benchmarks.gpu.gpu_throughput_inputs import model_params
from benchmarks.gpu.gpu_throughput_presets import RUN_TITLES, Settings
from benchmarks.gpu.gpu_throughput_runs import Run, our_rewards
from socialrm_jax.base import tables


def agreement(pairs: list[dict], ours: Run | None, torch_runs: list[Run]) -> dict:
  """Ours against each PyTorch loop (and the two loops against each other), over every pair's
  chosen and rejected: max |difference|, Pearson r, and how often the preferred side agrees.
  Sequences ours truncated (token counts differ) are left out and counted."""
  reference = {run.name: np.array([run.info["chosen"], run.info["rejected"]]).T
               for run in torch_runs}  # [P, 2]
  results = {}
  if ours is not None:
    rewards = our_rewards(ours.info["output_dir"])
    first = torch_runs[0] if torch_runs else None
    values, keep = np.zeros((len(pairs), 2)), np.ones((len(pairs), 2), bool)
    missing = 0
    for p, pair in enumerate(pairs):
      for side, key in enumerate(("chosen_index", "rejected_index")):
        found = rewards.get((str(pair["item_id"]), int(pair[key])))
        if found is None:
          keep[p, side], missing = False, missing + 1
          continue
        values[p, side] = found[0]
        tokens = first.info[("chosen_tokens", "rejected_tokens")[side]][p] if first else None
        if found[1] is not None and tokens is not None and int(found[1]) != int(tokens):
          keep[p, side] = False
    for run in torch_runs:
      results[f"ours vs {run.name}"] = _compare(values, reference[run.name], keep, missing)
  if len(torch_runs) == 2:
    a, b = torch_runs
    results[f"{a.name} vs {b.name}"] = _compare(reference[a.name], reference[b.name],
                                                np.ones((len(pairs), 2), bool), 0)
  return results


def _compare(a: np.ndarray, b: np.ndarray, keep: np.ndarray, missing: int) -> dict:
  both = keep.all(axis=1)
  x, y = a[keep], b[keep]
  diff = float(np.max(np.abs(x - y))) if x.size else None
  r = float(np.corrcoef(x, y)[0, 1]) if x.size > 1 and x.std() > 0 and y.std() > 0 else None
  same = np.sign(a[both, 0] - a[both, 1]) == np.sign(b[both, 0] - b[both, 1])
  return {"sequences": int(keep.sum()), "left_out": int((~keep).sum()) - missing,
          "missing": missing, "max_abs_diff": diff, "pearson_r": r,
          "same_preference": float(same.mean()) if both.any() else None}


def run_row(run: Run, pairs: int, matmul_params: int, on_gpu: bool, peak_tflops: float) -> dict:
  """One table row's values (None where the run does not say)."""
  info = run.info
  # A run that exits cleanly but scores fewer pairs than asked has no throughput to report.
  scored = info.get("pairs") if run.ok else None
  status = "FAILED" if not run.ok else ("ok" if scored == pairs else "INCOMPLETE")
  row = {"run": run.name, "title": RUN_TITLES[run.name], "ok": status == "ok", "status": status,
         "scored_pairs": scored, "process_seconds": run.process_seconds, "pairs": pairs,
         "pairs_per_second": pairs / run.process_seconds if status == "ok" else None,
         "cpu_seconds": run.cpu_seconds}
  if status != "ok":
    return row
  if run.name.startswith("ours"):
    compile_seconds = info.get("compile_seconds")
    compute = info["wall_seconds"] - (compile_seconds or 0.0)
    row.update(real_tokens=info["tokens_computed"], token_slots=info.get("token_slots"),
               padding_fraction=info.get("padding_fraction"), compute_seconds=compute,
               scoring_seconds=info["wall_seconds"], compilations=info.get("compilations"),
               compile_seconds=compile_seconds,
               compilation_cache_hits=info.get("compilation_cache_hits"),
               truncated=info.get("truncated"), tokens_naive=info.get("tokens_naive"))
  else:
    seconds = info["seconds"]
    row.update(real_tokens=info["real_tokens"], token_slots=info["token_slots"],
               padding_fraction=info["padding_fraction"], compute_seconds=seconds["forward"],
               scoring_seconds=seconds["tokenize"] + seconds["forward"],
               load_seconds=seconds["load"], import_seconds=seconds["import"])
  row["tokens_per_pair"] = row["real_tokens"] / pairs if pairs else None
  # Per token computed (padding included: a padded slot costs what a real one does).
  slots = row.get("token_slots")
  row["seconds_per_1k_slots"] = 1000 * row["compute_seconds"] / slots if slots else None
  flops = 2.0 * matmul_params * row["real_tokens"]
  row["flops_per_second"] = flops / row["compute_seconds"] if row["compute_seconds"] > 0 else None
  if on_gpu and row["flops_per_second"]:
    row["fraction_of_peak"] = row["flops_per_second"] / (peak_tflops * 1e12)
  return row


def _fmt(value, spec: str) -> str:
  return "n/a" if value is None else format(value, spec)


def table(rows: list[dict], on_gpu: bool) -> str:
  torch_rows = {r["run"]: r for r in rows if r["run"].startswith("torch") and r["ok"]}
  flops = "model FLOP/s (% peak)" if on_gpu else "model GFLOP/s"
  header = ["run", "pairs/s", "wall s", "x torch", "x torch sorted", "CPU s", "x torch (CPU s)",
            "x sorted (CPU s)", "score s", "tokens/pair", "padding", "compilations", "compile s",
            "cache hits", "compute s per 1k slots", flops]
  lines = [header]
  for r in rows:
    if not r["ok"]:
      lines.append([r["title"], r["status"], _fmt(r["process_seconds"], ".1f")] +
                   ["n/a"] * (len(header) - 3))
      continue
    ratios = [_fmt(r["pairs_per_second"] / torch_rows[t]["pairs_per_second"], ".2f")
              if t in torch_rows else "n/a" for t in ("torch", "torch_sorted")]
    if on_gpu:
      rate = (f"{r['flops_per_second'] / 1e12:.0f} T ({100 * r['fraction_of_peak']:.1f}%)"
              if r.get("fraction_of_peak") is not None else "n/a")
    else:
      rate = _fmt(r["flops_per_second"] and r["flops_per_second"] / 1e9, ".1f")
    cpu_ratios = [_fmt(torch_rows[t]["cpu_seconds"] / r["cpu_seconds"], ".2f")
                  if t in torch_rows and r.get("cpu_seconds") and torch_rows[t].get("cpu_seconds")
                  else "n/a" for t in ("torch", "torch_sorted")]
    lines.append([r["title"], _fmt(r["pairs_per_second"], ".1f"),
                  _fmt(r["process_seconds"], ".1f"), *ratios, _fmt(r.get("cpu_seconds"), ".1f"),
                  *cpu_ratios, _fmt(r["scoring_seconds"], ".1f"),
                  _fmt(r["tokens_per_pair"], ".1f"), _fmt(r["padding_fraction"], ".3f"),
                  _fmt(r.get("compilations"), "d"), _fmt(r.get("compile_seconds"), ".1f"),
                  _fmt(r.get("compilation_cache_hits"), "d"),
                  _fmt(r.get("seconds_per_1k_slots"), ".3f"), rate])
  widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
  text = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                    for i, (cell, w) in enumerate(zip(line, widths))) for line in lines]
  text.insert(1, "  ".join("-" * w for w in widths))
  return "\n".join(text)


def agreement_lines(results: dict) -> list[str]:
  lines = []
  for name, r in results.items():
    extra = ""
    if r["left_out"] or r["missing"]:
      extra = f" ({r['left_out']} truncated sequences left out, {r['missing']} missing)"
    lines.append(f"agreement {name}: max |diff| {_fmt(r['max_abs_diff'], '.2e')}, "
                 f"pearson r {_fmt(r['pearson_r'], '.6f')}, same preference "
                 f"{_fmt(r['same_preference'], '.4f')} over {r['sequences']} sequences{extra}")
  return lines


def report(s: Settings, items: list[dict], pairs: list[dict], model_dir: pathlib.Path,
           done: dict[str, Run], report_dir: pathlib.Path, peak_tflops: float) -> str:
  """The table and agreement as text; results.json, table.txt and the logs into `report_dir`."""
  on_gpu = s.device == "gpu"
  params, matmul_params = model_params(model_dir)
  device_name = next((r.info["device_name"] for r in done.values()
                      if r.ok and "device_name" in r.info), s.device)
  rows = [run_row(done[r], len(pairs), matmul_params, on_gpu, peak_tflops) for r in s.runs]
  torch_runs = [done[r] for r in ("torch", "torch_sorted") if r in done and done[r].ok]
  ours = done["ours"] if "ours" in done and done["ours"].ok else None
  agree = agreement(pairs, ours, torch_runs)
  loading = {r.name: {k: r.info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
             for r in torch_runs}
  header = [
      f"preset {s.name}: {len(pairs):,} pairs, {len(items):,} items ({', '.join(s.datasets)}) "
      f"from {s.data_dir}",
      f"model {model_dir.name}: {params:,} parameters ({matmul_params:,} in matmuls), {s.dtype}, "
      f"{device_name}; ours --max_length={s.max_length} --tokens_per_batch={s.tokens_per_batch}; "
      f"PyTorch batches of {s.torch_batch}, sdpa",
      "pairs/s and wall s: whole processes, start to exit; score s: inside the process "
      "(ours: run.json wall_seconds; PyTorch: tokenize + forward); x torch: pairs/s ratio",
      "CPU s: user + system seconds of the whole process (steadier than wall s where other work "
      "shares the machine); x (CPU s): the PyTorch loop's CPU s over this run's",
      "model FLOP/s: 2 x matmul params x real tokens / compute s (ours: run.json wall_seconds "
      "less compile_seconds when reported; PyTorch: the forward loop)"]
  problems = [f"{r['title']}: {r['status']}: " + (
      f"scored {r['scored_pairs']} of {r['pairs']} pairs" if r["status"] == "INCOMPLETE" else
      "the process failed") + f" (log: {done[r['run']].log})" for r in rows if not r["ok"]]
  text = "\n".join(header + ["", table(rows, on_gpu), ""] + problems + agreement_lines(agree))
  for run_name, keys in loading.items():
    if any(keys.values()):
      text += f"\nWARNING {run_name}: transformers loaded the checkpoint with {keys}"
  (report_dir / "table.txt").write_text(text + "\n")
  per_sequence = ("chosen", "rejected", "chosen_tokens", "rejected_tokens")
  tables.atomic_write_json(report_dir / "results.json", {
      **{k: str(v) if isinstance(v, pathlib.Path) else v for k, v in dataclasses.asdict(s).items()},
      "pairs": len(pairs), "items": len(items), "model": str(model_dir), "params": params,
      "matmul_params": matmul_params, "device_name": device_name,
      "peak_tflops": peak_tflops, "rows": rows,
      "agreement": agree, "torch_loading": loading,
      "runs": {k: {kk: vv for kk, vv in v.info.items() if kk not in per_sequence}
               for k, v in done.items()}})
  for run in done.values():
    shutil.copy(run.log, report_dir / pathlib.Path(run.log).name)
  return text
