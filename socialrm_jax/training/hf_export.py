"""The trained model as a HF folder: `OUTPUT/model/` loads with transformers'
`AutoModelForSequenceClassification` (no missing or unexpected keys) and with every command of
this project.

Each parameter goes back to the HF tensors it was read from by inverting the family's own
`weight_sources`: a source's transform (a transpose and reshape, a slice of a fused tensor) only
moves entries, so applying it to the HF tensor's entry numbers (`np.arange`) says where each of
our entries came from, and the entries are written back there. The HF shapes are the base's
(its safetensors headers, or a GGUF file's tensors in HF layout), `score.weight` is
[num_labels, D]. config.json is the base's (a GGUF file's: the `LlamaConfig` its metadata gives)
with the sequence-classifier architecture, one label and `pad_token_id`; the tokenizer files and
the chat template are copied (a GGUF file's: written from its metadata, as the scorer reads it).
The weights are float32: a quantized base's dequantized values, plus what training changed. The
folder is written beside its place and renamed when complete.
"""

from __future__ import annotations

import math
import os
import pathlib
import shutil
import tempfile
from typing import Mapping

import numpy as np

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import checkpoint, default_model, gguf_import, weights
from socialrm_jax.models import tokenizer as tokenizer_lib

WEIGHTS_FILE = "model.safetensors"
# Files of a model folder that hold its tokenizer and chat template.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "chat_template.jinja", "chat_template.json",
                   *tokenizer_lib.SLOW_TOKENIZER_FILES)


def _gguf_base(base_path: str) -> pathlib.Path | None:
  """The GGUF file a (resolved) base path names or holds; None for a HF folder."""
  if os.path.isfile(os.path.join(base_path, "config.json")):
    return None
  return gguf_import.gguf_file_in(base_path)


def hf_shapes(base_path: str, sources: Mapping[str, weights.WeightSource], config) -> dict:
  """HF tensor name -> shape: the base's own tensors, and `score.weight` [L, D]."""
  base_path = default_model.resolve_model_path(base_path)
  if checkpoint.is_native(base_path) or not os.path.exists(base_path):
    raise InputError("--model: exporting to a HF folder needs a HF or GGUF base (its tensors' "
                     "HF shapes), not a native checkpoint", base_path)
  gguf_file = _gguf_base(base_path)
  tensors = (gguf_import.read_gguf(gguf_file).tensors if gguf_file is not None
             else weights.SafetensorsSource(base_path))
  shapes = {name: tensors.shape(name) for name in tensors.keys()}
  shapes["score.weight"] = (config.num_labels, config.hidden_size)
  needed = {n for s in sources.values() for n in s.hf_names}
  return {n: tuple(shapes[n]) for n in needed}


def hf_tensors(params: Mapping[str, np.ndarray], sources: Mapping[str, weights.WeightSource],
               shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
  """Our parameters (host arrays) -> HF tensors, each entry where `weight_sources` read it."""
  out = {name: np.zeros(math.prod(shape), np.float32) for name, shape in shapes.items()}
  filled = {name: np.zeros(math.prod(shape), bool) for name, shape in shapes.items()}
  for path, source in sources.items():
    value = np.asarray(params[path], np.float32)
    layers = list(zip(source.hf_names, value)) if source.stacked else [(source.hf_name, value)]
    for name, ours in layers:
      numbers = np.arange(math.prod(shapes[name])).reshape(shapes[name])
      if source.hf_span is not None:
        index = (slice(None),) * source.hf_axis + (slice(*source.hf_span),)
        numbers = numbers[index]
      where = np.asarray(source.transform(numbers))
      if where.shape != ours.shape:
        raise ValueError(f"{path}: {name} maps to {where.shape}, the parameter is {ours.shape}")
      out[name][where.ravel()] = ours.ravel()
      filled[name][where.ravel()] = True
  empty = [name for name, done in filled.items() if not done.all()]
  if empty:
    raise ValueError(f"no parameter writes every entry of {', '.join(sorted(empty))}")
  return {name: out[name].reshape(shapes[name]) for name in sorted(out)}


def hf_config(base_config: dict, config, pad_token_id: int) -> dict:
  """config.json of the export: the base's, as a one-label sequence classifier."""
  out = {k: v for k, v in base_config.items() if k not in ("auto_map", "torch_dtype")}
  out.update(architectures=[config.architecture], id2label={"0": "LABEL_0"},
             label2id={"LABEL_0": 0}, pad_token_id=int(pad_token_id), dtype="float32")
  out.pop("num_labels", None)
  return out


def write(output: str | os.PathLike, params: Mapping[str, np.ndarray],
          sources: Mapping[str, weights.WeightSource], *, base_path: str, base_config: dict,
          config, pad_token_id: int) -> pathlib.Path:
  """Writes the HF folder `output` (replacing one there) from `params`; returns its path."""
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  output = pathlib.Path(output)
  tensors = hf_tensors(params, sources, hf_shapes(base_path, sources, config))
  output.parent.mkdir(parents=True, exist_ok=True)
  stage = pathlib.Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}."))
  try:
    save_file(tensors, str(stage / WEIGHTS_FILE), metadata={"format": "pt"})
    tables.atomic_write_json(stage / "config.json", hf_config(base_config, config, pad_token_id))
    base_path = default_model.resolve_model_path(base_path)
    gguf_file = _gguf_base(base_path)
    if gguf_file is not None:  # the tokenizer and chat template of its metadata
      tokenizer_lib.load_tokenizer(gguf_file).save_pretrained(stage)
    for name in TOKENIZER_FILES if gguf_file is None else ():
      if os.path.isfile(os.path.join(base_path, name)):
        shutil.copyfile(os.path.join(base_path, name), stage / name)
    if output.exists():
      shutil.rmtree(output)
    os.replace(stage, output)
  finally:
    shutil.rmtree(stage, ignore_errors=True)
  return output
