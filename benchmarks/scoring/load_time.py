"""How long a user waits for a model: `load_reward_model` against transformers' `from_pretrained`,
each a whole process (start, import, load, the first batch's rewards), alternating, several runs.

  python -m benchmarks.scoring.load_time --model=DIR [--dtype=bfloat16] [--runs=3] [--device=cpu|gpu]
      [--page_cache=warm|cold] [--first_batch] [--batch_rows=2 --batch_length=64]

Per run and loader, two processes (ours three): one that loads and exits (the load alone, timed from after the
imports and the framework's start, JAX's backends found as torch's are in `import torch`: its
seconds, the process's CPU seconds, the peak RSS over what it held then, i.e. the load's own memory,
and for ours the bytes read from the checkpoint's files, `SafetensorsSource.bytes_read`), and one
timed from its start to the first batch's rewards (--batch_rows x --batch_length tokens; ours
compiles that batch's program from the model's abstract twin while the weights load,
`load_reward_model(while_loading=...)`, into JAX's persistent compilation cache as the commands
do: once into an empty one, then again reading what the first left, as every later run of the
shape does; transformers runs eagerly; of the first, what ours waited for its program after the
load, and the seconds of each loader's forward). Then the medians side by side, and what new memory of
the model's size costs this machine, populated as our loader's buffers are in a process of its
own: the floor under our load, which writes the model into memory the process did not hold
(a VM's host may hand such pages over slowly), where transformers keeps bfloat16 weights as
views of the page cache. A random-weight model of a real shape comes from gpu_throughput's
builder:

  python -c "import pathlib; from benchmarks.gpu.gpu_throughput_inputs import build_model; \
      print(build_model('1b', ['a b c'], pathlib.Path('/tmp/loadbench')))"
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import tempfile
import time

from absl import flags

from benchmarks.common import child_env, cpu_name, module_command
from socialrm_jax.base.errors import InputError
from socialrm_jax.main import command

_MODEL = flags.DEFINE_string("model", None, "A HF reward-model folder.", required=True)
_DTYPE = flags.DEFINE_enum("dtype", "bfloat16", ["float32", "bfloat16"], "Load dtype.")
_RUNS = flags.DEFINE_integer("runs", 3, "Runs of each loader, alternating.")
_DEVICE = flags.DEFINE_enum("device", "cpu", ["cpu", "gpu"], "Where the weights go.")
_ROWS = flags.DEFINE_integer("batch_rows", 2, "Rows of the first batch.")
_LENGTH = flags.DEFINE_integer("batch_length", 64, "Tokens of each of its rows.")
_PAGE_CACHE = flags.DEFINE_enum(
    "page_cache", "warm", ["warm", "cold"], "Before each process: warm = the checkpoint's files "
    "read once, so the load reads the page cache (what the loader itself costs); cold = the page "
    "cache dropped (root only), so it reads the disk.")
_FIRST_BATCH = flags.DEFINE_bool(
    "first_batch", True, "Also time each loader to its first batch's rewards, as a process of "
    "its own (ours compiling while the weights load): the load alone is timed in a process that "
    "compiles nothing beside it.")
_CHILD = flags.DEFINE_enum("child", None, ["ours", "transformers", "memory"],
                           "(internal) load and exit; memory: time new memory of the model's size.")
_CHILD_BATCH = flags.DEFINE_bool("child_batch", False, "(internal) the child scores a batch.")
_CHILD_CACHE = flags.DEFINE_string("child_cache", "", "(internal) the child's compilation cache.")


def _rss_mib() -> float:
  """This process's resident memory now (/proc/self/statm), MiB."""
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(loader: str, model: str, dtype: str, device: str, rows: int, length: int,
          first_batch: bool, cache_dir: str) -> None:
  import numpy as np
  ids = (np.arange(rows * length).reshape(rows, length) % 200 + 3).astype(np.int32)
  mask = np.ones_like(ids)
  bytes_read, waited, forward = None, None, None
  if loader == "ours":
    import jax
    from flax import nnx
    from socialrm_jax.models import weights
    from socialrm_jax.models.reward_model import load_reward_model
    from socialrm_jax.runtime import compilation_cache
    compilation_cache.enable(cache_dir)  # as every command does (`--compilation_cache`)
    opened = []  # the checkpoint's sources, for the bytes they read
    init = weights.SafetensorsSource.__init__
    weights.SafetensorsSource.__init__ = lambda self, *a: (init(self, *a), opened.append(self))[0]
    jax.devices()  # JAX's start (finding its backends, loading their plugins), as `import torch`
    imported, rss_imported = time.perf_counter(), _rss_mib()
    loaded = load_reward_model(
        model, dtype=dtype,
        while_loading=(lambda twin: twin.precompile(rows, length)) if first_batch else None)
    jax.block_until_ready(jax.tree.leaves(nnx.state(loaded.module)))
    loaded_at = time.perf_counter()
    load = loaded_at - imported
    rewards = np.zeros(2)
    if first_batch:
      program = loaded._programs.get((rows, length))  # none for a gated head
      if program is not None:
        program.result()  # compiled beside the load
      ready_at = time.perf_counter()
      waited = ready_at - loaded_at
      rewards = np.asarray(loaded(ids, mask))
      forward = time.perf_counter() - ready_at
    bytes_read = sum(source.bytes_read for source in opened)
  else:
    import torch
    import transformers
    imported, rss_imported = time.perf_counter(), _rss_mib()
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    net = transformers.AutoModelForSequenceClassification.from_pretrained(
        model, dtype=torch_dtype, local_files_only=True)
    target = "cuda" if device == "gpu" else "cpu"
    if device == "gpu":
      net = net.to(target)
      torch.cuda.synchronize()
    load = time.perf_counter() - imported
    rewards = np.zeros(2)
    if first_batch:
      start = time.perf_counter()
      with torch.no_grad():
        rewards = net(input_ids=torch.tensor(ids, device=target),
                      attention_mask=torch.tensor(mask, device=target)).logits.float().cpu().numpy()
      forward = time.perf_counter() - start
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
  print(json.dumps({"first_rewards_at": time.time(), "load": load, "waited": waited,
                    "forward": forward,
                    "load_rss_mib": peak - rss_imported, "bytes_read": bytes_read,
                    "rewards": rewards.reshape(-1)[:2].tolist()}))


def fresh_memory(size: int) -> None:
  """Prints the seconds to populate `size` bytes of new anonymous memory as our loader's buffers
  are (`weights._host_buffer`, on as many threads): the floor under a load that writes the model
  into memory the process did not have, which transformers' bfloat16 views of the page cache skip."""
  import concurrent.futures
  from socialrm_jax.models import weights
  with concurrent.futures.ThreadPoolExecutor(weights._READ_THREADS) as pool:
    start = time.perf_counter()
    weights._host_buffer((size,), "uint8", pool)
    print(json.dumps({"seconds": time.perf_counter() - start}))


def _page_cache(mode: str) -> None:
  """The checkpoint's files in the page cache (`warm`) or out of it (`cold`)."""
  if mode == "cold":
    os.sync()
    try:
      with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1")
    except OSError as e:
      raise SystemExit(f"--page_cache=cold: cannot drop the page cache ({e}); run as root")
    return
  for name in os.listdir(_MODEL.value):
    if name.endswith(".safetensors"):
      with open(os.path.join(_MODEL.value, name), "rb") as f:
        while f.read(1 << 26):
          pass


def timed(loader: str, first_batch: bool, cache_dir: str = "") -> dict:
  _page_cache(_PAGE_CACHE.value)
  env = child_env({"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}
                  if _DEVICE.value == "cpu" else {})
  start, started_at = time.perf_counter(), time.time()
  process = subprocess.Popen([*module_command("benchmarks.scoring.load_time"), f"--child={loader}",
                              f"--model={_MODEL.value}", f"--dtype={_DTYPE.value}",
                              f"--device={_DEVICE.value}", f"--batch_rows={_ROWS.value}",
                              f"--batch_length={_LENGTH.value}", f"--child_batch={first_batch}",
                              f"--child_cache={cache_dir}"],
                             env=env,
                             stdout=subprocess.PIPE, text=True)
  out, _ = process.communicate()
  wall = time.perf_counter() - start
  if process.returncode:
    raise SystemExit(f"{loader} exited {process.returncode}")
  inner = json.loads(out.strip().splitlines()[-1])
  return {"wall": wall, "first_rewards": inner.pop("first_rewards_at") - started_at, **inner}


def main(argv):
  del argv
  if _CHILD.value == "memory":
    fresh_memory(_checkpoint_bytes())
    return
  if _CHILD.value:
    child(_CHILD.value, _MODEL.value, _DTYPE.value, _DEVICE.value, _ROWS.value, _LENGTH.value,
          _CHILD_BATCH.value, _CHILD_CACHE.value)
    return
  checkpoint = _checkpoint_bytes()
  results: dict[str, list[dict]] = {"ours": [], "transformers": []}
  for run in range(_RUNS.value):
    for loader in results:
      r = _timed_cpu(loader, first_batch=False)
      if _FIRST_BATCH.value:
        # Ours twice: compiling into an empty compilation cache (a shape's first run), then
        # reading what that left there (every later run of the shape).
        with tempfile.TemporaryDirectory() as cache:
          cold = _timed_cpu(loader, True, cache)
          r.update({key: cold[key] for key in ("first_rewards", "waited", "forward")})
          if loader == "ours":  # transformers compiles nothing to cache
            r["cached"] = _timed_cpu(loader, True, cache)["first_rewards"]
      results[loader].append(r)
      parts = []
      if _FIRST_BATCH.value:
        parts.append(f"first rewards {r['first_rewards']:6.2f} s"
                     + (f" ({r['cached']:6.2f} s cached)" if "cached" in r else ""))
        if r["waited"] is not None:
          parts.append(f"compile wait {r['waited']:5.2f} s")
        parts.append(f"forward {r['forward']:5.2f} s")
      parts += [f"load {r['load']:6.2f} s", f"CPU {r['cpu']:6.1f} s",
                f"load RSS {r['load_rss_mib']:6.0f} MiB"]
      print(f"run {run + 1} {loader:<12} " + ", ".join(parts), flush=True)
  memory = [_fresh_memory_seconds() for _ in range(_RUNS.value)]
  print(f"\n{_DTYPE.value} on {_DEVICE.value} ({cpu_name()}); {os.path.basename(_MODEL.value)}: "
        f"{checkpoint / 2**20:,.0f} MiB of safetensors, page cache {_PAGE_CACHE.value}; medians "
        f"of {_RUNS.value} whole processes" + (
            f"; a first batch of {_ROWS.value} x {_LENGTH.value} tokens" if _FIRST_BATCH.value
            else ""))
  print(f"{'loader':<32} {'first rewards s':>15} {'cached s':>8} {'compile wait s':>14} "
        f"{'forward s':>9} {'load s':>7} {'CPU s':>6} {'load RSS MiB':>12} {'read MiB':>9}")
  titles = {"ours": "socialrm_jax load_reward_model", "transformers": "transformers from_pretrained"}
  for loader, runs in results.items():
    median = lambda key: statistics.median(r[key] for r in runs)
    read = runs[0]["bytes_read"]
    cells = [f"{'-':>15}", f"{'-':>8}", f"{'-':>14}", f"{'-':>9}"]
    if _FIRST_BATCH.value:
      cells[0], cells[3] = f"{median('first_rewards'):>15.2f}", f"{median('forward'):>9.2f}"
      if loader == "ours":  # transformers compiles nothing
        cells[1], cells[2] = f"{median('cached'):>8.2f}", f"{median('waited'):>14.2f}"
    first = " ".join(cells)
    print(f"{titles[loader]:<32} {first} {median('load'):>7.2f} {median('cpu'):>6.1f} "
          f"{median('load_rss_mib'):>12,.0f} "
          f"{'-' if read is None else f'{read / 2**20:,.0f}':>9}")
  ours, theirs = (statistics.median(r["load"] for r in results[k]) for k in results)
  print(f"load: ours {ours / theirs:.2f}x transformers'")
  print(f"new memory of the model's size, populated as our loader's buffers are (a process of its "
        f"own, medians of {_RUNS.value}): {statistics.median(memory):.2f} s, "
        f"{checkpoint / statistics.median(memory) / 2**30:.2f} GiB/s")


def _checkpoint_bytes() -> int:
  """The bytes of --model's safetensors files."""
  names = (sorted(n for n in os.listdir(_MODEL.value) if n.endswith(".safetensors"))
           if os.path.isdir(_MODEL.value) else [])
  if not names:
    raise InputError("--model: not a folder of safetensors files", _MODEL.value)
  return sum(os.path.getsize(os.path.join(_MODEL.value, n)) for n in names)


def _fresh_memory_seconds() -> float:
  out = subprocess.run([*module_command("benchmarks.scoring.load_time"), "--child=memory",
                        f"--model={_MODEL.value}"], env=child_env({"JAX_PLATFORMS": "cpu"}),
                       stdout=subprocess.PIPE, text=True, check=True).stdout
  return json.loads(out.strip().splitlines()[-1])["seconds"]


def _timed_cpu(loader: str, first_batch: bool, cache_dir: str = "") -> dict:
  before = os.times()
  r = timed(loader, first_batch, cache_dir)
  after = os.times()
  r["cpu"] = (after.children_user - before.children_user) + (
      after.children_system - before.children_system)
  return r


if __name__ == "__main__":
  command.run_command("benchmarks.scoring.load_time", main)
