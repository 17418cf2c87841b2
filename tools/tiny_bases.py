"""Two tiny random causal-LM bases, a Llama and a Gemma 2, for the value-bias ablation grid on CPU.

  python tools/tiny_bases.py --output_dir=runs/tiny_bases

Writes OUTPUT/llama and OUTPUT/gemma2: transformers' `LlamaForCausalLM` and `Gemma2ForCausalLM`
with a small config (hidden 64, 2 layers, 4 heads, 2 KV heads), weights drawn from a fixed seed,
saved with `save_pretrained` (safetensors), and one byte-level BPE tokenizer (1,024 tokens)
learned from the bundled HH-RLHF slice, the probe's prompts and its lexicon words, with each
family's chat-template layout (Llama 3's headers, Gemma's turns) and a pad token of its own. The
grid adds the score head (`configs/value_bias_ablation.py`, preset `tiny`). Needs the test extra
(torch, transformers); the package itself never imports them. Same command, same files.
"""

from __future__ import annotations

import pathlib
import shutil

from absl import app, flags

_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where the bases go.", required=True)

SEED = 0
VOCAB_SIZE = 1024
BASES = ("llama", "gemma2")
_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=2048)
SPECIALS = {
    "llama": dict(bos="<|begin_of_text|>", eos="<|eot_id|>", pad="<|pad|>",
                  others=["<|start_header_id|>", "<|end_header_id|>"]),
    "gemma2": dict(bos="<bos>", eos="<end_of_turn>", pad="<pad>", others=["<start_of_turn>"]),
}
CHAT_TEMPLATES = {
    "llama": ("{{- bos_token }}{%- for message in messages %}"
              "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
              " + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
              "{%- if add_generation_prompt %}"
              "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"),
    "gemma2": ("{{- bos_token }}{%- for message in messages %}"
               "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
               "{{- '<start_of_turn>' + role + '\\n' + message['content'] | trim"
               " + '<end_of_turn>\\n' }}{%- endfor %}"
               "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"),
}


def corpus() -> list[str]:
  """The texts the tokenizer learns: the bundled HH-RLHF slice's turns and responses, the value
  probe's prompts and lexicon words (answers as the probe writes them)."""
  from socialrm_jax.orchestrators import audit, convert, probe
  converted = convert.convert_all(audit.BUNDLED_DATA, "hh_rlhf")
  texts = [m["content"] for item in converted.items for m in item["prompt"]]
  texts += [c for item in converted.items for c in item["candidates"]]
  texts += list(probe.PROMPTS)
  texts += [probe.answer(w) for ws in probe.load_lexicons().values()
            for w in ws]
  return texts


def build_tokenizer(texts: list[str], family: str):
  """transformers' fast tokenizer around a byte-level BPE learned from `texts`."""
  import transformers
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  special = SPECIALS[family]
  names = [special["bos"], special["eos"], special["pad"], *special["others"]]
  backend = Tokenizer(models.BPE())
  backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  backend.decoder = decoders.ByteLevel()
  backend.train_from_iterator(texts, trainers.BpeTrainer(
      vocab_size=VOCAB_SIZE, special_tokens=names, show_progress=False,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()), length=len(texts))
  tokenizer = transformers.PreTrainedTokenizerFast(
      tokenizer_object=backend, bos_token=special["bos"], eos_token=special["eos"],
      pad_token=special["pad"], clean_up_tokenization_spaces=False)
  tokenizer.chat_template = CHAT_TEMPLATES[family]
  return tokenizer


def build_base(family: str, texts: list[str], folder: pathlib.Path) -> None:
  import torch
  import transformers
  tokenizer = build_tokenizer(texts, family)
  ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
             pad_token_id=tokenizer.pad_token_id, vocab_size=len(tokenizer))
  if family == "llama":
    config = transformers.LlamaConfig(**_SHAPE, **ids, tie_word_embeddings=False)
    model_class = transformers.LlamaForCausalLM
  else:
    config = transformers.Gemma2Config(**_SHAPE, **ids, sliding_window=64,
                                       query_pre_attn_scalar=16)
    model_class = transformers.Gemma2ForCausalLM
  torch.manual_seed(SEED)
  model = model_class(config).eval()
  tmp = folder.with_name(folder.name + ".tmp")
  shutil.rmtree(tmp, ignore_errors=True)
  model.save_pretrained(tmp)
  tokenizer.save_pretrained(tmp)
  shutil.rmtree(folder, ignore_errors=True)
  tmp.rename(folder)


def main(argv):
  del argv
  out = pathlib.Path(_OUTPUT_DIR.value)
  out.mkdir(parents=True, exist_ok=True)
  texts = corpus()
  for family in BASES:
    build_base(family, texts, out / family)
    print(f"{family}: {out / family}")


if __name__ == "__main__":
  app.run(main)
