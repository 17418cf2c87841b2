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


def build_plan(scorer: compiler.AbstractScorer, model_name: str, source: str, options,
               batches: list[dict], fitting: dict | None, projected: dict | None,
               tokenizer: str | None, checks: dict | None = None,
               largest: dict | None = None, training: list[dict] | None = None) -> dict:
  """The plan as plan.json holds it. `checks`: the step's own (`compiler.compile_all`);
  `largest`: the largest fitting tokens_per_batch (`compiler.largest_fitting_tokens_per_batch`;
  None: not searched); `training`: socialrm-train's steps (`training.compile_training`)."""
  topology, chip = scorer.topology, scorer.topology.chip
  group_hosts = len({d.process_index for d in scorer.mesh.devices.flat})
  fits = all(entry["fits"] for entry in batches)
  plan: dict[str, Any] = {
      "topology": topology.name, "devices": len(topology.devices), "hosts": topology.hosts,
      "num_slices": topology.num_slices, "kind": chip.kind,
      "chip": {"name": chip.name, "bf16_flops_per_second": chip.bf16_flops_per_second,
               "hbm_bytes": chip.hbm_bytes, "hbm_bytes_per_second": chip.hbm_bytes_per_second,
               "device_kind": scorer.mesh.devices.flat[0].device_kind},
      "memory_fraction": topology.memory_fraction, "usable_bytes": topology.usable_bytes,
      "software": dict(topology.software),
      "mesh": dict(scorer.mesh.shape), "group_devices": int(scorer.mesh.devices.size),
      "group_hosts": group_hosts, "groups": scorer.groups,
      "model": {"name": model_name, "source": source, "architecture": scorer.config.architecture,
                "parameters": scorer.counts.parameters,
                "matmul_params": scorer.counts.matmul_params,
                "head_params": scorer.counts.head_params, "dtype": options.dtype,
                "attention": scorer.attention, "proxy": scorer.proxy, "readout": scorer.readout},
      "settings": {"max_length": options.max_length, "tokens_per_batch": options.tokens_per_batch,
                   "batch_tokens": scorer.batcher.batch_tokens,
                   "chunk_size": options.chunk_size, "truncation": options.truncation},
      "batches": batches, "fits": fits,
      "estimate": f"estimated_seconds: {ESTIMATE}, max(analytic_flops / chips / peak bf16 "
                  "FLOP/s, bytes moved / HBM bandwidth); no communication, no inefficiency",
  }
  head = scorer.config.reward_head
  if head is not None:  # a custom head (heads.py), read from the checkpoint's tensor names
    plan["model"]["reward_head"] = {"class": head.architecture, "kind": head.kind,
                                    "outputs": head.num_outputs}
  if not fits:
    plan["fitting_mesh"] = fitting
  if checks is not None:
    plan["checks"] = checks
  if largest is not None:
    plan["largest_tokens_per_batch"] = largest
  if training:
    plan["training"] = training
  plan["failures"] = failures(plan)
  if projected is not None:
    plan["projected"] = project_time(projected, batches, tokenizer)
  return plan


def failures(plan: dict) -> list[str]:
  """Every failure the plan's checks found (a program or the step as a whole), each naming
  where: what the GPU and TPU paths must not do, apart from not fitting."""
  out = [f"scoring {entry['shape']}: {f}" for entry in plan["batches"]
         for f in entry.get("failures", [])]
  out += [f"scoring: {f}" for f in plan.get("checks", {}).get("failures", [])]
  for step in plan.get("training", []):
    out += [f"training ({step['mode']}) {entry['shape']}: {f}" for entry in step["blocks"]
            for f in entry["failures"]]
    out += [f"training ({step['mode']}) update: {f}"
            for f in (step["update"] or {}).get("failures", [])]
    out += [f"training ({step['mode']}): {f}" for f in step["failures"]]
  return out


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


def _memory_parts(memory: dict | None) -> str:
  if memory is None:
    return "-"
  return " / ".join(_gb(memory[k]) for k in ("arguments", "outputs", "temporaries",
                                               "generated_code"))


def _collectives(collectives: dict) -> str:
  return ", ".join(f"{name} x{count}" for name, count in collectives.items()) or "none"


def _header(plan: dict) -> list[str]:
  model, chip, mesh = plan["model"], plan["chip"], plan["mesh"]
  kind = plan.get("kind", "TPU")
  unit = "chips" if kind == "TPU" else "GPUs"
  if kind == "TPU":
    target = (f"Compiled on this host for `{plan['topology']}` ({plan['devices']} {chip['name']} "
              f"chips on {plan['hosts']} host{'s' if plan['hosts'] > 1 else ''}, "
              f"{plan['num_slices']} slice{'s' if plan['num_slices'] > 1 else ''}); no TPU was "
              "used.")
  else:
    software = ", ".join(f"{name} {version}" for name, version in plan["software"].items())
    target = (f"Compiled on this host for `{plan['topology']}` ({plan['devices']} {chip['name']} "
              f"GPU{'s' if plan['devices'] > 1 else ''} on one host, described to XLA as "
              f"\"{chip['device_kind']}\"; {software}); no GPU was used.")
  return [
      f"# {kind} plan: {model['name']} on {plan['topology']}", "", target,
      f"Mesh `{','.join(f'{k}:{v}' for k, v in mesh.items())}`: one data-parallel group is "
      f"{plan['group_devices']} {unit if plan['group_devices'] > 1 else unit[:-1]} on "
      f"{plan['group_hosts']} "
      f"host{'s' if plan['group_hosts'] > 1 else ''}, and the job has {plan['groups']} such "
      f"group{'s' if plan['groups'] > 1 else ''}.",
      f"Model: {model['architecture']}"
      + (f" with {model['reward_head']['class']}'s {model['reward_head']['kind']} reward head "
         f"({model['reward_head']['outputs']} outputs)" if "reward_head" in model else "")
      + f", {model['parameters']:,} parameters "
      f"({model['matmul_params']:,} in the trunk's matmuls), {model['dtype']}, attention "
      f"`{model['attention']}`, proxy `{model['proxy']}`."]


def _capacity_line(plan: dict) -> str:
  chip = plan["chip"]
  if plan.get("kind", "TPU") == "TPU":
    return f"HBM per chip: {_gb(chip['hbm_bytes'])} GB ({chip['name']}, published)."
  return (f"Memory per GPU: {_gb(chip['hbm_bytes'])} GB as CUDA reports it ({chip['name']}); "
          f"JAX's allocator takes {plan['memory_fraction']:g} of it (`XLA_CLIENT_MEM_FRACTION`, "
          f"0.75 unless set; `--memory_fraction`), {_gb(plan['usable_bytes'])} GB: \"used\" and "
          "\"fits\" are measured against that.")


def render_markdown(plan: dict) -> str:
  """plan.md: the plan for a reader deciding on a slice or a GPU machine."""
  unit = "chip" if plan.get("kind", "TPU") == "TPU" else "device"
  lines = _header(plan) + [
      "",
      "## Scoring",
      "",
      f"| batch [rows, length, readouts] | compiled | attention kernel | custom calls "
      f"| collectives | arguments / outputs / temporaries / code (GB) | used per {unit} (GB) "
      f"| free (GB) | fits | XLA FLOPs | analytic FLOPs | step time ({ESTIMATE}) |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for entry in plan["batches"]:
    used = entry["hbm_bytes_per_chip"]
    free = None if used is None else entry["hbm_capacity_bytes"] - used
    calls = ", ".join(entry["custom_calls"]) or "-"
    xla = "-" if entry["flops"] is None else f"{entry['flops']:.3g}"
    lines.append(
        f"| {entry['shape']} | {'yes' if entry['compiled'] else 'no'} "
        f"| {entry.get('attention_kernel') or '-'} | {calls} "
        f"| {_collectives(entry.get('collectives', {}))} | {_memory_parts(entry.get('memory'))} "
        f"| {_gb(used)} | {_gb(free)} | {'yes' if entry['fits'] else '**no**'} | {xla} "
        f"| {entry['analytic_flops']:.3g} | {_seconds(entry['estimated_seconds'])} |")
  lines += ["", _capacity_line(plan)]
  settings = plan["settings"]
  lines.append(f"--tokens_per_batch={settings['tokens_per_batch']} (batches of "
               f"{settings['batch_tokens']} token slots).")
  if "largest_tokens_per_batch" in plan:
    lines.append(_largest_line(plan["largest_tokens_per_batch"], settings["tokens_per_batch"]))
  if plan["fits"]:
    lines.append("Every batch shape fits.")
  else:
    lines += _does_not_fit(plan)
  for step in plan.get("training", []):
    lines += _training(step, unit)
  lines += _checks(plan)
  if "projected" in plan:
    lines += _projection(plan["projected"], plan["fits"])
  lines += [
      "",
      f"Times are a {ESTIMATE}: max(analytic FLOPs / {unit}s / the {unit}'s peak bf16 FLOP/s, "
      "bytes moved / its memory bandwidth), from `socialrm_jax/orchestrators/plan/cost.py`; "
      f"communication between {unit}s and every inefficiency are left out, so a real run is "
      "slower. XLA's FLOPs are reported as XLA counts them (per device, a scanned layer body "
      "once; a compile-only GPU program has no count) and are not used.",
  ]
  return "\n".join(lines) + "\n"


def _largest_line(largest: dict, asked: int) -> str:
  if largest["tokens_per_batch"] is None:
    return ("Largest --tokens_per_batch that fits: none, down to one row of the longest bucket "
            "a device.")
  engine_largest = (", the engine's largest batch (--chunk_size rows of --max_length)"
                    if largest["limit"] else "")
  if largest["tokens_per_batch"] == asked:
    twice = "" if largest["limit"] else (" (twice it does not; each candidate's every batch "
                                         "shape compiled)")
    return (f"Largest --tokens_per_batch that fits: {asked}, the one asked "
            f"for{engine_largest}{twice}.")
  return (f"Largest --tokens_per_batch that fits: **{largest['tokens_per_batch']}**"
          f"{engine_largest} ({_gb(largest['hbm_bytes_per_chip'])} GB a device at most; "
          "--tokens_per_batch times a power of two, each candidate's every batch shape compiled).")


def _training(step: dict, unit: str) -> list[str]:
  resident = step["resident_bytes"]
  lines = ["", f"## Training ({step['mode']})", "",
           f"`socialrm-train {step['flags']}`: trained parameters (float32) "
           f"{_gb(resident['trained'])} GB, frozen {_gb(resident['frozen'])} GB and optimizer "
           f"state {_gb(resident['optimizer_state'])} GB a {unit}.", "",
           f"| block [rows, length] | compiled | attention kernel | collectives "
           f"| arguments / outputs / temporaries / code (GB) | + optimizer state (GB) "
           f"| used per {unit} (GB) | free (GB) | fits |", "|---|---|---|---|---|---|---|---|---|"]
  for entry in step["blocks"]:
    used = entry["device_bytes"]
    free = None if used is None else entry["capacity_bytes"] - used
    lines.append(f"| {entry['shape']} | {'yes' if entry['compiled'] else 'no'} "
                 f"| {entry['attention_kernel'] or '-'} | {_collectives(entry['collectives'])} "
                 f"| {_memory_parts(entry['memory'])} | {_gb(resident['optimizer_state'])} "
                 f"| {_gb(used)} | {_gb(free)} | {'yes' if entry['fits'] else '**no**'} |")
  update = step["update"] or {}
  if update.get("memory") is not None:
    lines += ["", f"The optimizer's update: {_gb(update['device_bytes'])} GB a {unit} with the "
                  f"frozen parameters, collectives {_collectives(update['collectives'])}."]
  if step.get("hosts", 1) > 1:
    pairs = (f"{step['pairs_per_host']} of each micro-batch's --batch_size={step['batch_size']} "
             "pairs" if step["pairs_per_host"] is not None else
             f"an unequal share of --batch_size={step['batch_size']} pairs (make it a multiple "
             f"of the data axis)")
    rows = ", ".join(f"{entry['rows_per_host']} of {entry['shape'][0]}" for entry in step["blocks"])
    lines += ["", f"Per host ({step['hosts']} hosts, one process each): {pairs}, packed into "
                  f"rows; of each block's rows: {rows} (the rows of {step['data_per_host']} "
                  "positions of the data axis; each host feeds only those)."]
  lines.append(_training_fit(step, unit))
  return lines


def _training_fit(step: dict, unit: str) -> str:
  """Whether a training step fits, and where it does not, the first remedy that does (each
  compiled, `training.fitting_remedy`), or the remedies beyond the step's own settings."""
  if step["fits"]:
    return "Every block shape fits."
  remedy = step.get("remedy")
  if remedy is not None and remedy["fits"] is not None:
    fits = remedy["fits"]
    others = remedy["tried"][:-1]
    before = (f"; {', '.join(f'`{flags}`' for flags in others)} did not"
              if others else "")
    return (f"**Does not fit** as asked; fits with **`{fits['flags']}`** "
            f"({_gb(fits['device_bytes'])} GB a {unit} at most, every program compiled{before}).")
  update = step["update"] or {}
  if update.get("device_bytes") is not None and update["device_bytes"] > (
      step["blocks"][0]["capacity_bytes"]):
    why = "the optimizer's update alone does not fit, and no block setting changes it"
  elif remedy is not None and remedy["tried"]:
    why = f"nor with {', '.join(f'`{flags}`' for flags in remedy['tried'])} (each compiled)"
  elif remedy is not None:
    why = "with nothing kept for the backward pass and one row a device a block already"
  else:
    why = "the failures below say why"
  generic = ([] if step["mode"] == "lora" else ["LoRA (`--train=lora`)"]) + [
      f"a larger model axis (`--mesh`) or more {unit}s", "a smaller --max_length"]
  return f"**Does not fit**: {why}. Plan {', or '.join(generic)}."


def _checks(plan: dict) -> list[str]:
  if "checks" not in plan:
    return []
  found = plan.get("failures", [])
  if found:
    return ["", "## Failures", "", *(f"- {f}" for f in found)]
  checks = plan["checks"]
  kernels = sorted({entry["attention_kernel"] for entry in plan["batches"]
                    if entry.get("attention_kernel")})
  if plan["model"]["attention"] == "cudnn":
    kernel = "cudnn attention in every program"
  else:
    kernel = f"attention compiled: {', '.join(kernels) or '-'} (no cuDNN asked for)"
  return ["", f"Checks passed: {kernel}; no host transfer inside a step; "
              f"{checks['compilations']} programs compiled for {checks['shapes']} batch shapes; "
              f"every parameter in {plan['model']['dtype']}."]


def _does_not_fit(plan: dict) -> list[str]:
  gpu = plan.get("kind", "TPU") == "GPU"
  device = "GPU" if gpu else "chip"
  mesh = ",".join(f"{k}:{v}" for k, v in plan["mesh"].items())
  failed = [e["shape"] for e in plan["batches"] if not e["compiled"] and e.get("failures")]
  if failed:
    return ["", f"**Not compiled** on mesh `{mesh}`: batch {', '.join(map(str, failed))} (the "
                "failures below say why)."]
  worst = max(plan["batches"], key=lambda e: e["hbm_bytes_per_chip"] or 0)
  capacity = worst["hbm_capacity_bytes"]
  used = worst["hbm_bytes_per_chip"]
  if used is None:
    need = f"more than the {device} has (the compiler did not say how much)"
  else:
    need = (f"{used:,} bytes ({_gb(used)} GB) per {device}, {used - capacity:,} bytes "
            f"({_gb(used - capacity)} GB) more than its {capacity:,}")
  lines = ["", f"**Does not fit** on mesh `{','.join(f'{k}:{v}' for k, v in plan['mesh'].items())}`:"
           f" batch {worst['shape']} needs {need}."]
  fitting = plan.get("fitting_mesh")
  if fitting is None:
    remedies = ["more GPUs" if gpu else "a larger slice",
                "a smaller --tokens_per_batch or --max_length"]
    if plan["model"]["dtype"] != "bfloat16":
      remedies.insert(1, "--dtype=bfloat16")
    if gpu:
      remedies.append("more of each GPU's memory for JAX (`XLA_CLIENT_MEM_FRACTION` on the GPU "
                      "machine, `--memory_fraction` here)")
    lines.append(f"No model axis on this topology fits: plan {', or '.join(remedies)}.")
  else:
    lines.append(f"The smallest model axis that fits is **model:{fitting['model']}** (mesh "
                 f"`{fitting['mesh']}`, {_gb(fitting['hbm_bytes_per_chip'])} GB per {device} at "
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

