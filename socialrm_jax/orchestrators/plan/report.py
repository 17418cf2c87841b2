"""plan.json and plan.md: what was compiled, what fits, and the roofline estimates.

Every time shown is a roofline estimate (`cost.py`): the analytic FLOPs at the chip's published
bf16 peak or the bytes at its HBM bandwidth, whichever takes longer, and is labelled so.
"""

from __future__ import annotations

import os
from typing import Any

from socialrm_jax.base import tables
from socialrm_jax.orchestrators.plan import compiler

ESTIMATE = "roofline estimate"
GB = 1e9


def build_plan(setup: compiler.Setup, model_name: str, source: str, options,
               batches: list[dict], fitting: dict | None, projected: dict | None,
               tokenizer: str | None) -> dict:
  """The plan as plan.json holds it."""
  topology, chip = setup.topology, setup.topology.chip
  group_hosts = len({d.process_index for d in setup.mesh.devices.flat})
  fits = all(entry["fits"] for entry in batches)
  plan: dict[str, Any] = {
      "topology": topology.name, "devices": len(topology.devices), "hosts": topology.hosts,
      "num_slices": topology.num_slices,
      "chip": {"name": chip.name, "bf16_flops_per_second": chip.bf16_flops_per_second,
               "hbm_bytes": chip.hbm_bytes, "hbm_bytes_per_second": chip.hbm_bytes_per_second},
      "mesh": dict(setup.mesh.shape), "group_devices": int(setup.mesh.devices.size),
      "group_hosts": group_hosts, "groups": setup.groups,
      "model": {"name": model_name, "source": source, "architecture": setup.config.architecture,
                "parameters": setup.counts.parameters,
                "matmul_params": setup.counts.matmul_params,
                "head_params": setup.counts.head_params, "dtype": options.dtype,
                "attention": setup.attention, "proxy": setup.proxy, "readout": setup.readout},
      "settings": {"max_length": options.max_length, "tokens_per_batch": options.tokens_per_batch,
                   "batch_tokens": setup.batcher.tokens_per_batch,
                   "chunk_size": options.chunk_size, "truncation": options.truncation},
      "batches": batches, "fits": fits,
      "estimate": f"estimated_seconds: {ESTIMATE}, max(analytic_flops / chips / peak bf16 "
                  "FLOP/s, bytes moved / HBM bandwidth); no communication, no inefficiency",
  }
  head = getattr(setup.config, "reward_head", None)
  if head is not None:  # a custom head (heads.py), read from the checkpoint's tensor names
    plan["model"]["reward_head"] = {"class": head.architecture, "kind": head.kind,
                                    "outputs": head.num_outputs}
  if not fits:
    plan["fitting_mesh"] = fitting
  if projected is not None:
    plan["projected"] = project_time(projected, batches, tokenizer)
  return plan


def project_time(projected: dict, batches: list[dict], tokenizer: str | None) -> dict:
  """The projection with its roofline estimate: each group's batches times their step's
  estimate; the groups run side by side, so the run takes the slowest group's time."""
  step_seconds = {"x".join(map(str, entry["shape"])): entry["estimated_seconds"]
                  for entry in batches}
  out = dict(projected, tokenizer=tokenizer)
  if any(seconds is None for seconds in step_seconds.values()):
    out.update(estimated_seconds=None, estimated_pairs_per_second=None)
    return out
  for group in out["groups"]:
    group["estimated_seconds"] = sum(count * step_seconds[shape]
                                     for shape, count in group["batches"].items())
  wall = max(group["estimated_seconds"] for group in out["groups"])
  out.update(estimated_seconds=wall,
             estimated_pairs_per_second=out["pairs"] / wall if wall > 0 else None)
  return out


def _gb(value: float | None) -> str:
  return "?" if value is None else f"{value / GB:.2f}"


def _seconds(value: float | None) -> str:
  if value is None:
    return "-"
  return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"


def render_markdown(plan: dict) -> str:
  """plan.md: the plan for a reader deciding on a slice."""
  model, chip, mesh = plan["model"], plan["chip"], plan["mesh"]
  mesh_text = ",".join(f"{k}:{v}" for k, v in mesh.items())
  lines = [
      f"# TPU plan: {model['name']} on {plan['topology']}",
      "",
      f"Compiled on this host for `{plan['topology']}` ({plan['devices']} {chip['name']} chips "
      f"on {plan['hosts']} host{'s' if plan['hosts'] > 1 else ''}, {plan['num_slices']} "
      f"slice{'s' if plan['num_slices'] > 1 else ''}); no TPU was used.",
      f"Mesh `{mesh_text}`: one data-parallel group is {plan['group_devices']} chips on "
      f"{plan['group_hosts']} host{'s' if plan['group_hosts'] > 1 else ''}, and the job has "
      f"{plan['groups']} such group{'s' if plan['groups'] > 1 else ''}.",
      f"Model: {model['architecture']}"
      + (f" with {model['reward_head']['class']}'s {model['reward_head']['kind']} reward head "
         f"({model['reward_head']['outputs']} outputs)" if "reward_head" in model else "")
      + f", {model['parameters']:,} parameters "
      f"({model['matmul_params']:,} in the trunk's matmuls), {model['dtype']}, attention "
      f"`{model['attention']}`, proxy `{model['proxy']}`.",
      "",
      f"| batch [rows, length, readouts] | compiled | custom calls | HBM per chip used (GB) "
      f"| free (GB) | fits | XLA FLOPs | analytic FLOPs | step time ({ESTIMATE}) |",
      "|---|---|---|---|---|---|---|---|---|",
  ]
  for entry in plan["batches"]:
    used = entry["hbm_bytes_per_chip"]
    free = None if used is None else entry["hbm_capacity_bytes"] - used
    calls = ", ".join(entry["custom_calls"]) or "-"
    xla = "-" if entry["flops"] is None else f"{entry['flops']:.3g}"
    lines.append(
        f"| {entry['shape']} | {'yes' if entry['compiled'] else 'no'} | {calls} | {_gb(used)} "
        f"| {_gb(free)} | {'yes' if entry['fits'] else '**no**'} | {xla} "
        f"| {entry['analytic_flops']:.3g} | {_seconds(entry['estimated_seconds'])} |")
  lines += ["", f"HBM per chip: {_gb(chip['hbm_bytes'])} GB ({chip['name']}, published)."]
  if plan["fits"]:
    lines.append("Every batch shape fits.")
  else:
    lines += _does_not_fit(plan)
  if "projected" in plan:
    lines += _projection(plan["projected"], plan["fits"])
  lines += [
      "",
      f"Times are a {ESTIMATE}: max(analytic FLOPs / chips / the chip's peak bf16 FLOP/s, bytes "
      "moved / its HBM bandwidth), from `socialrm_jax/orchestrators/plan/cost.py`; communication between "
      "chips and every inefficiency are left out, so a real run is slower. XLA's FLOPs are "
      "reported as XLA counts them (per chip, a scanned layer body once) and are not used.",
  ]
  return "\n".join(lines) + "\n"


def _does_not_fit(plan: dict) -> list[str]:
  worst = max(plan["batches"], key=lambda e: e["hbm_bytes_per_chip"] or 0)
  capacity = worst["hbm_capacity_bytes"]
  used = worst["hbm_bytes_per_chip"]
  if used is None:
    need = "more than the chip has (the compiler did not say how much)"
  else:
    need = (f"{used:,} bytes ({_gb(used)} GB) per chip, {used - capacity:,} bytes "
            f"({_gb(used - capacity)} GB) more than its {capacity:,}")
  lines = ["", f"**Does not fit** on mesh `{','.join(f'{k}:{v}' for k, v in plan['mesh'].items())}`:"
           f" batch {worst['shape']} needs {need}."]
  fitting = plan.get("fitting_mesh")
  if fitting is None:
    remedies = ["a larger slice", "a smaller --tokens_per_batch or --max_length"]
    if plan["model"]["dtype"] != "bfloat16":
      remedies.insert(1, "--dtype=bfloat16")
    lines.append(f"No model axis on this topology fits: plan {', or '.join(remedies)}.")
  else:
    lines.append(f"The smallest model axis that fits is **model:{fitting['model']}** (mesh "
                 f"`{fitting['mesh']}`, {_gb(fitting['hbm_bytes_per_chip'])} GB per chip at "
                 f"most): `--mesh={fitting['mesh']}`.")
  return lines


def _projection(projected: dict, fits: bool) -> list[str]:
  heading = "## Projected run" + ("" if fits else " (on the mesh asked for, which does not fit)")
  lines = ["", heading, "",
           f"{projected['items']:,} items, {projected['pairs']:,} pairs, "
           f"{projected['tokens']:,} tokens in {projected['token_slots']:,} token slots "
           f"({projected['truncated']} items truncated), tokenized with "
           f"`{projected['tokenizer']}`.", "",
           "| group | chunks | batches | time (" + ESTIMATE + ") |", "|---|---|---|---|"]
  for index, group in enumerate(projected["groups"]):
    batches = ", ".join(f"{count} x {shape}" for shape, count in group["batches"].items())
    lines.append(f"| {index} | {len(group['chunks'])} | {batches or '-'} "
                 f"| {_seconds(group.get('estimated_seconds'))} |")
  if projected["estimated_seconds"] is not None:
    lines += ["", f"Whole run: {_seconds(projected['estimated_seconds'])}, "
                  f"{projected['estimated_pairs_per_second']:,.0f} pairs/s ({ESTIMATE})."]
  return lines


def write(output_dir: str, plan: dict) -> None:
  """plan.json and plan.md into `output_dir`, each under a temporary name, then renamed."""
  os.makedirs(output_dir, exist_ok=True)
  tables.atomic_write_json(os.path.join(output_dir, "plan.json"), plan)
  tables.atomic_write_bytes(os.path.join(output_dir, "plan.md"),
                            render_markdown(plan).encode("utf-8"))

