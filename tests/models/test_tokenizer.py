"""Our tokenizer loading (models/tokenizer.py: folders and GGUF metadata) against
transformers' AutoTokenizer on the same files: what the chat template renders, the special tokens,
the ids, and the errors of folders it cannot read."""

import json
import shutil

import gguf
import numpy as np
import pytest
import transformers
from tokenizers import Tokenizer as RustTokenizer
from tokenizers import models, pre_tokenizers, trainers

from socialrm_jax.base.errors import InputError
from socialrm_jax.models import tokenizer as tokenizer_lib
from tests.helpers import scoring_fixtures as fx

TEXTS = [
    "Who is a rude guest?", "  two  spaces,\ttab\nnewline ", "caf\u00e9 \u2615 na\u00efve \u00fcber",
    "<s>hello</s> <|user|>x<|end|>", "a b", "<think>why</think> 12345 3.14", "",
]

# Every feature of transformers' template environment: namespace, break/continue, the generation
# block, its tojson (non-ASCII kept, indent, sort_keys), dict(), whitespace control, `is defined`.
FEATURES_TEMPLATE = """{%- set ns = namespace(count=0) %}
{%- for m in messages %}
  {%- if m.role == 'system' %}{% continue %}{% endif %}
  {%- set ns.count = ns.count + 1 %}
  {%- if ns.count > 3 %}{% break %}{% endif %}
  {% if m.role == 'assistant' %}
    {% generation %}[A] {{ m.content | trim }}{% endgeneration %}
  {% else %}
    [{{ m.role | upper }}] {{ m.content }}
  {% endif %}
  {{ {'role': m.role, 'text': m.content, 'n': ns.count} | tojson }}
  {{ dict(z=1, a=[m.content]) | tojson(indent=2, sort_keys=True) }}
  {%- if m.name is defined %} NAME={{ m.name }}{% endif %}
{% endfor %}
{%- if add_generation_prompt %}<gen>{{ eos_token }}{{ date_string | default('no date') }}{% endif %}"""

CONVERSATIONS = [
    [{"role": "user", "content": "Is <b>caf\u00e9</b> & \"tea\" fine? \u2615"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi", "name": None},
     {"role": "assistant", "content": "  Hello.  "}, {"role": "user", "content": "Bye"},
     {"role": "assistant", "content": "Cut by break."}],
]


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory):
  folder = tmp_path_factory.mktemp("chat")
  fx.train_chat_tokenizer(folder)
  return folder


def _same_as_transformers(ours, theirs, texts=TEXTS):
  for text in texts:
    for add_special_tokens in (False, True):
      assert ours(text, add_special_tokens)["input_ids"] == theirs(
          text, add_special_tokens=add_special_tokens)["input_ids"], (text, add_special_tokens)
  assert ours.special_tokens_map == theirs.special_tokens_map
  for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
    assert getattr(ours, name) == getattr(theirs, name), name


def test_template_environment_renders_as_transformers(chat_folder):
  ours = tokenizer_lib.load_tokenizer(chat_folder)
  theirs = transformers.AutoTokenizer.from_pretrained(chat_folder)
  ours.chat_template = theirs.chat_template = FEATURES_TEMPLATE
  rendered = []
  for conversation in CONVERSATIONS:
    for add_generation_prompt in (False, True):
      for variables in ({}, {"date_string": "26 Jul 2024"}):
        got = ours.apply_chat_template(conversation, tokenize=False,
                                       add_generation_prompt=add_generation_prompt, **variables)
        assert got == theirs.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=add_generation_prompt, **variables)
        rendered.append(got)
  # The features did render: unescaped non-ASCII JSON, the loop cut by `break`, the date.
  assert '"text": "Is <b>caf\u00e9</b> & \\"tea\\" fine? \u2615"' in rendered[0]
  assert '"n": 3' in rendered[-1] and "Cut by break" not in rendered[-1]
  assert rendered[-1].endswith("<gen></s>26 Jul 2024")


@pytest.mark.parametrize("template, error", [
    ("{{ raise_exception('no system turns') }}", "no system turns"),
    ("{% set ns = namespace() %}{% set ns._x = 1 %}", "underscore"),
    ("{{ messages.__class__ }}{{ ''.__class__.__mro__ }}", "unsafe|access"),
])
def test_template_errors_are_raised_like_transformers(chat_folder, template, error):
  ours = tokenizer_lib.load_tokenizer(chat_folder)
  theirs = transformers.AutoTokenizer.from_pretrained(chat_folder)
  ours.chat_template = theirs.chat_template = template
  with pytest.raises(Exception, match=error) as ours_error:
    ours.apply_chat_template(CONVERSATIONS[0], tokenize=False)
  with pytest.raises(type(ours_error.value)):
    theirs.apply_chat_template(CONVERSATIONS[0], tokenize=False)


def test_folder_without_tokenizer_json_is_one_clear_error(tmp_path):
  (tmp_path / "tokenizer_config.json").write_text("{}")
  with pytest.raises(InputError) as error:
    tokenizer_lib.load_tokenizer(tmp_path)
  message = str(error.value)
  assert message.startswith(f"{tmp_path}: no tokenizer.json") and "\n" not in message
  assert "sentencepiece" not in message.lower()


def test_unreadable_files_are_named(chat_folder, tmp_path):
  shutil.copytree(chat_folder, tmp_path / "bad_json")
  (tmp_path / "bad_json" / "tokenizer_config.json").write_text("{not json")
  with pytest.raises(InputError, match=r"tokenizer_config.json: cannot read as JSON"):
    tokenizer_lib.load_tokenizer(tmp_path / "bad_json")
  shutil.copytree(chat_folder, tmp_path / "bad_tokenizer")
  (tmp_path / "bad_tokenizer" / "tokenizer.json").write_text('{"model": 3}')
  with pytest.raises(InputError, match=r"tokenizer.json: cannot read as a tokenizers file"):
    tokenizer_lib.load_tokenizer(tmp_path / "bad_tokenizer")


def _edit_config(folder, **changes):
  path = folder / "tokenizer_config.json"
  config = json.loads(path.read_text())
  config.update(changes)
  config = {k: v for k, v in config.items() if v is not None}
  path.write_text(json.dumps(config))


def test_chat_template_sources_in_transformers_order(chat_folder, tmp_path):
  """chat_template.jinja, else the config's template (named ones: "default"), else the
  processor's chat_template.json."""
  folder = tmp_path / "tok"
  shutil.copytree(chat_folder, folder)
  jinja = (folder / "chat_template.jinja").read_text()
  (folder / "chat_template.jinja").unlink()

  _edit_config(folder, chat_template="{{ 'config: ' + messages[0]['content'] }}")
  assert tokenizer_lib.load_tokenizer(folder).chat_template == "{{ 'config: ' + messages[0]['content'] }}"
  (folder / "chat_template.jinja").write_text(jinja)
  ours, theirs = tokenizer_lib.load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
  assert ours.chat_template == theirs.chat_template == jinja
  (folder / "chat_template.jinja").unlink()

  named = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": jinja}]
  _edit_config(folder, chat_template=named)
  ours, theirs = tokenizer_lib.load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
  assert ours.chat_template == theirs.get_chat_template() == jinja
  _edit_config(folder, chat_template=named[:1])
  with pytest.raises(InputError, match=r"tokenizer_config.json: several chat templates \(tool_use\) "
                                       r"and none named 'default'"):
    tokenizer_lib.load_tokenizer(folder)

  _edit_config(folder, chat_template=None)
  assert tokenizer_lib.load_tokenizer(folder).chat_template is None
  (folder / "chat_template.json").write_text(json.dumps({"chat_template": jinja}))
  assert tokenizer_lib.load_tokenizer(folder).chat_template == jinja


def test_special_tokens_as_transformers_reads_them(chat_folder, tmp_path):
  folder = tmp_path / "tok"
  shutil.copytree(chat_folder, folder)
  # AddedToken dicts; an EOS the vocabulary lacks (added whole, a new id); a model-specific token.
  _edit_config(folder, bos_token={"__type": "AddedToken", "content": "<s>", "lstrip": False,
                                  "normalized": False, "rstrip": False, "single_word": False,
                                  "special": True},
               eos_token="<|fresh|>", image_token="<|end|>")
  ours = tokenizer_lib.load_tokenizer(folder)
  theirs = transformers.AutoTokenizer.from_pretrained(folder)
  assert ours.bos_token == "<s>" and ours.eos_token == "<|fresh|>"
  assert ours.eos_token_id == len(theirs) - 1
  assert ours.special_tokens_map["image_token"] == "<|end|>"
  _same_as_transformers(ours, theirs, TEXTS + ["so <|fresh|>er"])
  ours.chat_template = theirs.chat_template = "{{ image_token }}|{{ bos_token }}|{{ eos_token }}"
  assert ours.apply_chat_template(CONVERSATIONS[0], tokenize=False) == theirs.apply_chat_template(
      CONVERSATIONS[0], tokenize=False) == "<|end|>|<s>|<|fresh|>"


def test_legacy_special_tokens_map_is_read_where_transformers_reads_it(chat_folder, tmp_path):
  folder = tmp_path / "tok"
  shutil.copytree(chat_folder, folder)
  _edit_config(folder, added_tokens_decoder=None)
  (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|end|>"}))
  ours = tokenizer_lib.load_tokenizer(folder)
  theirs = transformers.AutoTokenizer.from_pretrained(folder)
  assert ours.eos_token == theirs.eos_token == "<|end|>"
  _same_as_transformers(ours, theirs)


# Synthetic GGUF files: the tokenizer metadata llama.cpp writes, for each kind we build.
def _byte_level_vocab():
  """A small byte-level BPE trained here: its tokens (by id) and merges."""
  tok = RustTokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
  tok.train_from_iterator(fx.item_texts(fx.all_items()) + TEXTS, trainer)
  state = json.loads(tok.to_str())["model"]
  tokens = sorted(state["vocab"], key=state["vocab"].get)
  merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
  return tokens, merges


def _write_gguf(path, tokens, token_types, **metadata):
  writer = gguf.GGUFWriter(str(path), "llama")
  writer.add_block_count(1)
  writer.add_context_length(64)
  writer.add_embedding_length(8)
  writer.add_feed_forward_length(16)
  writer.add_head_count(2)
  writer.add_layer_norm_rms_eps(1e-5)
  writer.add_token_list(tokens)
  writer.add_token_types(token_types)
  for key, value in metadata.items():
    getattr(writer, f"add_{key}")(value)
  writer.add_chat_template("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                           "{{ m['content'] }}<|im_end|>\n{% endfor %}")
  writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), np.float32))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


def _byte_level_gguf(path, pre):
  tokens, merges = _byte_level_vocab()
  # A token spelled with a real space (respelled into the byte alphabet), a user-defined token,
  # and a "control" token outside the byte alphabet (a mislabel: skipped).
  tokens += ["a b", "<think>", "<\uff5cend\uff5c>"]
  types = [3, 3, 3] + [1] * (len(tokens) - 6) + [1, 4, 3]
  return _write_gguf(path, tokens, types, tokenizer_model="gpt2", tokenizer_pre=pre,
                     token_merges=merges, bos_token_id=1, eos_token_id=2, unk_token_id=0,
                     pad_token_id=2, add_bos_token=False)


def _sentencepiece_gguf(path):
  pieces = ["\u2581", "h", "e", "l", "o", "w", "r", "d", "a", "t", "s", "\u2581h", "he", "ll",
            "lo", "hell", "hello", "\u2581hello", "\u2581w", "or", "ld", "\u2581world", "\u2581t",
            "th", "\u2581the", "<|user|>", "<think>"]
  tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
  types = [2, 3, 3] + [6] * 256 + [1] * (len(pieces) - 2) + [3, 4]
  scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
  return _write_gguf(path, tokens, types, tokenizer_model="llama", token_scores=scores,
                     bos_token_id=1, eos_token_id=2, unk_token_id=0)


GGUF_FILES = {
    "gpt2-regex": lambda path: _byte_level_gguf(path, "smollm"),
    "llama-bpe": lambda path: _byte_level_gguf(path, "llama-bpe"),
    "tekken": lambda path: _byte_level_gguf(path, "tekken"),
    "sentencepiece": _sentencepiece_gguf,
}


@pytest.mark.parametrize("kind", sorted(GGUF_FILES))
def test_gguf_tokenizer_equals_transformers(tmp_path, kind):
  path = GGUF_FILES[kind](tmp_path / "model.gguf")
  ours = tokenizer_lib.load_tokenizer(path)
  theirs = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
  texts = TEXTS + ["hello world the <think> <\uff5cend\uff5c> <|im_start|>user"]
  _same_as_transformers(ours, theirs, texts)
  assert ours.chat_template == theirs.chat_template
  conversation = CONVERSATIONS[1][:3]
  assert ours.apply_chat_template(conversation, tokenize=False) == theirs.apply_chat_template(
      conversation, tokenize=False)
  for text in texts:
    ids = ours(text, add_special_tokens=False)["input_ids"]
    assert ours.decode(ids) == theirs.decode(ids)


def test_gguf_tokenizer_saved_and_reloaded(tmp_path):
  """What convert_checkpoint writes for a GGUF model loads back to the same tokenizer, here and
  in transformers."""
  path = _byte_level_gguf(tmp_path / "model.gguf", "llama-bpe")
  ours = tokenizer_lib.load_tokenizer(path)
  written = ours.save_pretrained(tmp_path / "saved")
  assert sorted(p.rsplit("/", 1)[-1] for p in written) == ["tokenizer.json", "tokenizer_config.json"]
  for reloaded in (tokenizer_lib.load_tokenizer(tmp_path / "saved"),
                   transformers.AutoTokenizer.from_pretrained(tmp_path / "saved")):
    _same_as_transformers(ours, reloaded)
    assert reloaded.chat_template == ours.chat_template


def test_unsupported_gguf_tokenizers_are_named(tmp_path):
  tokens, merges = _byte_level_vocab()
  path = _write_gguf(tmp_path / "qwen.gguf", tokens, [1] * len(tokens), tokenizer_model="gpt2",
                     tokenizer_pre="qwen2", token_merges=merges)
  with pytest.raises(InputError, match=r"qwen.gguf: GGUF pre-tokenizer 'qwen2' is not supported"):
    tokenizer_lib.load_tokenizer(path)
  path = _write_gguf(tmp_path / "bert.gguf", tokens, [1] * len(tokens), tokenizer_model="bert")
  with pytest.raises(InputError, match=r"bert.gguf: GGUF tokenizer 'bert' .* is not supported"):
    tokenizer_lib.load_tokenizer(path)
