"""benchmarks/gpu/gpu_throughput.py's presets: the random model shapes and the named runs, and the
choices of one benchmark (a preset, with flags given on the command line instead)."""

from __future__ import annotations

import dataclasses
import pathlib

TORCH_BATCH = 64          # RewardBench's default batch of sequences.
RUNS = ("ours", "ours_warm", "torch", "torch_sorted")
RUN_TITLES = {"ours": "socialrm_jax (cold cache)", "ours_warm": "socialrm_jax (warm cache)",
              "torch": "PyTorch, dataset order", "torch_sorted": "PyTorch, sorted by length"}


@dataclasses.dataclass(frozen=True)
class Size:
  hidden: int
  layers: int
  heads: int
  kv_heads: int
  intermediate: int
  vocab: int
  rope_factor: float | None = None  # Llama 3.1 RoPE scaling factor (None: plain RoPE).
  max_positions: int = 8192

  def matmul_params(self) -> int:
    """Weights that multiply every token: attention, MLP and the score head."""
    head_dim = self.hidden // self.heads
    attention = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * head_dim
    return self.layers * (attention + 3 * self.hidden * self.intermediate) + self.hidden

  def params(self) -> int:
    norms = (2 * self.layers + 1) * self.hidden
    return self.vocab * self.hidden + self.matmul_params() + norms


SIZES = {
    "tiny": Size(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=4096),
    # The audit memory benchmark's model (benchmarks/statistics/audit_memory.py): a million items to score
    # on a small CPU, where only the host's memory is measured.
    "micro": Size(hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, vocab=4096),
    "35m": Size(hidden=512, layers=8, heads=8, kv_heads=4, intermediate=1024, vocab=32000),
    # Llama 3.2 1B's and Llama 3.1 8B's layers, with a 32k vocabulary.
    "1b": Size(hidden=2048, layers=16, heads=32, kv_heads=8, intermediate=8192, vocab=32000,
               rope_factor=32.0, max_positions=131072),
    "8b": Size(hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336, vocab=32000,
               rope_factor=8.0, max_positions=131072),
}


@dataclasses.dataclass(frozen=True)
class Preset:
  size: str
  datasets: tuple[str, ...]
  expect_pairs: int            # What the selection must give from the data it is meant for.
  data_dir: str | None = None  # None: the bundled suite.
  subsets: tuple[str, ...] = ()
  limit: int | None = None     # First N items of each dataset.
  max_length: int = 2048       # The full data's longest templated sequence is 1,017 tokens.
  tokens_per_batch: int = 65536
  runs: tuple[str, ...] = RUNS
  torch_batch: int = TORCH_BATCH  # The PyTorch loop's sequences a batch.


PRESETS = {
    "tiny": Preset("tiny", ("bbq", "hh_rlhf"), expect_pairs=9, limit=3, max_length=1024,
                   tokens_per_batch=4096, runs=("ours", "torch", "torch_sorted")),
    "cpu35m": Preset("35m", ("bbq", "hh_rlhf"), expect_pairs=300, tokens_per_batch=8192),
    # The CPU comparison of issue 21: the first 500 items of BBQ (1,000 pairs, all Age) and of
    # HH-RLHF (500 harmless pairs) from the full data, against the PyTorch loop at batch 8;
    # ours at the CPU default batch (engine.CPU_BATCH_TOKENS).
    "cpu35m_1500": Preset("35m", ("bbq", "hh_rlhf"), expect_pairs=1_500, limit=500,
                          tokens_per_batch=16384, torch_batch=8),
    # The "BBQ + HH-RLHF harmless, 28,562 pairs" is BBQ (23,912) and all of HH-RLHF
    # (4,650 = 2,307 harmless + 2,343 helpful): harmless alone gives 26,219.
    "1b": Preset("1b", ("bbq", "hh_rlhf"), expect_pairs=28_562, tokens_per_batch=65536),
    # HH-RLHF 4,650 + XSTest 972 + CrowS-Pairs 1,508 = 7,130.
    # Without ours_warm: the 8B runs must fit one 10-minute device command.
    "8b": Preset("8b", ("hh_rlhf", "xstest", "crows_pairs"), expect_pairs=7_130,
                 tokens_per_batch=32768, runs=("ours", "torch", "torch_sorted")),
}


@dataclasses.dataclass(frozen=True)
class Settings:
  """One benchmark's choices: the preset's, with any flag given on the command line instead."""
  name: str
  size: str | None
  datasets: list[str]
  subsets: list[str]
  limit: int | None
  data_dir: pathlib.Path
  expect_pairs: int
  runs: list[str]
  device: str                  # "gpu" | "cpu"
  dtype: str
  max_length: int
  tokens_per_batch: int
  torch_batch: int
  work_dir: pathlib.Path
