"""Peak host memory of a scoring run: flat in the number of items and in --tokens_per_batch.

  JAX_PLATFORMS=cpu python -m benchmarks.scoring.scoring_memory [--item_counts=1000,100000] \
      [--budgets=16384,1000000000] [--work_dir=runs/gpu_throughput]

Builds the tiny random Llama reward model of `benchmarks/gpu/gpu_throughput.py` (numpy weights, a BPE
tokenizer trained on the items), writes N BBQ-like items (the bundled BBQ slice, each copy's
context numbered so no two items are alike), and runs `python -m socialrm_jax.main.score` as a child
process for every (items, tokens_per_batch) pair, reading the child's peak resident set size
(`ru_maxrss`) when it exits. Prints one table; the issue's bound is 1.5x between the smallest
and largest item counts, and between the default budget and 10^9.
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys

from absl import flags

from benchmarks.common import REPO, peak_rss_mib, print_peak_ratio, print_table
from benchmarks.gpu import gpu_throughput  # its flags
from benchmarks.gpu import gpu_throughput_inputs  # the model builder
from socialrm_jax.main import command
from socialrm_jax.orchestrators import convert
from socialrm_jax.base import tables
from socialrm_jax.scoring import engine

# Its --work_dir (where models are built) is this script's too: --help lists it.
flags.adopt_module_key_flags(gpu_throughput)
_ITEMS = flags.DEFINE_list("item_counts", ["1000", "100000"], "Item counts to score.")
_BUDGETS = flags.DEFINE_list("budgets", [str(engine.ScoringOptions.tokens_per_batch),
                                                  "1000000000"], "Token budgets to score with.")


def numbered_items(n: int) -> list[dict]:
  """`n` distinct items: the bundled BBQ slice over and over, each copy's context numbered."""
  base = convert.convert_all(REPO / "socialrm_jax" / "bundled", ["bbq"]).items
  items = []
  for i in range(n):
    item = copy.deepcopy(base[i % len(base)])
    item["item_id"] = f"{item['item_id']}#{i}"
    item["prompt"][0]["content"] = f"({i}) " + item["prompt"][0]["content"]
    items.append(item)
  return items


def main(argv):
  del argv
  work = pathlib.Path(flags.FLAGS.work_dir)  # gpu_throughput's flag: one place for built models
  counts = [int(n) for n in _ITEMS.value]
  largest = numbered_items(max(counts))
  model = gpu_throughput_inputs.build_model("tiny", gpu_throughput_inputs.corpus(largest[:200]),
                                            work / "models")
  rows = []
  for n in counts:
    items_dir = work / f"items-{n}"
    if not (items_dir / "items.parquet").exists():
      tables.write_rows(items_dir / "items.parquet", largest[:n], "parquet")
    for budget in _BUDGETS.value:
      out = work / f"scores-{n}-{budget}"
      if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
      rss, seconds = peak_rss_mib([
          sys.executable, "-m", "socialrm_jax.main.score", f"--model={model}", f"--items={items_dir}",
          f"--output_dir={out}", "--max_length=512", f"--tokens_per_batch={budget}",
          "--compilation_cache="])
      run = json.loads((out / "run.json").read_text())
      rows.append({"items": n, "tokens_per_batch": int(budget), "peak_rss_mib": round(rss, 1),
                   "wall_seconds": round(seconds, 1), "pairs_per_second":
                   round(run["pairs_per_second"], 1), "batches": run["batches"]})
      print(json.dumps(rows[-1]), flush=True)
  print_table(rows, {"items": "items", "tokens_per_batch": "tokens_per_batch",
                     "peak_rss_mib": "peak RSS MiB", "wall_seconds": "wall s",
                     "batches": "batches"})
  print_peak_ratio(rows)


if __name__ == "__main__":
  command.run_command("benchmarks.scoring.scoring_memory", main)
