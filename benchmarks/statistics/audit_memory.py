"""Peak host memory of a whole audit: flat in the number of items.

  JAX_PLATFORMS=cpu python -m benchmarks.statistics.audit_memory [--item_counts=10000,1000000] \
      [--work_dir=runs/gpu_throughput]

The scoring memory benchmark's method (`benchmarks/scoring/scoring_memory.py`) over the audit: for each
count N it writes a BBQ data folder of N distinct records (the bundled slice's rows over and over,
each copy's `example_id` renumbered and its context numbered, in the bundled category files),
builds the tiny random Llama reward model of `benchmarks/gpu/gpu_throughput.py` once, and runs
`python -m socialrm_jax.main.audit` on it as a child process: convert, score, derive and score
the counterfactual identity swaps, metrics with their bootstrap, the report (the value probe
off: it scores its own lexicon, whatever the items). It reads the child's peak resident set size
(`ru_maxrss`) when it exits and prints one table; the bound is 1.5x between the smallest and the
largest count.

Scoring a million items with even the tiny model takes hours on a small CPU, so
`--step_counts` (empty: skipped) measures the counterfactual step alone at any size, with no
model: the converter writes the counted BBQ items, a synthetic scores set (a seeded reward per
candidate, `--seed`) stands for each model run, and two child processes are measured, the swap
set's derivation (`python -m socialrm_jax.main.counterfactuals`) and the swap measures
(`swap_effects.compute_at`, what the audit runs on the two score sets).

On a 2-vCPU AMD EPYC (family 25 model 17) (docs/benchmarks_cpu.md): the whole audit with the
micro model peaked at 715.8 MiB with 10,000 items and 1,023.8 MiB with 1,000,000 (1.43x); the
counterfactual step alone, 10,000 -> 100,000 items: derivation 268.4 -> 302.5 MiB (1.13x), swap
measures 299.3 -> 351.1 MiB (1.17x).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys

import numpy as np
import pyarrow as pa

from absl import flags

from benchmarks.common import REPO, peak_rss_mib, print_peak_ratio, print_table
from benchmarks.gpu import gpu_throughput_inputs  # the model builder
from benchmarks.scoring import scoring_memory  # its --item_counts and --work_dir
from socialrm_jax.base import tables
from socialrm_jax.main import command
from socialrm_jax.orchestrators import convert
from socialrm_jax.orchestrators.audit import BUNDLED_DATA

flags.adopt_module_key_flags(scoring_memory)  # --item_counts, --work_dir
flags.FLAGS.set_default("item_counts", ["10000", "1000000"])
_N_RESAMPLES = flags.DEFINE_integer("n_resamples", 1000, "The metrics' bootstrap resamples.")
_STEP_COUNTS = flags.DEFINE_list("step_counts", [], "Item counts for the counterfactual step "
                                 "alone, with synthetic rewards (e.g. 10000,1000000); --item_counts= skips the whole audits.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the synthetic rewards.")
_MODEL_SIZE = flags.DEFINE_enum("model_size", "micro", ["micro", "tiny"],
                                "The random Llama's shape (gpu_throughput_presets.SIZES).")

BBQ = BUNDLED_DATA / "bbq" / "data"
# Scoring settings of the audit's one model: short rows for a tiny model on a CPU.
SCORING = "max_length=512,tokens_per_batch=4096,chunk_size=1024"


def write_bbq(folder: pathlib.Path, n: int) -> None:
  """N distinct BBQ records into `folder`/bbq/data, the bundled rows in turn, numbered."""
  files = sorted(BBQ.glob("*.jsonl"))
  rows = [(f.name, json.loads(line)) for f in files for line in f.read_text().splitlines()
          if line.strip()]
  target = folder / "bbq" / "data"
  target.mkdir(parents=True, exist_ok=True)
  outputs = {name: open(target / name, "w", encoding="utf-8") for name in {r[0] for r in rows}}
  try:
    for i in range(n):
      name, row = rows[i % len(rows)]
      row = {**row, "example_id": i, "context": f"({i}) {row['context']}"}
      outputs[name].write(json.dumps(row) + "\n")
  finally:
    for f in outputs.values():
      f.close()


SCORES_SCHEMA = pa.schema([("item_id", pa.string()), ("candidate", pa.int32()),
                           ("reward", pa.float64())])


def write_synthetic_scores(items: pathlib.Path, path: pathlib.Path, seed: int) -> None:
  """A scores table for every candidate of the items table at `items`: seeded random rewards."""
  rng = np.random.default_rng(seed)
  with tables.TableWriter(path, "parquet", SCORES_SCHEMA) as writer:
    for item in tables.iter_rows(items, "items", ["item_id", "candidates"]):
      rewards = rng.standard_normal(len(item["candidates"])).tolist()
      writer.add([{"item_id": item["item_id"], "candidate": c, "reward": r}
                  for c, r in enumerate(rewards)])


def counterfactual_step(work: pathlib.Path, n: int) -> dict:
  """Peak RSS of the counterfactual step's two children on `n` items, synthetic rewards."""
  data = work / f"audit-data-{n}"
  if not (data / "bbq" / "data").exists():
    write_bbq(data, n)
  step = work / f"step-{n}"
  converted, swaps = step / "converted", step / "counterfactuals"
  if not (converted / "items.parquet").exists():
    convert.convert_to(converted, data, ["bbq"])
  if not (step / "scores.parquet").exists():
    write_synthetic_scores(converted, step / "scores.parquet", _SEED.value)
  derive_rss, derive_seconds = peak_rss_mib([
      sys.executable, "-m", "socialrm_jax.main.counterfactuals", f"--items={converted}",
      f"--output_dir={swaps}"])
  if not (step / "swap_scores.parquet").exists():
    write_synthetic_scores(swaps, step / "swap_scores.parquet", _SEED.value + 1)
  measure = ("from socialrm_jax.analysis import dataset_analysis; "
             "from socialrm_jax.analysis.studies import swap_effects; "
             f"swap_effects.compute_at("
             f"{str(swaps)!r}, {str(step / 'scores.parquet')!r}, "
             f"{str(step / 'swap_scores.parquet')!r}, dataset_analysis.Options(n_resamples="
             f"{_N_RESAMPLES.value}))")
  measure_rss, measure_seconds = peak_rss_mib([sys.executable, "-c", measure])
  report = json.loads((swaps / "swap_report.json").read_text())
  return {"items": n, "swapped_items": report["generated_items"], "links": report["records"],
          "derive_peak_rss_mib": round(derive_rss, 1), "derive_seconds": round(derive_seconds, 1),
          "peak_rss_mib": round(measure_rss, 1), "measure_seconds": round(measure_seconds, 1)}


def main(argv):
  del argv
  work = pathlib.Path(flags.FLAGS.work_dir)
  counts = [int(n) for n in flags.FLAGS.item_counts]
  if _STEP_COUNTS.value:
    steps = []
    for n in (int(n) for n in _STEP_COUNTS.value):
      steps.append(counterfactual_step(work, n))
      print(json.dumps(steps[-1]), flush=True)
    print("\nThe counterfactual step alone (synthetic rewards); the ratio is the swap measures'")
    print_table(steps, {
        "items": "items", "swapped_items": "swapped items", "links": "links",
        "derive_peak_rss_mib": "derive: peak RSS MiB", "derive_seconds": "s",
        "peak_rss_mib": "measures: peak RSS MiB", "measure_seconds": "s"})
    print_peak_ratio(steps)
    print_peak_ratio(steps, "derive_peak_rss_mib", "derivation's ")
  if counts:
    audits(work, counts)


def audits(work: pathlib.Path, counts: list[int]) -> None:
  """The whole audit on each count of items, with the tiny model: one table."""
  corpus_items = convert.convert_all(BUNDLED_DATA, ["bbq"]).items
  model = gpu_throughput_inputs.build_model(_MODEL_SIZE.value,
                                            gpu_throughput_inputs.corpus(corpus_items),
                                            work / "models")
  rows = []
  for n in counts:
    data = work / f"audit-data-{n}"
    if not (data / "bbq" / "data").exists():
      write_bbq(data, n)
    out = work / f"audit-{n}"
    shutil.rmtree(out, ignore_errors=True)
    rss, seconds = peak_rss_mib([
        sys.executable, "-m", "socialrm_jax.main.audit",
        f"--config={REPO / 'configs' / 'bundled_suite.py'}:hf_model={model},name=rm,"
        f"output_dir={out}", f"--config.data_dir={data}", "--config.datasets=bbq",
        "--config.probe.enabled=False", f"--config.metrics.n_resamples={_N_RESAMPLES.value}",
        *[f"--config.models.rm.{setting}" for setting in SCORING.split(",")]])
    swaps = json.loads((out / "counterfactuals" / "swap_report.json").read_text())
    counterfactual = json.loads((out / "rm" / "counterfactual.json").read_text())
    rows.append({"items": n, "swapped_items": swaps["generated_items"],
                 "links": counterfactual["datasets"]["bbq"]["n_links"],
                 "peak_rss_mib": round(rss, 1), "wall_seconds": round(seconds, 1)})
    print(json.dumps(rows[-1]), flush=True)
  print_table(rows, {"items": "items", "swapped_items": "swapped items", "links": "links",
                     "peak_rss_mib": "peak RSS MiB", "wall_seconds": "wall s"})
  print_peak_ratio(rows)


if __name__ == "__main__":
  command.run_command("benchmarks.statistics.audit_memory", main)
