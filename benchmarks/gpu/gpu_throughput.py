"""Whole-process scoring throughput: this project against a RewardBench-style PyTorch loop.

On a GPU machine, through the device tool. Its python3 (3.12) has jax 0.11.2 CUDA, flax, optax,
orbax, transformers, tokenizers, torch, safetensors, pyarrow and absl-py, but not gguf, which
scoring imports (item_tokens -> models.gguf_import); ml_collections (the audit's configs only) and
HF `datasets` (never imported) are not needed. Once, here, in the repo root (`/.whl/` is
git-ignored; the data is copied in because only the checkout travels, about 15 MB):

  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux2014_x86_64 -d .whl gguf==0.19.0
  mkdir -p .whl/data && cp -r ../shared/data/{bbq,hh_rlhf,xstest,crows_pairs} .whl/data/

then one device `run` per preset, with carry=[".whl"] and timeout_s=600, this command on one line
(`--preset=8b` and `report-8b` for the 8B run):

  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit;
  D=../shared/data; [ -d $D/bbq ] || D=.whl/data; python3 -m benchmarks.gpu.gpu_throughput
  --preset=1b --data_dir=$D --work_dir=/tmp/gt 2>&1 | tee $OUT/log.txt;
  cp /tmp/gt/report-1b/* $OUT/

Presets (flags override any field; `--expect_pairs` guards the selection):
- `1b`: Llama 3.2 1B layers (1,038,684,160 parameters, 973,080,576 in matmuls), BBQ + HH-RLHF
  from the full data: 28,562 pairs (16,606 items). The issue's "BBQ + HH-RLHF harmless" is all of
  HH-RLHF: BBQ 23,912 + HH-RLHF 4,650 (2,307 harmless + 2,343 helpful); harmless alone would be
  26,219 (`--subsets=hh_rlhf:harmless --expect_pairs=26219`).
- `8b`: Llama 3.1 8B layers (7,110,664,192 parameters, 6,979,325,952 in matmuls), HH-RLHF 4,650
  + XSTest 972 + CrowS-Pairs 1,508 = 7,130 pairs (6,401 items).
- `cpu35m`: 35,267,584 parameters (hidden 512, 8 layers, 8 heads, 4 KV heads, intermediate 1024,
  32k vocabulary), the bundled BBQ + HH-RLHF suite: 300 pairs (180 items), float32 on CPU; a few
  minutes on 2 cores: `python -m benchmarks.gpu.gpu_throughput --preset=cpu35m`.
- `cpu35m_1500`: the same model on the first 500 BBQ and 500 HH-RLHF items of the full data
  (1,000 BBQ pairs, all Age, and 500 harmless HH-RLHF pairs: 1,500), float32 on CPU, the PyTorch
  loop in batches of 8: `--preset=cpu35m_1500 --data_dir=../shared/data`.
- `tiny`: 336,256 parameters, the first 3 bundled BBQ and HH-RLHF items (9 pairs), seconds on
  CPU; tests/end_to_end/test_gpu_throughput_benchmark.py runs it.

What it does, in one command:
1. converts `--datasets` (optionally `--subsets=hh_rlhf:harmless`, and the first `--limit` items of
   each dataset) from `--data_dir` into `WORK_DIR/items-<name>/` with
   `socialrm_jax.orchestrators.convert`; a preset names the selection and the pair count it
   must give (the issue's runs);
2. builds a random-weight Llama reward model (LlamaForSequenceClassification, num_labels=1) of a
   real shape, with numpy and safetensors only (fixed seed, std 0.02, norms 1, bf16, HF tensor
   names, config.json as transformers writes it) and a byte-level BPE tokenizer trained on the
   selection's text with a Llama-3-style chat template; cached in `WORK_DIR/models/`, keyed by
   size and corpus, so a rerun reuses it. `--model=DIR` scores an existing checkpoint instead;
3. times whole processes, start to exit, one after another: `python -m socialrm_jax.main.score`
   (cold: an empty XLA compilation cache; then, with `ours_warm`, again on the cache that run
   filled), and this script's own PyTorch loop (`--torch_child`, a subprocess) in dataset order
   and sorted by length: transformers' AutoModelForSequenceClassification with sdpa attention,
   chosen and rejected as separate sequences in right-padded batches of 64 (`--torch_batch`; a
   preset may set its own), reward = the HF head's logit at the last non-pad token;
4. prints one table and the score agreement (ours against the PyTorch loop on the same pairs),
   and writes `WORK_DIR/report-<name>/{results.json,table.txt}` and the runs' logs beside them.

Model FLOP/s = 2 x matmul parameters (the embedding table is a lookup) x real tokens / compute
seconds, where compute seconds are the PyTorch loop's timed forward passes, and for ours
run.json's `wall_seconds` less `compile_seconds` (when the engine reports it). Attention's own
FLOPs are not counted, so long rows read a little low. On a GPU it is printed as a fraction of
`--peak_tflops` (989: H100 SXM bf16 dense), on CPU as GFLOP/s.

On a CPU that other work shares, compare CPU seconds (the table's `CPU s` and `x (CPU s)`
columns), one core and one thread a process. On a 2-vCPU AMD EPYC (family 25 model 17: AVX-512,
AVX512-BF16, no AMX) under load, float32, the first 100 BBQ and 100 HH-RLHF items (300 pairs):

  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false \
  JAX_PLATFORMS=cpu taskset -c 1 python -m benchmarks.gpu.gpu_throughput --preset=cpu35m_1500 \
      --data_dir=../shared/data --limit=100 --expect_pairs=300 --runs=ours,torch,torch_sorted

  run                        CPU s  x torch (CPU s)  x sorted (CPU s)  tokens      CPU s / 1k tokens
  socialrm_jax (cold cache)   26.3             2.48              1.55  27,419      0.96
  PyTorch, dataset order      65.2             1.00              0.63  58,237 real 1.12 (0.70 a slot)
  PyTorch, sorted by length   40.8             1.60              1.00  58,237 real 0.70

With --dtype=bfloat16 (both sides): ours 25.4 CPU s (0.93 a 1k tokens), the dataset-order loop
38.3 (0.66 a 1k real tokens), the sorted loop 28.1 (0.48): 1.51x and 1.10x; our bf16 rewards
deviate from float32 by 0.0093 at most (std 0.243). docs/benchmarks_cpu.md has the wall times
and what the figures mean.

This file holds the command line and the order of the steps; beside it, one file per concern:
`gpu_throughput_presets.py` (model shapes, named runs), `gpu_throughput_inputs.py` (the items and
the random model), `gpu_throughput_runs.py` (timed processes, this project's run),
`gpu_throughput_torch.py` (the PyTorch loops) and `gpu_throughput_table.py` (rows, agreement,
report).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import time

from absl import app, flags

from benchmarks.common import REPO, log
from benchmarks.gpu.gpu_throughput_inputs import build_model, convert_items, corpus, model_params
from benchmarks.gpu.gpu_throughput_presets import PRESETS, RUNS, SIZES, TORCH_BATCH, Settings
from benchmarks.gpu.gpu_throughput_runs import Run, run_ours
from benchmarks.gpu.gpu_throughput_table import report
from benchmarks.gpu.gpu_throughput_torch import run_torch, torch_child

BUNDLED = REPO / "socialrm_jax" / "bundled"

_PRESET = flags.DEFINE_enum("preset", None, list(PRESETS), "A named run; flags below override it.")
_SIZE = flags.DEFINE_enum("size", None, list(SIZES), "Random model shape (default: the preset's).")
_MODEL = flags.DEFINE_string("model", None, "An existing HF reward-model folder to time instead "
                             "of a built one.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "One folder per dataset (default: the bundled "
                                "suite).")
_DATASETS = flags.DEFINE_list("datasets", None, "Datasets to convert (default: the preset's).")
_SUBSETS = flags.DEFINE_list("subsets", None, "Keep only these dataset:subset pairs, e.g. "
                             "hh_rlhf:harmless (datasets not named keep every subset).")
_LIMIT = flags.DEFINE_integer("limit", None, "First N items of each dataset.")
_EXPECT_PAIRS = flags.DEFINE_integer("expect_pairs", None, "Stop unless the selection has this "
                                     "many pairs (default: the preset's; 0: no check).")
_WORK_DIR = flags.DEFINE_string("work_dir", "runs/gpu_throughput", "Built models, converted "
                                "items, run outputs and the report.")
_RUNS = flags.DEFINE_list("runs", None, f"Which of {', '.join(RUNS)} to time (default: the "
                          "preset's).")
_DEVICE = flags.DEFINE_enum("device", "auto", ["auto", "gpu", "cpu"],
                            "auto: gpu when nvidia-smi is there and JAX_PLATFORMS is not cpu.")
_DTYPE = flags.DEFINE_enum("dtype", None, ["float32", "bfloat16"],
                           "Compute dtype of every run (default: bfloat16 on GPU, float32 on CPU).")
_MAX_LENGTH = flags.DEFINE_integer("max_length", None, "Ours: --max_length.")
_TOKENS_PER_BATCH = flags.DEFINE_integer("tokens_per_batch", None, "Ours: --tokens_per_batch.")
_SCORE_ARGS = flags.DEFINE_list("score_args", [], "More flags for socialrm_jax.main.score, e.g. "
                                "attention=cudnn.")
_TORCH_BATCH = flags.DEFINE_integer("torch_batch", None, "PyTorch loop: sequences a batch "
                                    f"(default: the preset's, else {TORCH_BATCH}).")
_PEAK_TFLOPS = flags.DEFINE_float("peak_tflops", 989.0, "Device peak for the compute dtype, "
                                  "TFLOP/s (989: H100 SXM bf16 dense).")
# Internal: the PyTorch loop, run by this script as a subprocess.
_TORCH_CHILD = flags.DEFINE_enum("torch_child", None, ["dataset", "sorted"],
                                 "(internal) run the PyTorch loop in this order and exit.")
_CHILD_ITEMS = flags.DEFINE_string("child_items", None, "(internal) converted items folder.")
_CHILD_OUTPUT = flags.DEFINE_string("child_output", None, "(internal) where the loop's JSON goes.")
_CHILD_DATE = flags.DEFINE_string("child_date", None, "(internal) date_string for the template.")


def _on_gpu(device: str) -> bool:
  if device != "auto":
    return device == "gpu"
  return shutil.which("nvidia-smi") is not None and os.environ.get("JAX_PLATFORMS") != "cpu"


def _pinned_date() -> str:
  """The date our templater passes to chat templates, so the PyTorch loop renders the same text."""
  from socialrm_jax.scoring import item_tokens  # Imports jax; only the parent needs it.
  return item_tokens.PINNED_DATE


def settings_from_flags() -> Settings:
  preset = PRESETS[_PRESET.value] if _PRESET.value else None
  if preset is None and not (_DATASETS.value and (_SIZE.value or _MODEL.value)):
    raise app.UsageError("pass --preset, or --datasets with --size or --model")

  def pick(flag, field, fallback=None):
    if flag.value is not None:
      return flag.value
    return getattr(preset, field) if preset else fallback

  runs = list(pick(_RUNS, "runs", RUNS))
  unknown = set(runs) - set(RUNS)
  if unknown:
    raise app.UsageError(f"unknown --runs {sorted(unknown)}; known: {', '.join(RUNS)}")
  # A preset's pair count holds for its own selection only.
  reselected = any(f.value is not None for f in (_DATASETS, _SUBSETS, _LIMIT))
  on_gpu = _on_gpu(_DEVICE.value)
  return Settings(
      name=_PRESET.value or "custom", size=pick(_SIZE, "size"),
      datasets=list(pick(_DATASETS, "datasets")), subsets=list(pick(_SUBSETS, "subsets", ())),
      limit=pick(_LIMIT, "limit"),
      data_dir=pathlib.Path(_DATA_DIR.value or (preset and preset.data_dir) or BUNDLED),
      expect_pairs=(pick(_EXPECT_PAIRS, "expect_pairs", 0)
                    if not reselected or _EXPECT_PAIRS.value is not None else 0),
      runs=runs, device="gpu" if on_gpu else "cpu",
      dtype=_DTYPE.value or ("bfloat16" if on_gpu else "float32"),
      max_length=pick(_MAX_LENGTH, "max_length", 2048),
      tokens_per_batch=pick(_TOKENS_PER_BATCH, "tokens_per_batch", 65536),
      torch_batch=pick(_TORCH_BATCH, "torch_batch", TORCH_BATCH),
      work_dir=pathlib.Path(_WORK_DIR.value).resolve())


def time_runs(s: Settings, model_dir: pathlib.Path, items_dir: pathlib.Path,
              run_dir: pathlib.Path) -> dict[str, Run]:
  """Each run in `s.runs`, one process after another; ours first starts on an empty cache."""
  date = _pinned_date() if {"torch", "torch_sorted"} & set(s.runs) else None
  cache_dir = run_dir / "xla_cache"
  done: dict[str, Run] = {}
  for run in s.runs:
    if run in ("ours", "ours_warm"):
      if run == "ours":
        shutil.rmtree(cache_dir, ignore_errors=True)
      cache_dir.mkdir(parents=True, exist_ok=True)
      done[run] = run_ours(run, model_dir, items_dir, run_dir, cache_dir, s.device, s.dtype,
                           s.max_length, s.tokens_per_batch, _SCORE_ARGS.value)
    else:
      order = "sorted" if run == "torch_sorted" else "dataset"
      done[run] = run_torch(run, order, model_dir, items_dir, run_dir, s.device, s.dtype,
                            s.torch_batch, date)
  return done


def benchmark(s: Settings) -> None:
  report_dir = s.work_dir / f"report-{s.name}"
  run_dir = s.work_dir / f"runs-{s.name}"
  for folder in (report_dir, run_dir):  # Nothing of an earlier run is reported as this one's.
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
  start = time.perf_counter()
  items_dir = s.work_dir / f"items-{s.name}"
  items, pairs = convert_items(s.data_dir, s.datasets, s.subsets, s.limit, items_dir)
  log(f"items: {len(items)} items, {len(pairs)} pairs from {s.data_dir} ({', '.join(s.datasets)}"
      f"{'; subsets ' + ','.join(s.subsets) if s.subsets else ''}"
      f"{'; first %d of each' % s.limit if s.limit else ''}) in "
      f"{time.perf_counter() - start:.1f} s")
  if s.expect_pairs and len(pairs) != s.expect_pairs:
    raise app.UsageError(
        f"preset {s.name} expects {s.expect_pairs:,} pairs, the selection has {len(pairs):,}: "
        "pass --data_dir=the full data (e.g. ../shared/data), or --expect_pairs=0 to time it "
        "anyway")
  if _MODEL.value:
    model_dir = pathlib.Path(_MODEL.value).resolve()
  else:
    model_dir = build_model(s.size, corpus(items), s.work_dir / "models")
  params, matmul_params = model_params(model_dir)
  log(f"model: {model_dir.name}: {params:,} parameters ({matmul_params:,} in matmuls), "
      f"{s.dtype} on {s.device}")
  done = time_runs(s, model_dir, items_dir, run_dir)
  print(report(s, items, pairs, model_dir, done, report_dir, _PEAK_TFLOPS.value), flush=True)
  log(f"report: {report_dir}")


def main(argv):
  del argv
  if _TORCH_CHILD.value:
    torch_child(_TORCH_CHILD.value, _MODEL.value, _CHILD_ITEMS.value, _CHILD_OUTPUT.value,
                _DEVICE.value if _DEVICE.value != "auto" else "cpu", _DTYPE.value or "float32",
                _TORCH_BATCH.value or TORCH_BATCH, _CHILD_DATE.value)
    return
  benchmark(settings_from_flags())


if __name__ == "__main__":
  app.run(main)
