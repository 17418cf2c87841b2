"""Whole-process scoring throughput: this project against a RewardBench-style PyTorch loop.

On a GPU machine, through the device tool. Its python3 (3.12) has jax 0.11.2 CUDA, flax, optax,
orbax, transformers, tokenizers, torch, safetensors, pyarrow and absl-py, but not gguf, which
scoring imports (templating -> models.gguf_import); ml_collections (the audit's configs only) and
HF `datasets` (never imported) are not needed. Once, here, in the repo root (`/.whl/` is
git-ignored; the data is copied in because only the checkout travels, about 15 MB):

  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux2014_x86_64 -d .whl gguf==0.19.0
  mkdir -p .whl/data && cp -r ../shared/data/{bbq,hh_rlhf,xstest,crows_pairs} .whl/data/

then one device `run` per preset, with carry=[".whl"] and timeout_s=600, this command on one line
(`--preset=8b` and `report-8b` for the 8B run):

  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit;
  D=../shared/data; [ -d $D/bbq ] || D=.whl/data; python3 benchmarks/gpu_throughput.py
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
  minutes on 2 cores: `python benchmarks/gpu_throughput.py --preset=cpu35m`.
- `cpu35m_1500`: the same model on the first 500 BBQ and 500 HH-RLHF items of the full data
  (1,000 BBQ pairs, all Age, and 500 harmless HH-RLHF pairs: 1,500), float32 on CPU, the PyTorch
  loop in batches of 8: `--preset=cpu35m_1500 --data_dir=../shared/data`.
- `tiny`: 336,256 parameters, the first 3 bundled BBQ and HH-RLHF items (9 pairs), seconds on
  CPU; tests/test_gpu_throughput_benchmark.py runs it.

What it does, in one command:
1. converts `--datasets` (optionally `--subsets=hh_rlhf:harmless`, and the first `--limit` items of
   each dataset) from `--data_dir` into `WORK_DIR/items-<name>/` with `socialrm_jax.orchestrators.item_tables`;
   a preset names the selection and the pair count it must give (the issue's runs);
2. builds a random-weight Llama reward model (LlamaForSequenceClassification, num_labels=1) of a
   real shape, with numpy and safetensors only (fixed seed, std 0.02, norms 1, bf16, HF tensor
   names, config.json as transformers writes it) and a byte-level BPE tokenizer trained on the
   selection's text with a Llama-3-style chat template; cached in `WORK_DIR/models/`, keyed by
   size and corpus, so a rerun reuses it. `--model=DIR` scores an existing checkpoint instead;
3. times whole processes, start to exit, one after another: `python -m socialrm_jax.main.score` (cold:
   an empty XLA compilation cache; then, with `ours_warm`, again on the cache that run filled),
   and this script's own PyTorch loop (`--torch_child`, a subprocess) in dataset order and sorted
   by length: transformers' AutoModelForSequenceClassification with sdpa attention, chosen and
   rejected as separate sequences in right-padded batches of 64
   (`--torch_batch`; a preset may set its own), reward = the HF head's logit at
   the last non-pad token;
4. prints one table and the score agreement (ours against the PyTorch loop on the same pairs),
   and writes `WORK_DIR/report-<name>/{results.json,table.txt}` and the runs' logs beside them.

Model FLOP/s = 2 x matmul parameters (the embedding table is a lookup) x real tokens / compute
seconds, where compute seconds are the PyTorch loop's timed forward passes, and for ours
run.json's `wall_seconds` less `compile_seconds` (when the engine reports it). Attention's own
FLOPs are not counted, so long rows read a little low. On a GPU it is printed as a fraction of
`--peak_tflops` (989: H100 SXM bf16 dense), on CPU as GFLOP/s.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import zlib

import numpy as np
from absl import app, flags

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python benchmarks/gpu_throughput.py` from a plain checkout.
  sys.path.insert(0, str(REPO))

from socialrm_jax.orchestrators import item_tables  # noqa: E402  (light: numpy and pyarrow only)
from socialrm_jax.base import tables  # noqa: E402  (light: numpy and pyarrow only)

BUNDLED = REPO / "socialrm_jax" / "bundled"
# The score command's flag for the persistent compilation cache folder, passed when score.py
# defines it; the environment variables below point every other spelling at the same fresh folder.
SCORE_CACHE_FLAG = "compilation_cache"
CACHE_ENV_VARS = ("JAX_COMPILATION_CACHE_DIR",)
TORCH_BATCH = 64          # RewardBench's default batch of sequences.
WEIGHT_STD = 0.02         # HF's initializer_range for Llama.
SEED = 0
SHARD_BYTES = 2 << 30     # Safetensors shard size for big models (HF writes 5 GB ones).
BUILD_VERSION = 1         # Bumped when the built folder's contents change, so caches rebuild.
RUNS = ("ours", "ours_warm", "torch", "torch_sorted")
RUN_TITLES = {"ours": "socialrm_jax (cold cache)", "ours_warm": "socialrm_jax (warm cache)",
              "torch": "PyTorch, dataset order", "torch_sorted": "PyTorch, sorted by length"}

# Llama-3-style specials: the trainer gives them the first ids.
BOS, EOS, PAD = "<|begin_of_text|>", "<|eot_id|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", EOS, PAD]
CHAT_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}")


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
    # The issue's "BBQ + HH-RLHF harmless, 28,562 pairs" is BBQ (23,912) and all of HH-RLHF
    # (4,650 = 2,307 harmless + 2,343 helpful): harmless alone gives 26,219.
    "1b": Preset("1b", ("bbq", "hh_rlhf"), expect_pairs=28_562, tokens_per_batch=65536),
    # HH-RLHF 4,650 + XSTest 972 + CrowS-Pairs 1,508 = 7,130.
    # Without ours_warm: the 8B runs must fit one 10-minute device command.
    "8b": Preset("8b", ("hh_rlhf", "xstest", "crows_pairs"), expect_pairs=7_130,
                 tokens_per_batch=32768, runs=("ours", "torch", "torch_sorted")),
}

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


def log(message: str) -> None:
  print(f"[gpu_throughput {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------------------------------------
# Items.

def select(converted: item_tables.Conversion, subsets: list[str], limit: int | None):
  """Items (and their pairs) of the named subsets, the first `limit` of each dataset."""
  keep_subsets: dict[str, set[str]] = {}
  for spec in subsets:
    dataset, _, subset = spec.partition(":")
    if not subset:
      raise app.UsageError(f"--subsets takes dataset:subset, got {spec!r}")
    keep_subsets.setdefault(dataset, set()).add(subset)
  items, taken = [], {}
  for item in converted.items:
    dataset = item["dataset"]
    if dataset in keep_subsets and item["subset"] not in keep_subsets[dataset]:
      continue
    if limit is not None and taken.get(dataset, 0) >= limit:
      continue
    taken[dataset] = taken.get(dataset, 0) + 1
    items.append(item)
  ids = {item["item_id"] for item in items}
  pairs = [pair for pair in converted.pairs if pair["item_id"] in ids]
  return items, pairs


def convert_items(data_dir: pathlib.Path, datasets: list[str], subsets: list[str],
                  limit: int | None, folder: pathlib.Path) -> tuple[list[dict], list[dict]]:
  converted = item_tables.convert_all(data_dir, datasets)
  items, pairs = select(converted, subsets, limit)
  report = {**converted.report, "selection": {"data_dir": str(data_dir), "datasets": datasets,
                                              "subsets": subsets, "limit": limit,
                                              "items": len(items), "pairs": len(pairs)}}
  item_tables.write(item_tables.Conversion(items, pairs, report), folder, "parquet")
  return items, pairs


def corpus(items: list[dict]) -> list[str]:
  """The texts the tokenizer learns from: every prompt turn and every candidate, in item order."""
  texts = []
  for item in items:
    texts += [m["content"] for m in item["prompt"]]
    texts += list(item["candidates"])
  return texts


# ---------------------------------------------------------------------------------------------
# A random-weight model folder, written with numpy and safetensors (no torch).

def train_tokenizer(texts: list[str], vocab_size: int):
  """A byte-level BPE learned from `texts` (deterministic: same texts, same merges)."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  tokenizer = Tokenizer(models.BPE())
  tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tokenizer.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tokenizer.train_from_iterator(texts, trainer, length=len(texts))
  return tokenizer


def hf_config(size: Size, bos_id: int, eos_id: int, pad_id: int) -> dict:
  """config.json as transformers 5 writes a LlamaForSequenceClassification's (with the older
  `rope_theta`/`rope_scaling` spellings beside `rope_parameters`, for older readers)."""
  rope_scaling = None if size.rope_factor is None else {
      "rope_type": "llama3", "factor": size.rope_factor, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
  return {
      "architectures": ["LlamaForSequenceClassification"], "attention_bias": False,
      "attention_dropout": 0.0, "bos_token_id": bos_id, "dtype": "bfloat16",
      "eos_token_id": eos_id, "head_dim": size.hidden // size.heads, "hidden_act": "silu",
      "hidden_size": size.hidden, "id2label": {"0": "LABEL_0"},
      "initializer_range": WEIGHT_STD, "intermediate_size": size.intermediate,
      "label2id": {"LABEL_0": 0}, "max_position_embeddings": size.max_positions,
      "mlp_bias": False, "model_type": "llama", "num_attention_heads": size.heads,
      "num_hidden_layers": size.layers, "num_key_value_heads": size.kv_heads,
      "pad_token_id": pad_id, "pretraining_tp": 1, "rms_norm_eps": 1e-5,
      "rope_parameters": {"rope_theta": 500000.0, **(rope_scaling or {"rope_type": "default"})},
      "rope_scaling": rope_scaling, "rope_theta": 500000.0, "tie_word_embeddings": False,
      "use_cache": False, "vocab_size": size.vocab,
  }


def tensor_shapes(size: Size) -> dict[str, tuple[int, ...]]:
  """HF's names and shapes for LlamaForSequenceClassification, in its state_dict order."""
  head_dim = size.hidden // size.heads
  kv = size.kv_heads * head_dim
  shapes = {"model.embed_tokens.weight": (size.vocab, size.hidden)}
  for i in range(size.layers):
    p = f"model.layers.{i}."
    shapes.update({
        p + "self_attn.q_proj.weight": (size.hidden, size.hidden),
        p + "self_attn.k_proj.weight": (kv, size.hidden),
        p + "self_attn.v_proj.weight": (kv, size.hidden),
        p + "self_attn.o_proj.weight": (size.hidden, size.hidden),
        p + "mlp.gate_proj.weight": (size.intermediate, size.hidden),
        p + "mlp.up_proj.weight": (size.intermediate, size.hidden),
        p + "mlp.down_proj.weight": (size.hidden, size.intermediate),
        p + "input_layernorm.weight": (size.hidden,),
        p + "post_attention_layernorm.weight": (size.hidden,),
    })
  shapes["model.norm.weight"] = (size.hidden,)
  shapes["score.weight"] = (1, size.hidden)
  return shapes


def random_tensor(name: str, shape: tuple[int, ...]) -> np.ndarray:
  """bf16 N(0, 0.02) (norms: ones), seeded by the name, so any thread order gives the same file."""
  import ml_dtypes  # Comes with jax; numpy has no bfloat16.
  if len(shape) == 1:
    return np.ones(shape, ml_dtypes.bfloat16)
  rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
  values = rng.standard_normal(shape, dtype=np.float32)
  values *= WEIGHT_STD
  # bf16 keeps float32's top 16 bits (truncation: any rounding serves random weights).
  return (values.view(np.uint32) >> 16).astype(np.uint16).view(ml_dtypes.bfloat16)


def write_weights(size: Size, folder: pathlib.Path) -> None:
  """model.safetensors, or HF-style shards with model.safetensors.index.json when over 2 GB."""
  from safetensors.numpy import save_file
  shapes = tensor_shapes(size)
  shards, current, current_bytes = [], [], 0
  for name, shape in shapes.items():
    nbytes = 2 * int(np.prod(shape))
    if current and current_bytes + nbytes > SHARD_BYTES:
      shards.append(current)
      current, current_bytes = [], 0
    current.append(name)
    current_bytes += nbytes
  shards.append(current)
  names = (["model.safetensors"] if len(shards) == 1 else
           [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
  weight_map = {}
  with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
    for file_name, shard in zip(names, shards):
      arrays = dict(zip(shard, pool.map(lambda n: random_tensor(n, shapes[n]), shard)))
      save_file(arrays, str(folder / file_name), metadata={"format": "pt"})
      weight_map.update({name: file_name for name in shard})
      del arrays
  if len(shards) > 1:
    total = sum(2 * int(np.prod(s)) for s in shapes.values())
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))


def build_model(size_name: str, texts: list[str], models_dir: pathlib.Path) -> pathlib.Path:
  """The model folder for this size and corpus, built once (a finished one holds build.json)."""
  size = SIZES[size_name]
  digest = hashlib.sha256(json.dumps([BUILD_VERSION, SEED, dataclasses.asdict(size), texts])
                          .encode()).hexdigest()[:12]
  folder = models_dir / f"llama-{size_name}-{digest}"
  if (folder / "build.json").exists():
    log(f"model: reusing {folder}")
    return folder
  start = time.perf_counter()
  tmp = folder.with_name(folder.name + ".tmp")
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  tokenizer = train_tokenizer(texts, size.vocab)
  tokenizer.save(str(tmp / "tokenizer.json"))
  ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
  (tmp / "tokenizer_config.json").write_text(json.dumps({
      "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
      "pad_token": PAD, "chat_template": CHAT_TEMPLATE, "model_max_length": size.max_positions,
      "clean_up_tokenization_spaces": False, "add_bos_token": False, "add_eos_token": False},
      indent=2))
  (tmp / "config.json").write_text(json.dumps(
      hf_config(size, ids[BOS], ids[EOS], ids[PAD]), indent=2, sort_keys=True))
  write_weights(size, tmp)
  (tmp / "build.json").write_text(json.dumps({
      "size": size_name, **dataclasses.asdict(size), "params": size.params(),
      "matmul_params": size.matmul_params(), "tokenizer_vocab": tokenizer.get_vocab_size(),
      "corpus_texts": len(texts), "seconds": round(time.perf_counter() - start, 1)}, indent=2))
  shutil.rmtree(folder, ignore_errors=True)
  tmp.rename(folder)
  log(f"model: built {folder} in {time.perf_counter() - start:.1f} s "
      f"(tokenizer: {tokenizer.get_vocab_size()} tokens)")
  return folder


def model_params(model_dir: pathlib.Path) -> tuple[int, int]:
  """(all, matmul) parameters, from the config's shapes (any Llama-like decoder)."""
  config = json.loads((model_dir / "config.json").read_text())
  hidden, heads = config["hidden_size"], config["num_attention_heads"]
  size = Size(hidden=hidden, layers=config["num_hidden_layers"], heads=heads,
              kv_heads=config.get("num_key_value_heads", heads),
              intermediate=config["intermediate_size"], vocab=config["vocab_size"])
  head_dim = config.get("head_dim") or hidden // heads
  if head_dim != hidden // heads:  # Rare (Gemma, Qwen3): count q/k/v/o from head_dim.
    attention = 2 * hidden * heads * head_dim + 2 * hidden * size.kv_heads * head_dim
    matmul = size.layers * (attention + 3 * hidden * size.intermediate) + hidden
    return size.params() - size.matmul_params() + matmul, matmul
  return size.params(), size.matmul_params()


# ---------------------------------------------------------------------------------------------
# The runs, each a whole process.

@dataclasses.dataclass
class Run:
  name: str
  ok: bool
  process_seconds: float
  log: str
  info: dict


def _child_env(extra: dict[str, str]) -> dict[str, str]:
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
  env.update(extra)
  return env


def timed(name: str, command: list[str], env: dict[str, str], log_path: pathlib.Path):
  """Runs `command` to its exit; returns (succeeded, seconds from start to exit)."""
  log(f"{name}: {' '.join(command)}")
  with open(log_path, "w") as out:
    start = time.perf_counter()
    code = subprocess.call(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    seconds = time.perf_counter() - start
  if code:
    tail = "".join(log_path.read_text(errors="replace").splitlines(True)[-25:])
    log(f"{name}: FAILED with exit code {code} after {seconds:.1f} s; log {log_path}:\n{tail}")
  else:
    log(f"{name}: {seconds:.1f} s")
  return code == 0, seconds


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
  ok, seconds = timed(name, command, _child_env(env), run_dir / f"{name}.log")
  info = {}
  if ok and (out_dir / "run.json").exists():
    info = json.loads((out_dir / "run.json").read_text())
  return Run(name, ok and bool(info), seconds, str(run_dir / f"{name}.log"),
             {**info, "output_dir": str(out_dir)})


def run_torch(name: str, order: str, model_dir: pathlib.Path, items_dir: pathlib.Path,
              run_dir: pathlib.Path, device: str, dtype: str, batch: int, date: str) -> Run:
  output = run_dir / f"{name}.json"
  output.unlink(missing_ok=True)
  command = [sys.executable, str(pathlib.Path(__file__).resolve()), f"--torch_child={order}",
             f"--model={model_dir}", f"--child_items={items_dir}", f"--child_output={output}",
             f"--device={device}", f"--dtype={dtype}", f"--torch_batch={batch}",
             f"--child_date={date}"]
  env = {"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}
  ok, seconds = timed(name, command, _child_env(env), run_dir / f"{name}.log")
  info = json.loads(output.read_text()) if ok and output.exists() else {}
  return Run(name, ok and bool(info), seconds, str(run_dir / f"{name}.log"), info)


def torch_child(order: str, model_dir: str, items_dir: str, output: str, device: str,
                dtype: str, batch: int, date: str) -> None:
  """A RewardBench-style loop: every pair's chosen and rejected, chat-templated, as separate
  sequences in right-padded batches of `batch` (dataset order: each batch of pairs' chosen, then
  their rejected, as RewardBench runs them; or all sequences sorted by length)."""
  marks = {"start": time.perf_counter()}
  import torch
  import transformers
  marks["imported"] = time.perf_counter()
  torch_device = "cuda" if device == "gpu" else "cpu"
  torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
  tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
  kwargs = {"device_map": torch_device} if torch_device == "cuda" else {}
  model, loading = transformers.AutoModelForSequenceClassification.from_pretrained(
      model_dir, dtype=torch_dtype, attn_implementation="sdpa", local_files_only=True,
      output_loading_info=True, **kwargs)
  model = model.to(torch_device).eval()
  pad_id = model.config.pad_token_id
  if pad_id is None:  # HF's head then pools at the last token unequal to this id.
    pad_id = tokenizer.pad_token_id
    pad_id = tokenizer.eos_token_id if pad_id is None else pad_id
    model.config.pad_token_id = pad_id
  if torch_device == "cuda":
    torch.cuda.synchronize()
  marks["loaded"] = time.perf_counter()

  pairs = tables.read_rows(items_dir, "pairs")

  def render(prompt, response):
    messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
    messages.append({"role": "assistant", "content": response})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False,
                                         date_string=date)

  texts = []  # Sequence 2p is pair p's chosen, 2p + 1 its rejected.
  for pair in pairs:
    texts += [render(pair["prompt"], pair["chosen"]), render(pair["prompt"], pair["rejected"])]
  ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
  lengths = np.array([len(x) for x in ids])
  if order == "sorted":
    sequence_order = list(np.argsort(lengths, kind="stable"))
  else:
    sequence_order = []
    for start in range(0, len(pairs), batch):
      block = range(start, min(start + batch, len(pairs)))
      sequence_order += [2 * p for p in block] + [2 * p + 1 for p in block]
  marks["tokenized"] = time.perf_counter()

  rewards = np.zeros(len(ids), np.float64)
  slots = 0
  with torch.inference_mode():
    for start in range(0, len(sequence_order), batch):
      rows = sequence_order[start:start + batch]
      width = int(max(lengths[r] for r in rows))
      input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
      mask = torch.zeros((len(rows), width), dtype=torch.long)
      for i, r in enumerate(rows):
        input_ids[i, :lengths[r]] = torch.tensor(ids[r])
        mask[i, :lengths[r]] = 1
      logits = model(input_ids=input_ids.to(torch_device),
                     attention_mask=mask.to(torch_device)).logits
      rewards[rows] = logits[:, 0].float().cpu().numpy()
      slots += len(rows) * width
  marks["scored"] = time.perf_counter()
  info = {
      "order": order, "device": torch_device, "dtype": dtype, "batch": batch,
      "device_name": torch.cuda.get_device_name() if torch_device == "cuda" else "cpu",
      "torch": torch.__version__, "transformers": transformers.__version__,
      "attn_implementation": model.config._attn_implementation,
      "missing_keys": sorted(loading.get("missing_keys", [])),
      "unexpected_keys": sorted(loading.get("unexpected_keys", [])),
      "mismatched_keys": [str(k) for k in loading.get("mismatched_keys", [])],
      "pairs": len(pairs), "sequences": len(ids), "real_tokens": int(lengths.sum()),
      "token_slots": slots, "padding_fraction": 1 - lengths.sum() / max(slots, 1),
      "seconds": {"import": marks["imported"] - marks["start"],
                  "load": marks["loaded"] - marks["imported"],
                  "tokenize": marks["tokenized"] - marks["loaded"],
                  "forward": marks["scored"] - marks["tokenized"]},
      "chosen": rewards[0::2].tolist(), "rejected": rewards[1::2].tolist(),
      "chosen_tokens": lengths[0::2].tolist(), "rejected_tokens": lengths[1::2].tolist(),
  }
  tables.atomic_write_json(output, info)


# ---------------------------------------------------------------------------------------------
# Agreement and the table.

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


def agreement(pairs: list[dict], ours: Run | None, torch_runs: list[Run]) -> dict:
  """Ours against each PyTorch loop (and the two loops against each other), over every pair's
  chosen and rejected: max |difference|, Pearson r, and how often the preferred side agrees.
  Sequences ours truncated (token counts differ) are left out and counted."""
  reference = {run.name: np.array([run.info["chosen"], run.info["rejected"]]).T
               for run in torch_runs}  # [P, 2]
  results = {}
  if ours is not None:
    rewards = our_rewards(ours.info["output_dir"])
    first = torch_runs[0] if torch_runs else None
    values, keep = np.zeros((len(pairs), 2)), np.ones((len(pairs), 2), bool)
    missing = 0
    for p, pair in enumerate(pairs):
      for side, key in enumerate(("chosen_index", "rejected_index")):
        found = rewards.get((str(pair["item_id"]), int(pair[key])))
        if found is None:
          keep[p, side], missing = False, missing + 1
          continue
        values[p, side] = found[0]
        tokens = first.info[("chosen_tokens", "rejected_tokens")[side]][p] if first else None
        if found[1] is not None and tokens is not None and int(found[1]) != int(tokens):
          keep[p, side] = False
    for run in torch_runs:
      results[f"ours vs {run.name}"] = _compare(values, reference[run.name], keep, missing)
  if len(torch_runs) == 2:
    a, b = torch_runs
    results[f"{a.name} vs {b.name}"] = _compare(reference[a.name], reference[b.name],
                                                np.ones((len(pairs), 2), bool), 0)
  return results


def _compare(a: np.ndarray, b: np.ndarray, keep: np.ndarray, missing: int) -> dict:
  both = keep.all(axis=1)
  x, y = a[keep], b[keep]
  diff = float(np.max(np.abs(x - y))) if x.size else None
  r = float(np.corrcoef(x, y)[0, 1]) if x.size > 1 and x.std() > 0 and y.std() > 0 else None
  same = np.sign(a[both, 0] - a[both, 1]) == np.sign(b[both, 0] - b[both, 1])
  return {"sequences": int(keep.sum()), "left_out": int((~keep).sum()) - missing,
          "missing": missing, "max_abs_diff": diff, "pearson_r": r,
          "same_preference": float(same.mean()) if both.any() else None}


def run_row(run: Run, pairs: int, matmul_params: int, on_gpu: bool, peak_tflops: float) -> dict:
  """One table row's values (None where the run does not say)."""
  info = run.info
  # A run that exits cleanly but scores fewer pairs than asked has no throughput to report.
  scored = info.get("pairs") if run.ok else None
  status = "FAILED" if not run.ok else ("ok" if scored == pairs else "INCOMPLETE")
  row = {"run": run.name, "title": RUN_TITLES[run.name], "ok": status == "ok", "status": status,
         "scored_pairs": scored, "process_seconds": run.process_seconds, "pairs": pairs,
         "pairs_per_second": pairs / run.process_seconds if status == "ok" else None}
  if status != "ok":
    return row
  if run.name.startswith("ours"):
    compile_seconds = info.get("compile_seconds")
    compute = info["wall_seconds"] - (compile_seconds or 0.0)
    row.update(real_tokens=info["tokens_computed"], token_slots=info.get("token_slots"),
               padding_fraction=info.get("padding_fraction"), compute_seconds=compute,
               scoring_seconds=info["wall_seconds"], compilations=info.get("compilations"),
               compile_seconds=compile_seconds,
               compilation_cache_hits=info.get("compilation_cache_hits"),
               truncated=info.get("truncated"), tokens_naive=info.get("tokens_naive"))
  else:
    seconds = info["seconds"]
    row.update(real_tokens=info["real_tokens"], token_slots=info["token_slots"],
               padding_fraction=info["padding_fraction"], compute_seconds=seconds["forward"],
               scoring_seconds=seconds["tokenize"] + seconds["forward"],
               load_seconds=seconds["load"], import_seconds=seconds["import"])
  row["tokens_per_pair"] = row["real_tokens"] / pairs if pairs else None
  flops = 2.0 * matmul_params * row["real_tokens"]
  row["flops_per_second"] = flops / row["compute_seconds"] if row["compute_seconds"] > 0 else None
  if on_gpu and row["flops_per_second"]:
    row["fraction_of_peak"] = row["flops_per_second"] / (peak_tflops * 1e12)
  return row


def _fmt(value, spec: str) -> str:
  return "n/a" if value is None else format(value, spec)


def table(rows: list[dict], on_gpu: bool) -> str:
  torch_rows = {r["run"]: r for r in rows if r["run"].startswith("torch") and r["ok"]}
  flops = "model FLOP/s (% peak)" if on_gpu else "model GFLOP/s"
  header = ["run", "pairs/s", "wall s", "x torch", "x torch sorted", "score s", "tokens/pair",
            "padding", "compilations", "compile s", "cache hits", flops]
  lines = [header]
  for r in rows:
    if not r["ok"]:
      lines.append([r["title"], r["status"], _fmt(r["process_seconds"], ".1f")] +
                   ["n/a"] * (len(header) - 3))
      continue
    ratios = [_fmt(r["pairs_per_second"] / torch_rows[t]["pairs_per_second"], ".2f")
              if t in torch_rows else "n/a" for t in ("torch", "torch_sorted")]
    if on_gpu:
      rate = (f"{r['flops_per_second'] / 1e12:.0f} T ({100 * r['fraction_of_peak']:.1f}%)"
              if r.get("fraction_of_peak") is not None else "n/a")
    else:
      rate = _fmt(r["flops_per_second"] and r["flops_per_second"] / 1e9, ".1f")
    lines.append([r["title"], _fmt(r["pairs_per_second"], ".1f"),
                  _fmt(r["process_seconds"], ".1f"), *ratios, _fmt(r["scoring_seconds"], ".1f"),
                  _fmt(r["tokens_per_pair"], ".1f"), _fmt(r["padding_fraction"], ".3f"),
                  _fmt(r.get("compilations"), "d"), _fmt(r.get("compile_seconds"), ".1f"),
                  _fmt(r.get("compilation_cache_hits"), "d"), rate])
  widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
  text = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                    for i, (cell, w) in enumerate(zip(line, widths))) for line in lines]
  text.insert(1, "  ".join("-" * w for w in widths))
  return "\n".join(text)


def agreement_lines(results: dict) -> list[str]:
  lines = []
  for name, r in results.items():
    extra = ""
    if r["left_out"] or r["missing"]:
      extra = f" ({r['left_out']} truncated sequences left out, {r['missing']} missing)"
    lines.append(f"agreement {name}: max |diff| {_fmt(r['max_abs_diff'], '.2e')}, "
                 f"pearson r {_fmt(r['pearson_r'], '.6f')}, same preference "
                 f"{_fmt(r['same_preference'], '.4f')} over {r['sequences']} sequences{extra}")
  return lines


# ---------------------------------------------------------------------------------------------

def _on_gpu(device: str) -> bool:
  if device != "auto":
    return device == "gpu"
  return shutil.which("nvidia-smi") is not None and os.environ.get("JAX_PLATFORMS") != "cpu"


def _pinned_date() -> str:
  """The date our templater passes to chat templates, so the PyTorch loop renders the same text."""
  from socialrm_jax.scoring import item_tokens  # Imports jax; only the parent needs it.
  return item_tokens.PINNED_DATE


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


def report(s: Settings, items: list[dict], pairs: list[dict], model_dir: pathlib.Path,
           done: dict[str, Run], report_dir: pathlib.Path) -> str:
  """The table and agreement as text; results.json, table.txt and the logs into `report_dir`."""
  on_gpu = s.device == "gpu"
  params, matmul_params = model_params(model_dir)
  device_name = next((r.info["device_name"] for r in done.values()
                      if r.ok and "device_name" in r.info), s.device)
  rows = [run_row(done[r], len(pairs), matmul_params, on_gpu, _PEAK_TFLOPS.value) for r in s.runs]
  torch_runs = [done[r] for r in ("torch", "torch_sorted") if r in done and done[r].ok]
  ours = done["ours"] if "ours" in done and done["ours"].ok else None
  agree = agreement(pairs, ours, torch_runs)
  loading = {r.name: {k: r.info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
             for r in torch_runs}
  header = [
      f"preset {s.name}: {len(pairs):,} pairs, {len(items):,} items ({', '.join(s.datasets)}) "
      f"from {s.data_dir}",
      f"model {model_dir.name}: {params:,} parameters ({matmul_params:,} in matmuls), {s.dtype}, "
      f"{device_name}; ours --max_length={s.max_length} --tokens_per_batch={s.tokens_per_batch}; "
      f"PyTorch batches of {s.torch_batch}, sdpa",
      "pairs/s and wall s: whole processes, start to exit; score s: inside the process "
      "(ours: run.json wall_seconds; PyTorch: tokenize + forward); x torch: pairs/s ratio",
      "model FLOP/s: 2 x matmul params x real tokens / compute s (ours: run.json wall_seconds "
      "less compile_seconds when reported; PyTorch: the forward loop)"]
  problems = [f"{r['title']}: {r['status']}: " + (
      f"scored {r['scored_pairs']} of {r['pairs']} pairs" if r["status"] == "INCOMPLETE" else
      "the process failed") + f" (log: {done[r['run']].log})" for r in rows if not r["ok"]]
  text = "\n".join(header + ["", table(rows, on_gpu), ""] + problems + agreement_lines(agree))
  for run_name, keys in loading.items():
    if any(keys.values()):
      text += f"\nWARNING {run_name}: transformers loaded the checkpoint with {keys}"
  (report_dir / "table.txt").write_text(text + "\n")
  per_sequence = ("chosen", "rejected", "chosen_tokens", "rejected_tokens")
  tables.atomic_write_json(report_dir / "results.json", {
      **{k: str(v) if isinstance(v, pathlib.Path) else v for k, v in dataclasses.asdict(s).items()},
      "pairs": len(pairs), "items": len(items), "model": str(model_dir), "params": params,
      "matmul_params": matmul_params, "device_name": device_name,
      "peak_tflops": _PEAK_TFLOPS.value, "rows": rows,
      "agreement": agree, "torch_loading": loading,
      "runs": {k: {kk: vv for kk, vv in v.info.items() if kk not in per_sequence}
               for k, v in done.items()}})
  for run in done.values():
    shutil.copy(run.log, report_dir / pathlib.Path(run.log).name)
  return text


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
  print(report(s, items, pairs, model_dir, done, report_dir), flush=True)
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
