"""How long a model takes to load: `load_reward_model` against transformers' `from_pretrained`,
each a whole process (start, import, load, the weights on the device), alternating, several runs.

  python -m benchmarks.scoring.load_time --model=DIR [--dtype=bfloat16] [--runs=3] [--device=cpu|gpu]

Prints each run's seconds (process wall, the load alone, user and system CPU seconds) and the
medians side by side. A random-weight model of a real shape comes from gpu_throughput's builder:

  python -c "import pathlib; from benchmarks.gpu.gpu_throughput_inputs import build_model; \
      print(build_model('1b', ['a b c'], pathlib.Path('/tmp/loadbench')))"
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time

from absl import flags

from benchmarks.common import child_env, module_command
from socialrm_jax.main import command

_MODEL = flags.DEFINE_string("model", None, "A HF reward-model folder.", required=True)
_DTYPE = flags.DEFINE_enum("dtype", "bfloat16", ["float32", "bfloat16"], "Load dtype.")
_RUNS = flags.DEFINE_integer("runs", 3, "Runs of each loader, alternating.")
_DEVICE = flags.DEFINE_enum("device", "cpu", ["cpu", "gpu"], "Where the weights go.")
_CHILD = flags.DEFINE_enum("child", None, ["ours", "transformers"], "(internal) load and exit.")


def child(loader: str, model: str, dtype: str, device: str) -> None:
  start = time.perf_counter()
  if loader == "ours":
    import jax
    from flax import nnx
    from socialrm_jax.models.reward_model import load_reward_model
    imported = time.perf_counter()
    loaded = load_reward_model(model, dtype=dtype)
    jax.block_until_ready(jax.tree.leaves(nnx.state(loaded.module)))
  else:
    import torch
    import transformers
    imported = time.perf_counter()
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    net = transformers.AutoModelForSequenceClassification.from_pretrained(
        model, dtype=torch_dtype, local_files_only=True)
    if device == "gpu":
      net = net.to("cuda")
      torch.cuda.synchronize()
  print(json.dumps({"import": imported - start, "load": time.perf_counter() - imported}))


def timed(loader: str) -> dict:
  env = child_env({"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}
                  if _DEVICE.value == "cpu" else {})
  start = time.perf_counter()
  process = subprocess.Popen([*module_command("benchmarks.scoring.load_time"), f"--child={loader}",
                              f"--model={_MODEL.value}", f"--dtype={_DTYPE.value}",
                              f"--device={_DEVICE.value}"], env=env, stdout=subprocess.PIPE,
                             text=True)
  out, _ = process.communicate()
  wall = time.perf_counter() - start
  if process.returncode:
    raise SystemExit(f"{loader} exited {process.returncode}")
  inner = json.loads(out.strip().splitlines()[-1])
  return {"wall": wall, **inner}


def main(argv):
  del argv
  if _CHILD.value:
    child(_CHILD.value, _MODEL.value, _DTYPE.value, _DEVICE.value)
    return
  results: dict[str, list[dict]] = {"ours": [], "transformers": []}
  for run in range(_RUNS.value):
    for loader in results:
      before = os.times()
      r = timed(loader)
      after = os.times()
      r["cpu"] = (after.children_user - before.children_user) + (
          after.children_system - before.children_system)
      results[loader].append(r)
      print(f"run {run + 1} {loader:<12} process {r['wall']:6.1f} s, load {r['load']:6.1f} s, "
            f"CPU {r['cpu']:6.1f} s", flush=True)
  print(f"\n{'loader':<28} {'process s':>9} {'load s':>7} {'CPU s':>6}   (medians of "
        f"{_RUNS.value}; {_DTYPE.value} on {_DEVICE.value}; {os.path.basename(_MODEL.value)})")
  titles = {"ours": "socialrm_jax load_reward_model", "transformers": "transformers from_pretrained"}
  for loader, runs in results.items():
    print(f"{titles[loader]:<28} {statistics.median(r['wall'] for r in runs):>9.1f} "
          f"{statistics.median(r['load'] for r in runs):>7.1f} "
          f"{statistics.median(r['cpu'] for r in runs):>6.1f}")


if __name__ == "__main__":
  command.run_command("benchmarks.scoring.load_time", main)
