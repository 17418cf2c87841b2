"""Read a llama.cpp GGUF file as a HuggingFace Llama checkpoint.

`read_gguf` turns the file's metadata into a `LlamaConfig`-style dict (architecture
`LlamaForCausalLM`) and exposes its tensors under HF names
(`model.layers.0.self_attn.q_proj.weight`, ...), dequantized to float32 one at a time when asked
for, in HF shapes, with llama.cpp's rotary row permutation of the q/k projections undone. The
decoder family then loads it exactly like a safetensors checkpoint.

GGUF facts this relies on:
- ggml lists dimensions fastest-first, so a GGUF shape is the HF (numpy) shape reversed; the
  reader's `data` is already laid out row-major in the HF order.
- llama.cpp's `convert_hf_to_gguf.py` permutes the rows of `attn_q` / `attn_k` within each head
  from HF's "rotate half" layout to interleaved pairs (`permute(w, n_head, n_head_kv)`);
  `_unpermute_rotary_rows` is its inverse (as in transformers' `LlamaTensorProcessor`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import re
from typing import Any, Iterable, NamedTuple

import gguf
import numpy as np
import tokenizers

from socialrm_jax.base.errors import InputError

GGUF_SUFFIX = ".gguf"
GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file
SUPPORTED_ARCHITECTURES = ("llama",)

_T = gguf.GGMLQuantizationType
# Every type here is checked against an independent reference in tests/models/test_gguf_import.py.
SUPPORTED_TENSOR_TYPES = (
    _T.F32, _T.F16, _T.BF16, _T.Q8_0, _T.Q4_0, _T.Q4_1, _T.Q5_0, _T.Q5_1, _T.Q4_K, _T.Q5_K,
    _T.Q6_K)

# GGUF tensor name (without `.weight` / `.bias`) -> HF module name.
_TOP_LEVEL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_TOP_LEVEL_TENSOR = re.compile(r"(\w+)\.(weight|bias)")
# llama.cpp's RoPE scaling types -> HF `rope_type`.
_ROPE_SCALING_TYPES = {"linear": "linear", "yarn": "yarn"}


@dataclasses.dataclass(frozen=True)
class GgufCheckpoint:
  hf_config: dict[str, Any]  # `LlamaConfig` form, as a config.json would hold it.
  tensors: GgufTensors  # HF tensor names -> float32 arrays in HF shapes.
  path: pathlib.Path  # the .gguf file itself (also what `gguf_tokenizer` takes).


def gguf_file_in(path: str | os.PathLike) -> pathlib.Path | None:
  """`path` itself if it is a .gguf file, the one .gguf file inside a folder, else None."""
  path = pathlib.Path(path)
  if path.is_file():
    return path if path.suffix == GGUF_SUFFIX else None
  if not path.is_dir():
    return None
  found = sorted(p for p in path.iterdir() if p.suffix == GGUF_SUFFIX and p.is_file())
  if len(found) > 1:
    raise InputError(
        "the folder holds several GGUF files (" + ", ".join(p.name for p in found)
        + "); pass the one to load as the model path", path)
  return found[0] if found else None


def _resolve_gguf_file(path: str | os.PathLike) -> pathlib.Path:
  found = gguf_file_in(path)
  if found is None:
    raise InputError("not a .gguf file nor a folder holding one", path)
  return found


def _unpermute_rotary_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
  """Inverse of llama.cpp's `permute`: interleaved rotary pairs back to HF's rotate-half rows."""
  half_head_dim = weight.shape[0] // n_head // 2
  rows = weight.reshape(n_head, half_head_dim, 2, *weight.shape[1:])  # [N, H/2, 2, ...]
  return rows.swapaxes(1, 2).reshape(weight.shape)  # [N*H, ...]


def _supported_type(tensor: gguf.ReaderTensor, path: str | os.PathLike) -> _T:
  tensor_type = _T(tensor.tensor_type)
  if tensor_type not in SUPPORTED_TENSOR_TYPES:
    raise InputError(
        f"tensor {tensor.name!r} has type {tensor_type.name}, which is not supported; supported: "
        + ", ".join(t.name for t in SUPPORTED_TENSOR_TYPES), path)
  return tensor_type


def _hf_shape(tensor: gguf.ReaderTensor) -> tuple[int, ...]:
  """A GGUF tensor's shape in HF (numpy, slowest-first) order."""
  return tuple(int(d) for d in reversed(tensor.shape))


def dequantize_tensor(tensor: gguf.ReaderTensor, path: str | os.PathLike) -> np.ndarray:
  """One GGUF tensor as a new float32 array in HF (numpy, slowest-first) shape."""
  tensor_type = _supported_type(tensor, path)
  values = gguf.quants.dequantize(tensor.data, tensor_type)
  # F32 comes back as a view of the memory-mapped file: copy so the array owns its data.
  return np.array(values, dtype=np.float32, copy=True).reshape(_hf_shape(tensor))


class GgufTensors:
  """HF-named tensors of a GGUF file, dequantized lazily (one per `get`).

  Satisfies the `TensorSource` protocol of `weights.py`. A quantized block spans a row, so a
  slice is cut from the whole dequantized tensor (these files are small).
  """

  def __init__(self, path: pathlib.Path, reader: gguf.GGUFReader, hf_to_gguf: dict[str, str],
               num_heads: int, num_kv_heads: int):
    self.path = path
    self._reader_tensors = {t.name: t for t in reader.tensors}
    self._hf_to_gguf = hf_to_gguf
    # Rows of these tensors are permuted per head by llama.cpp; the value is the head count.
    self._rotary_heads = {}
    for hf_name, gguf_name in hf_to_gguf.items():
      if ".attn_q." in gguf_name:
        self._rotary_heads[hf_name] = num_heads
      elif ".attn_k." in gguf_name:
        self._rotary_heads[hf_name] = num_kv_heads

  def keys(self) -> Iterable[str]:
    return list(self._hf_to_gguf)

  def _tensor(self, name: str) -> gguf.ReaderTensor:
    if name not in self._hf_to_gguf:
      raise KeyError(f"{self.path}: no tensor {name!r} (GGUF holds: {', '.join(self._hf_to_gguf)})")
    return self._reader_tensors[self._hf_to_gguf[name]]

  def shape(self, name: str) -> tuple[int, ...]:
    return _hf_shape(self._tensor(name))

  def dtype(self, name: str) -> np.dtype:
    del name  # every tensor is dequantized to float32
    return np.dtype(np.float32)

  def get(self, name: str, index: tuple[slice, ...] = ()) -> np.ndarray:
    array = dequantize_tensor(self._tensor(name), self.path)
    if name in self._rotary_heads:
      array = _unpermute_rotary_rows(array, self._rotary_heads[name])
    return array[index]


def _hf_tensor_name(gguf_name: str) -> str | None:
  """HF name of a llama GGUF tensor, or None if the name is not one of llama's."""
  if match := _BLOCK_TENSOR.fullmatch(gguf_name):
    layer, part, kind = match.groups()
    if part in _BLOCK_NAMES:
      return f"model.layers.{layer}.{_BLOCK_NAMES[part]}.{kind}"
    return None
  if match := _TOP_LEVEL_TENSOR.fullmatch(gguf_name):
    part, kind = match.groups()
    if part in _TOP_LEVEL_NAMES:
      return f"{_TOP_LEVEL_NAMES[part]}.{kind}"
  return None


class _Metadata:
  """Typed access to GGUF key/values, with errors naming the file and the key."""

  def __init__(self, path: pathlib.Path, reader: gguf.GGUFReader):
    self.path = path
    self.fields = reader.fields

  def get(self, key: str, default: Any = None) -> Any:
    field = self.fields.get(key)
    return default if field is None else field.contents()

  def require(self, key: str) -> Any:
    if key not in self.fields:
      raise InputError(f"GGUF metadata lacks {key!r}", self.path)
    return self.get(key)

  def array_length(self, key: str) -> int | None:
    field = self.fields.get(key)
    return None if field is None else len(field.data)


def _rope_scaling(meta: _Metadata, arch: str) -> dict[str, Any] | None:
  kind = meta.get(f"{arch}.rope.scaling.type")
  if kind is None or kind == "none":
    return None
  if kind not in _ROPE_SCALING_TYPES:
    raise InputError(
        f"RoPE scaling type {kind!r} is not supported; supported: "
        + ", ".join(_ROPE_SCALING_TYPES), meta.path)
  scaling: dict[str, Any] = {
      "rope_type": _ROPE_SCALING_TYPES[kind],
      "factor": float(meta.require(f"{arch}.rope.scaling.factor")),
  }
  if scaling["rope_type"] == "yarn":  # only YaRN takes these in HF's RoPE parameters
    original = meta.get(f"{arch}.rope.scaling.original_context_length")
    if original is not None:
      scaling["original_max_position_embeddings"] = int(original)
    attention_factor = meta.get(f"{arch}.rope.scaling.attn_factor")
    if attention_factor is not None:
      scaling["attention_factor"] = float(attention_factor)
  return scaling


def _llama_hf_config(meta: _Metadata, tensor_names: set[str], embed_rows: int) -> dict[str, Any]:
  arch = "llama"
  hidden_size = int(meta.require(f"{arch}.embedding_length"))
  num_heads = int(meta.require(f"{arch}.attention.head_count"))
  head_dim = meta.get(f"{arch}.attention.key_length")
  if head_dim is None:
    head_dim = meta.get(f"{arch}.rope.dimension_count", hidden_size // num_heads)
  vocab_size = meta.get(f"{arch}.vocab_size")
  if vocab_size is None:
    vocab_size = meta.array_length("tokenizer.ggml.tokens") or embed_rows
  rope_theta = float(meta.get(f"{arch}.rope.freq_base", 10000.0))
  rope_scaling = _rope_scaling(meta, arch)
  config: dict[str, Any] = {
      "architectures": ["LlamaForCausalLM"],
      "model_type": "llama",
      "hidden_act": "silu",
      "vocab_size": int(vocab_size),
      "hidden_size": hidden_size,
      "intermediate_size": int(meta.require(f"{arch}.feed_forward_length")),
      "num_hidden_layers": int(meta.require(f"{arch}.block_count")),
      "num_attention_heads": num_heads,
      "num_key_value_heads": int(meta.get(f"{arch}.attention.head_count_kv", num_heads)),
      "head_dim": int(head_dim),
      "max_position_embeddings": int(meta.require(f"{arch}.context_length")),
      "rms_norm_eps": float(meta.require(f"{arch}.attention.layer_norm_rms_epsilon")),
      # Both spellings: `rope_theta` / `rope_scaling` (config.json files up to transformers 4.x)
      # and `rope_parameters` (transformers 5).
      "rope_theta": rope_theta,
      "rope_scaling": rope_scaling,
      "rope_parameters": {"rope_type": "default", **(rope_scaling or {}), "rope_theta": rope_theta},
      "attention_bias": "blk.0.attn_q.bias" in tensor_names,
      "mlp_bias": "blk.0.ffn_up.bias" in tensor_names,
      "tie_word_embeddings": "output.weight" not in tensor_names,
  }
  for key, config_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                          ("padding_token_id", "pad_token_id")):
    value = meta.get(f"tokenizer.ggml.{key}")
    config[config_key] = None if value is None else int(value)
  return config


def _open(path: str | os.PathLike):
  """The GGUF file `path` names or holds -> (its path, reader, metadata); one error line if it
  is not a readable GGUF file."""
  path = _resolve_gguf_file(path)
  with open(path, "rb") as f:
    magic = f.read(len(GGUF_MAGIC))
  if magic != GGUF_MAGIC:
    raise InputError(f"not a GGUF file: it does not start with {GGUF_MAGIC!r}"
                     + (" (it is empty)" if not magic else ""), path)
  try:
    reader = gguf.GGUFReader(path)
  except (ValueError, OSError, IndexError) as error:  # what numpy raises on a file cut short
    raise InputError(f"truncated or damaged GGUF file ({path.stat().st_size} bytes; the reader "
                     f"says: {error})", path) from None
  return path, reader, _Metadata(path, reader)


def read_gguf(path: str | os.PathLike) -> GgufCheckpoint:
  """Opens a GGUF file (or the one in a folder): HF config + lazily dequantized HF tensors."""
  path, reader, meta = _open(path)
  architecture = meta.require("general.architecture")
  if architecture not in SUPPORTED_ARCHITECTURES:
    raise InputError(
        f"GGUF architecture {architecture!r} is not supported; supported: "
        + ", ".join(SUPPORTED_ARCHITECTURES), path)

  hf_to_gguf: dict[str, str] = {}
  for tensor in reader.tensors:
    if tensor.name == "rope_freqs.weight":
      raise InputError(
          "the file carries per-frequency RoPE factors (rope_freqs.weight, Llama 3.1-style RoPE "
          "scaling), which cannot be expressed as a HF LlamaConfig here; use the model's HF "
          "checkpoint instead", path)
    hf_name = _hf_tensor_name(tensor.name)
    if hf_name is None:
      raise InputError(f"tensor {tensor.name!r} is not part of a {architecture} model", path)
    _supported_type(tensor, path)  # fail on open, not halfway through loading
    hf_to_gguf[hf_name] = tensor.name
  if "model.embed_tokens.weight" not in hf_to_gguf:
    raise InputError("the file has no token_embd.weight tensor", path)

  tensor_names = set(hf_to_gguf.values())
  embed = next(t for t in reader.tensors if t.name == "token_embd.weight")
  hf_config = _llama_hf_config(meta, tensor_names, embed_rows=int(embed.shape[-1]))
  tensors = GgufTensors(path, reader, hf_to_gguf, num_heads=hf_config["num_attention_heads"],
                        num_kv_heads=hf_config["num_key_value_heads"])
  return GgufCheckpoint(hf_config=hf_config, tensors=tensors, path=path)


# The tokenizer (see `gguf_tokenizer`). Special tokens the metadata names by id.
_SPECIAL_TOKEN_IDS = {"bos_token": "tokenizer.ggml.bos_token_id",
                      "eos_token": "tokenizer.ggml.eos_token_id",
                      "unk_token": "tokenizer.ggml.unknown_token_id",
                      "pad_token": "tokenizer.ggml.padding_token_id"}
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types: special tokens, and plain added ones.
# How byte-level vocabularies split text before BPE (`tokenizer.ggml.pre`): pre-tokenizers that
# split with GPT-2's regex (ByteLevel's own), and those with a regex of their own.
_GPT2_REGEX_PRE_TOKENIZERS = (None, "default", "gpt-2", "smollm")
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_PRE_TOKENIZER_SPLITS = {"llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT,
                         "llama-v3": _LLAMA3_SPLIT, "smaug-bpe": _LLAMA3_SPLIT,
                         "falcon3": _LLAMA3_SPLIT, "tekken": _TEKKEN_SPLIT}


class GgufTokenizer(NamedTuple):
  """What a GGUF file says of its tokenizer; `models.tokenizer.load_tokenizer` wraps it as the
  project's `Tokenizer`."""
  backend: tokenizers.Tokenizer
  chat_template: str | None
  special_tokens: dict[str, str]  # name (bos_token, ...) -> token text
  source: pathlib.Path


def gguf_tokenizer(path: str | os.PathLike) -> GgufTokenizer:
  """The tokenizer (chat template included) the GGUF metadata describes, without transformers.

  Built as transformers' GGUF converter builds it, and checked against it in
  tests/models/test_tokenizer.py and tests/scoring/test_item_tokens_parity.py:
  `tokenizer.ggml.model` "gpt2" is byte-level BPE (tokens not spelled in the byte alphabet respelled
  into it; text split by the `tokenizer.ggml.pre` regex), "llama" is Llama's SentencePiece BPE
  (`\u2581` for spaces, byte fallback, merges recovered from the scores when the file lists none).
  Control tokens become special tokens, user-defined ones plain added tokens, both matched whole.
  Unlike transformers, a GPT-2 style vocabulary does not get `<|endoftext|>` added when it lacks
  one: that id would lie past the model's embeddings.
  """
  path, _, meta = _open(path)
  model = meta.require("tokenizer.ggml.model")
  tokens = meta.require("tokenizer.ggml.tokens")
  token_types = meta.get("tokenizer.ggml.token_type") or []
  if model == "gpt2":
    backend, spelled = _byte_level_bpe(meta, tokens), set(_byte_spelling().values())
    # A "control" token spelled outside the byte alphabet is a llama.cpp mislabel; adding it would
    # grow the vocabulary past the model's embeddings.
    control = [t for t, kind in zip(tokens, token_types) if kind == _CONTROL and set(t) <= spelled]
  elif model == "llama" and meta.get("general.architecture") == "llama":
    backend = _sentencepiece_bpe(meta, tokens)
    control = [t for t, kind in zip(tokens, token_types) if kind == _CONTROL]
  else:
    raise InputError(f"GGUF tokenizer {model!r} (architecture "
                     f"{meta.get('general.architecture')!r}) is not supported; supported: gpt2 "
                     "(byte-level BPE), llama (SentencePiece BPE of the llama architecture)", path)
  backend.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False)
                              for t in control])
  vocab = backend.get_vocab()
  backend.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False)
                      for t, kind in zip(tokens, token_types) if kind == _USER_DEFINED and t in vocab])

  special_tokens = {}
  for name, key in _SPECIAL_TOKEN_IDS.items():
    token_id = meta.get(key)
    if token_id is not None:
      if not 0 <= int(token_id) < len(tokens):
        raise InputError(f"{key} is {token_id}, outside the {len(tokens)} tokens", path)
      special_tokens[name] = tokens[int(token_id)]
  add_bos = meta.get("tokenizer.ggml.add_bos_token", model == "llama")  # llama.cpp's default.
  add_eos = meta.get("tokenizer.ggml.add_eos_token", False)
  backend.post_processor = _special_tokens_processor(
      special_tokens.get("bos_token") if add_bos else None,
      special_tokens.get("eos_token") if add_eos else None, backend)
  return GgufTokenizer(backend, meta.get("tokenizer.chat_template"), special_tokens, path)


@functools.cache
def _byte_spelling() -> dict[int, str]:
  """GPT-2's printable character for each byte: the alphabet byte-level BPE vocabularies use."""
  printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
               *range(ord("\xae"), ord("\xff") + 1)]
  spelling = {byte: chr(byte) for byte in printable}
  for offset, byte in enumerate(b for b in range(256) if b not in spelling):
    spelling[byte] = chr(256 + offset)
  return spelling


def _byte_level_bpe(meta: _Metadata, tokens: list[str]) -> tokenizers.Tokenizer:
  spelling = _byte_spelling()
  alphabet = set(spelling.values())
  vocab = {token if set(token) <= alphabet
           else "".join(spelling[byte] for byte in token.encode("utf-8")): index
           for index, token in enumerate(tokens)}
  merges = [tuple(merge.split(" ")) for merge in meta.require("tokenizer.ggml.merges")]
  backend = tokenizers.Tokenizer(tokenizers.models.BPE(
      vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
      end_of_word_suffix="", fuse_unk=False))
  pre = meta.get("tokenizer.ggml.pre")
  if pre in _PRE_TOKENIZER_SPLITS:
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Split(tokenizers.Regex(_PRE_TOKENIZER_SPLITS[pre]),
                                        behavior="isolated"),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  elif pre in _GPT2_REGEX_PRE_TOKENIZERS:
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  else:
    raise InputError(
        f"GGUF pre-tokenizer {pre!r} is not supported; supported: " + ", ".join(
            [p for p in _GPT2_REGEX_PRE_TOKENIZERS if p] + list(_PRE_TOKENIZER_SPLITS)), meta.path)
  backend.decoder = tokenizers.decoders.ByteLevel()
  return backend


def _sentencepiece_bpe(meta: _Metadata, tokens: list[str]) -> tokenizers.Tokenizer:
  vocab = {token: index for index, token in enumerate(tokens)}
  merges = meta.get("tokenizer.ggml.merges")
  if merges is None:
    merges = _merges_from_scores(vocab, dict(zip(tokens, meta.require("tokenizer.ggml.scores"))))
  else:
    merges = [tuple(merge.split(" ")) for merge in merges]
  backend = tokenizers.Tokenizer(tokenizers.models.BPE(
      vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=True, dropout=None))
  backend.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(
      replacement="\u2581", prepend_scheme="first", split=False)
  backend.decoder = tokenizers.decoders.Sequence([
      tokenizers.decoders.Replace("\u2581", " "), tokenizers.decoders.ByteFallback(),
      tokenizers.decoders.Fuse(), tokenizers.decoders.Strip(content=" ", left=1, right=0)])
  return backend


def _merges_from_scores(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
  """A SentencePiece vocabulary's merges: each split of a token into two vocabulary pieces, ranked
  by the token's score, best first, ties as transformers' `generate_merges` breaks them."""
  merges = []
  for token, score in scores.items():
    pieces = [(token[:i], token[i:], score) for i in range(1, len(token))
              if token[:i] in vocab and token[i:] in vocab]
    merges.extend(sorted(pieces, key=lambda m: (vocab[m[0]], vocab[m[1]])))
  merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
  return [(left, right) for left, right, _ in merges]


def _special_tokens_processor(bos: str | None, eos: str | None, backend: tokenizers.Tokenizer):
  """What `add_special_tokens=True` adds: BOS and EOS where the metadata asks for them."""
  single = " ".join([*([f"{bos}:0"] if bos else []), "$A:0", *([f"{eos}:0"] if eos else [])])
  pair = " ".join([single, *([f"{bos}:1"] if bos else []), "$B:1", *([f"{eos}:1"] if eos else [])])
  return tokenizers.processors.TemplateProcessing(
      single=single, pair=pair, special_tokens=[(t, backend.token_to_id(t)) for t in (bos, eos) if t])
