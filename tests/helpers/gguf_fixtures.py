"""Tiny llama.cpp GGUF files: llama.cpp's tensor names and q/k row permutation, and a GGUF
written from a tiny HF Llama folder (`scoring_fixtures.make_llama`), tokenizer and chat template in
its metadata, as llama.cpp's convert_hf_to_gguf.py writes them; and transformers' own load of the
default model's real GGUF file, the reference the tests of that file compare with."""

from __future__ import annotations

import functools
import json
import pathlib

import gguf
import numpy as np

HF_TO_GGUF_BLOCK = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
CONTROL, NORMAL = 3, 1  # llama.cpp token types


def llama_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
  """llama.cpp convert_hf_to_gguf.py's `permute` (HF rotate-half rows -> interleaved pairs)."""
  return (weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
          .swapaxes(1, 2).reshape(weight.shape))


def gguf_name(hf_name: str) -> str:
  top = {"model.embed_tokens.weight": "token_embd.weight",
         "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
  if hf_name in top:
    return top[hf_name]
  _, _, layer, *module, kind = hf_name.split(".")
  return f"blk.{layer}.{HF_TO_GGUF_BLOCK['.'.join(module)]}.{kind}"


def gguf_from_hf_llama(folder: pathlib.Path, path: pathlib.Path,
                       quantized: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.Q8_0
                       ) -> pathlib.Path:
  """The tiny HF Llama causal LM in `folder` as a GGUF file at `path`: its 2-D weights quantized
  to `quantized` (norms float32), its byte-level BPE tokenizer, special tokens and chat template
  in the metadata."""
  from safetensors.numpy import load_file
  config = json.loads((folder / "config.json").read_text())
  tokenizer = json.loads((folder / "tokenizer.json").read_text())
  tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
  vocab = dict(tokenizer["model"]["vocab"])
  special = {t["content"] for t in tokenizer["added_tokens"] if t["special"]}
  vocab.update({t["content"]: t["id"] for t in tokenizer["added_tokens"]})
  tokens = sorted(vocab, key=vocab.get)
  merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
  heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
  writer = gguf.GGUFWriter(str(path), "llama")
  writer.add_context_length(config["max_position_embeddings"])
  writer.add_embedding_length(config["hidden_size"])
  writer.add_block_count(config["num_hidden_layers"])
  writer.add_feed_forward_length(config["intermediate_size"])
  writer.add_head_count(heads)
  writer.add_head_count_kv(kv_heads)
  writer.add_rope_dimension_count(config["hidden_size"] // heads)
  writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
  writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
  writer.add_vocab_size(len(tokens))
  writer.add_tokenizer_model("gpt2")
  writer.add_token_list(tokens)
  writer.add_token_types([CONTROL if t in special else NORMAL for t in tokens])
  writer.add_token_merges(merges)
  for name, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                    ("pad", writer.add_pad_token_id), ("unk", writer.add_unk_token_id)):
    add(vocab[tokenizer_config[f"{name}_token"]])
  writer.add_add_bos_token(False)  # the chat template writes it
  template = folder / "chat_template.jinja"  # where transformers 5 saves it
  writer.add_chat_template(template.read_text() if template.is_file()
                           else tokenizer_config["chat_template"])
  for name, weight in load_file(str(folder / "model.safetensors")).items():
    weight = weight.astype(np.float32)
    if name.endswith("q_proj.weight"):
      weight = llama_permute(weight, heads)
    elif name.endswith("k_proj.weight"):
      weight = llama_permute(weight, kv_heads)
    if weight.ndim == 2:
      writer.add_tensor(gguf_name(name), gguf.quants.quantize(weight, quantized),
                        raw_dtype=quantized)
    else:
      writer.add_tensor(gguf_name(name), weight)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


@functools.cache
def smollm2_transformers():
  """transformers' own GGUF load of the default model's file (float32, eval mode), once a process
  for every test that compares with it: gguf-py parses the file's metadata in Python, about 20 s
  a load on a 2-core machine. Its users only read it (forwards under no_grad, its state_dict)."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from socialrm_jax.models import default_model  # pylint: disable=import-outside-toplevel
  path = default_model.smollm2_gguf_path()
  return transformers.AutoModelForCausalLM.from_pretrained(
      str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
