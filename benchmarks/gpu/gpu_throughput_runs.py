"""benchmarks/gpu/gpu_throughput.py's runs, each a whole process timed from start to exit, and this
project's own: `python -m socialrm_jax.main.score` on the built model, and the rewards it wrote."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import sys

from benchmarks.common import REPO, child_env, timed_with_cpu
# The score command's flag for the persistent compilation cache folder, passed when score.py
# defines it; the environment variables below point every other spelling at the same fresh folder.
SCORE_CACHE_FLAG = "compilation_cache"
CACHE_ENV_VARS = ("JAX_COMPILATION_CACHE_DIR",)


@dataclasses.dataclass
class Run:
  name: str
  ok: bool
  process_seconds: float
  log: str
  info: dict
  cpu_seconds: float | None = None  # user + system, the process and its children


def _score_defines(flag: str) -> bool:
  """Whether socialrm_jax.main.score defines --flag (read from its source: no import, no jax)."""
  source = (REPO / "socialrm_jax" / "main" / "score.py").read_text()
  return f'"{flag}"' in source


def run_ours(name: str, model_dir: pathlib.Path, items_dir: pathlib.Path, run_dir: pathlib.Path,
             cache_dir: pathlib.Path, device: str, dtype: str, max_length: int,
             tokens_per_batch: int, extra_args: list[str]) -> Run:
  out_dir = run_dir / name
  shutil.rmtree(out_dir, ignore_errors=True)
  command = [sys.executable, "-m", "socialrm_jax.main.score", f"--model={model_dir}",
             f"--items={items_dir}", f"--output_dir={out_dir}", f"--dtype={dtype}",
             f"--max_length={max_length}", f"--tokens_per_batch={tokens_per_batch}"]
  if _score_defines(SCORE_CACHE_FLAG):
    command.append(f"--{SCORE_CACHE_FLAG}={cache_dir}")
  command += [f"--{arg}" for arg in extra_args]
  env = {var: str(cache_dir) for var in CACHE_ENV_VARS}
  # The engine's default cache lives under XDG_CACHE_HOME: keep it inside this run too.
  env["XDG_CACHE_HOME"] = str(cache_dir.parent / "xdg")
  if device == "cpu":
    env["JAX_PLATFORMS"] = "cpu"
  ok, seconds, cpu_seconds = timed_with_cpu(name, command, child_env(env),
                                            run_dir / f"{name}.log")
  info = {}
  if ok and (out_dir / "run.json").exists():
    info = json.loads((out_dir / "run.json").read_text())
  return Run(name, ok and bool(info), seconds, str(run_dir / f"{name}.log"),
             {**info, "output_dir": str(out_dir)}, cpu_seconds)


def our_rewards(out_dir: str) -> dict[tuple[str, int], tuple[float, int | None]]:
  """(item_id, candidate) -> (reward, sequence tokens if the shards record them)."""
  import pyarrow.parquet as pq
  out = {}
  for path in sorted(pathlib.Path(out_dir).glob("scores-*.parquet")):
    table = pq.read_table(path).to_pydict()
    lengths = table.get("sequence_tokens") or [None] * len(table["reward"])
    for item_id, candidate, reward, length in zip(table["item_id"], table["candidate"],
                                                  table["reward"], lengths):
      out[(str(item_id), int(candidate))] = (float(reward), length)
  return out
