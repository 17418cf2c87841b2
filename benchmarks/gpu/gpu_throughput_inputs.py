"""benchmarks/gpu/gpu_throughput.py's inputs: the selected items (converted with
`socialrm_jax.orchestrators.convert`), and a random-weight Llama reward model of a preset's
shape with a tokenizer trained on the items' text, written with numpy and safetensors only."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import time
import zlib
from typing import Any, Callable

import numpy as np
from absl import app

from benchmarks.common import log
from benchmarks.gpu.gpu_throughput_presets import SIZES, Size
from socialrm_jax.orchestrators import convert

WEIGHT_STD = 0.02         # HF's initializer_range for Llama.
SEED = 0
SHARD_BYTES = 2 << 30     # Safetensors shard size for big models (HF writes 5 GB ones).
BUILD_VERSION = 1         # Bumped when the built folder's contents change, so caches rebuild.

# Llama-3-style specials: the trainer gives them the first ids.
BOS, EOS, PAD = "<|begin_of_text|>", "<|eot_id|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", EOS, PAD]
CHAT_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}")


def select(converted: convert.Conversion, subsets: list[str], limit: int | None):
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
  converted = convert.convert_all(data_dir, datasets)
  items, pairs = select(converted, subsets, limit)
  report = {**converted.report, "selection": {"data_dir": str(data_dir), "datasets": datasets,
                                              "subsets": subsets, "limit": limit,
                                              "items": len(items), "pairs": len(pairs)}}
  convert.write(convert.Conversion(items, pairs, report), folder, "parquet")
  return items, pairs


def corpus(items: list[dict]) -> list[str]:
  """The texts the tokenizer learns from: every prompt turn and every candidate, in item order."""
  texts = []
  for item in items:
    texts += [m["content"] for m in item["prompt"]]
    texts += list(item["candidates"])
  return texts


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


def build_model(size_name: str, texts: list[str], models_dir: pathlib.Path, *,
                size: Size | None = None, chat_template: str = CHAT_TEMPLATE,
                tokenizer_of: Callable[[list[str], int], Any] | None = None) -> pathlib.Path:
  """The model folder for this size (`SIZES[size_name]`, or `size` named so) and corpus, with
  `chat_template` and the tokenizer `tokenizer_of(texts, vocab)` makes (default
  `train_tokenizer`), built once (a finished one holds build.json)."""
  size = size or SIZES[size_name]
  tokenizer_of = tokenizer_of or train_tokenizer
  digest = hashlib.sha256(json.dumps([BUILD_VERSION, SEED, dataclasses.asdict(size), texts,
                                      chat_template]).encode()).hexdigest()[:12]
  folder = models_dir / f"llama-{size_name}-{digest}"
  if (folder / "build.json").exists():
    log(f"model: reusing {folder}")
    return folder
  start = time.perf_counter()
  tmp = folder.with_name(folder.name + ".tmp")
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  tokenizer = tokenizer_of(texts, size.vocab)
  tokenizer.save(str(tmp / "tokenizer.json"))
  ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
  (tmp / "tokenizer_config.json").write_text(json.dumps({
      "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
      "pad_token": PAD, "chat_template": chat_template, "model_max_length": size.max_positions,
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
