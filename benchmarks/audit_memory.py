"""Peak host memory of a whole audit: flat in the number of items.

  JAX_PLATFORMS=cpu python benchmarks/audit_memory.py [--item_counts=10000,1000000] \
      [--work_dir=runs/gpu_throughput]

The scoring memory benchmark's method (`benchmarks/scoring_memory.py`) over the audit: for each
count N it writes a BBQ data folder of N distinct records (the bundled slice's rows over and over,
each copy's `example_id` renumbered and its context numbered, in the bundled category files),
builds the tiny random Llama reward model of `benchmarks/gpu_throughput.py` once, and runs
`python -m socialrm_jax.main.audit` on it as a child process: convert, score, derive and score
the counterfactual identity swaps, metrics with their bootstrap, the report (the value probe
off: it scores its own lexicon, whatever the items). It reads the child's peak resident set size
(`ru_maxrss`) when it exits and prints one table; the bound is 1.5x between the smallest and the
largest count.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys

from absl import app, flags

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_throughput_inputs  # pylint: disable=wrong-import-position  # the model builder
import scoring_memory  # pylint: disable=wrong-import-position  # its --item_counts, peak_rss_mib
from socialrm_jax.orchestrators import item_tables  # pylint: disable=wrong-import-position
from socialrm_jax.orchestrators.pipeline import BUNDLED_DATA  # pylint: disable=wrong-import-position

flags.adopt_module_key_flags(scoring_memory)  # --item_counts, --work_dir
flags.FLAGS.set_default("item_counts", ["10000", "1000000"])
_N_RESAMPLES = flags.DEFINE_integer("n_resamples", 1000, "The metrics' bootstrap resamples.")

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


def main(argv):
  del argv
  work = pathlib.Path(flags.FLAGS.work_dir)
  counts = [int(n) for n in flags.FLAGS.item_counts]
  corpus_items = item_tables.convert_all(BUNDLED_DATA, ["bbq"]).items
  model = gpu_throughput_inputs.build_model("tiny", gpu_throughput_inputs.corpus(corpus_items),
                                            work / "models")
  rows = []
  for n in counts:
    data = work / f"audit-data-{n}"
    if not (data / "bbq" / "data").exists():
      write_bbq(data, n)
    out = work / f"audit-{n}"
    shutil.rmtree(out, ignore_errors=True)
    rss, seconds = scoring_memory.peak_rss_mib([
        sys.executable, "-m", "socialrm_jax.main.audit",
        f"--config={REPO / 'configs' / 'bundled_suite.py'}:hf_model={model},name=tiny,"
        f"output_dir={out}", f"--config.data_dir={data}", "--config.datasets=bbq",
        "--config.probe.enabled=False", f"--config.metrics.n_resamples={_N_RESAMPLES.value}",
        *[f"--config.models.tiny.{setting}" for setting in SCORING.split(",")]])
    swaps = json.loads((out / "counterfactuals" / "swap_report.json").read_text())
    counterfactual = json.loads((out / "tiny" / "counterfactual.json").read_text())
    rows.append({"items": n, "swapped_items": swaps["generated_items"],
                 "links": counterfactual["datasets"]["bbq"]["n_links"],
                 "peak_rss_mib": round(rss, 1), "wall_seconds": round(seconds, 1)})
    print(json.dumps(rows[-1]), flush=True)
  scoring_memory.print_table(rows, {"items": "items", "swapped_items": "swapped items",
                                    "links": "links", "peak_rss_mib": "peak RSS MiB",
                                    "wall_seconds": "wall s"})


if __name__ == "__main__":
  app.run(main)
