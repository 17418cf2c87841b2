"""The model's own tokenizer, loaded without transformers (and so without torch).

transformers 5 imports torch as soon as `AutoTokenizer` is used (15-24 s), and its one-text calls
cost the host ~20 s per 60k texts. What decides the token ids is small, so we read it ourselves:

- `tokenizer.json` through `tokenizers` (Rust; `encode_batch` runs on Rust threads with the GIL
  released). Padding and truncation saved in the file are switched off: transformers switches them
  off on every call that does not ask for them, and ours never do.
- `tokenizer_config.json` (and the legacy `special_tokens_map.json` where transformers reads it):
  the special tokens the chat template sees (`bos_token`, `eos_token`, ... and model-specific
  `*_token` strings), `split_special_tokens`, and the added tokens the file lists. Special tokens
  that `tokenizer.json` lacks are added as whole tokens, as transformers adds them.
  `add_bos_token`/`add_eos_token` are ignored as transformers ignores them beside a
  `tokenizer.json`; a file without a post-processor gets transformers' plain one (`$A`, `$A $B`).
- the chat template: `chat_template.jinja` (and `additional_chat_templates/*.jinja`) before the
  config's `chat_template` (a string or named templates, "default" used), then the processor's
  `chat_template.json`. It is rendered as `apply_chat_template(..., tokenize=False)` renders it:
  the same sandboxed jinja2 environment, globals and filters (see `_compile`), the special tokens
  and caller variables passed alongside `messages`, no tools, no documents.

GGUF files carry the same facts in their metadata: `gguf_import.gguf_tokenizer` reads them, and
`load_tokenizer` builds this class from them. `Tokenizer` also answers the few transformers tokenizer calls this project makes
(`apply_chat_template`, calling it on a text, `decode`, `convert_tokens_to_ids`, `*_token_id`,
`save_pretrained`), so code written against a transformers tokenizer runs on it unchanged.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import pathlib
from typing import Any, Sequence

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox
import jinja2.utils
import tokenizers
from tokenizers import processors

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import gguf_import

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
PROCESSOR_CHAT_TEMPLATE_FILE = "chat_template.json"
# The special tokens every transformers tokenizer names (its SPECIAL_TOKENS_ATTRIBUTES).
NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                        "cls_token", "mask_token")
DEFAULT_TEMPLATE_NAME = "default"
# Tokenizer files of transformers' slow (Python) tokenizers: SentencePiece models, BPE and
# WordPiece vocabularies (DeBERTa-v3's SentencePiece model is `spm.model`). They are not read here
# (`tokenizer.json` holds the same, compiled).
SLOW_TOKENIZER_FILES = ("tokenizer.model", "spiece.model", "spm.model", "sentencepiece.bpe.model",
                        "vocab.json", "merges.txt", "vocab.txt")


def _token_text(value: Any) -> str | None:
  """A special token as configs write it: a string or an AddedToken dict (`content`)."""
  if isinstance(value, str):
    return value
  if isinstance(value, dict) and isinstance(value.get("content"), str):
    return value["content"]
  return None


def _added_token(value: Any, special: bool) -> tokenizers.AddedToken:
  if isinstance(value, dict):
    flags = {k: value[k] for k in ("single_word", "lstrip", "rstrip", "normalized", "special")
             if k in value}
    return tokenizers.AddedToken(value["content"], **{"special": special, **flags})
  return tokenizers.AddedToken(value, special=special, normalized=False)


class Tokenizer:
  """A `tokenizers.Tokenizer` with the chat template and special tokens of one model."""

  def __init__(self, backend: tokenizers.Tokenizer, *, chat_template: str | None,
               special_tokens: dict[str, str], source: str | os.PathLike,
               extra_tokens: Sequence[tokenizers.AddedToken] = ()):
    self.backend_tokenizer = backend
    self.chat_template = chat_template
    # name -> text of the named and model-specific special tokens; the template sees them all.
    self.special_tokens_map = dict(special_tokens)
    self.source = str(source)
    backend.no_padding()
    backend.no_truncation()
    if backend.post_processor is None:  # transformers' post-processor without BOS/EOS.
      backend.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1")
    # Special tokens (and extra added tokens) the vocabulary does not yet hold as added tokens
    # become whole tokens, as transformers adds them; those already added keep their settings.
    added = {t.content for t in backend.get_added_tokens_decoder().values()}
    for token in [*extra_tokens, *(_added_token(t, True) for t in self.special_tokens_map.values())]:
      if token.content not in added:
        backend.add_tokens([token])
        added.add(token.content)

  # Special tokens, as transformers names them.
  def __getattr__(self, name: str):
    """`bos_token`, `eos_token`, ... (None where the model has none) and their `*_id`s."""
    if name.endswith("_token_id") and name[:-3] in NAMED_SPECIAL_TOKENS:
      text = self.special_tokens_map.get(name[:-3])
      return None if text is None else self.backend_tokenizer.token_to_id(text)
    if name in NAMED_SPECIAL_TOKENS:
      return self.special_tokens_map.get(name)
    raise AttributeError(name)

  def convert_tokens_to_ids(self, token: str) -> int | None:
    return self.backend_tokenizer.token_to_id(token)

  # Text.
  def apply_chat_template(self, conversation: Sequence[dict], *, add_generation_prompt=False,
                          tokenize: bool = True, **variables) -> str | list[int]:
    """The conversation rendered by the chat template (then its ids, no special tokens added)."""
    if not self.chat_template:
      raise ValueError(f"{self.source}: the tokenizer has no chat template")
    messages = [{k: v for k, v in m.items() if v is not None} for m in conversation]
    text = _compile(self.chat_template).render(
        messages=messages, tools=None, documents=None, add_generation_prompt=add_generation_prompt,
        **{**self.special_tokens_map, **variables})
    return self(text, add_special_tokens=False)["input_ids"] if tokenize else text

  def encode_batch(self, texts: Sequence[str]) -> list[tokenizers.Encoding]:
    """Each text's encoding without added special tokens, from one call into Rust."""
    return self.backend_tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)

  def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
    return {"input_ids": self.backend_tokenizer.encode(
        text, add_special_tokens=add_special_tokens).ids}

  def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
    return self.backend_tokenizer.decode([int(i) for i in ids],
                                         skip_special_tokens=skip_special_tokens)

  def save_pretrained(self, folder: str | os.PathLike) -> list[str]:
    """Writes tokenizer.json and tokenizer_config.json (loadable here and by transformers)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **self.special_tokens_map}
    if self.chat_template:
      config["chat_template"] = self.chat_template
    self.backend_tokenizer.save(str(folder / TOKENIZER_FILE))
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    return [str(folder / TOKENIZER_FILE), str(folder / CONFIG_FILE)]

  @classmethod
  def from_transformers(cls, hf_tokenizer) -> Tokenizer:
    """The same tokenizer from a transformers fast tokenizer object (its backend copied)."""
    backend = tokenizers.Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
    backend.encode_special_tokens = bool(getattr(hf_tokenizer, "split_special_tokens", False))
    return cls(backend, chat_template=_default_template(hf_tokenizer.chat_template,
                                                        hf_tokenizer.name_or_path),
               special_tokens=dict(hf_tokenizer.special_tokens_map),
               source=hf_tokenizer.name_or_path)


def check_tokenizer_files(folder: str | os.PathLike) -> None:
  """Refuses a model folder without the file the tokenizer is read from, saying what was looked
  for (and, where a slow tokenizer's files are there instead, how to write the one we read)."""
  folder = pathlib.Path(folder)
  if (folder / TOKENIZER_FILE).is_file():
    return
  slow = [name for name in SLOW_TOKENIZER_FILES if (folder / name).is_file()]
  found = (f"; it holds {', '.join(slow)}, a slow tokenizer's files, which this tool does not "
           f"read: put the model release's {TOKENIZER_FILE} beside them (most releases ship one)"
           ) if slow else ""
  raise InputError(
      f"no {TOKENIZER_FILE}, the file the tokenizer is read from (with {CONFIG_FILE}, "
      f"{SPECIAL_TOKENS_MAP_FILE} and {CHAT_TEMPLATE_FILE} where present), as a fast "
      f"tokenizer's save_pretrained writes them beside the weights{found}", folder)


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
  """The tokenizer of a model folder (its tokenizer.json) or of a .gguf file (its metadata)."""
  path = pathlib.Path(path)
  if path.is_file() and path.suffix == gguf_import.GGUF_SUFFIX:
    found = gguf_import.gguf_tokenizer(path)
    return Tokenizer(found.backend, chat_template=found.chat_template,
                     special_tokens=found.special_tokens, source=found.source)
  check_tokenizer_files(path)
  tokenizer_file = path / TOKENIZER_FILE
  try:
    backend = tokenizers.Tokenizer.from_file(str(tokenizer_file))
  except Exception as error:  # tokenizers raises a bare Exception for a file it cannot parse.
    raise InputError(f"cannot read as a tokenizers file: {error}", tokenizer_file) from error
  config = _read_json(path / CONFIG_FILE)
  if "added_tokens_decoder" not in config:  # transformers reads the legacy map only then.
    config.update(_read_json(path / SPECIAL_TOKENS_MAP_FILE))
  backend.encode_special_tokens = bool(config.get("split_special_tokens", False))

  special_tokens = {name: _token_text(config.get(name)) for name in NAMED_SPECIAL_TOKENS}
  if backend.padding and "pad_token" not in config:  # transformers takes it from the padding.
    special_tokens["pad_token"] = backend.padding["pad_token"]
  # Model-specific special tokens: other `*_token` keys holding a string (e.g. `image_token`).
  special_tokens.update({k: v for k, v in config.items()
                         if k.endswith("_token") and k not in special_tokens and isinstance(v, str)})
  extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
  if isinstance(extra, dict):
    special_tokens.update({k: v for k, v in extra.items() if isinstance(v, str)})
    extra = []
  extra_tokens = [_added_token(t, True) for t in extra if _token_text(t) is not None]
  extra_tokens += [_added_token(t, bool(t.get("special", False))) for _, t in sorted(
      (config.get("added_tokens_decoder") or {}).items(), key=lambda kv: int(kv[0]))]
  return Tokenizer(backend, chat_template=_folder_chat_template(path, config),
                   special_tokens={k: v for k, v in special_tokens.items() if v is not None},
                   source=path, extra_tokens=extra_tokens)


def _read_json(path: pathlib.Path) -> dict:
  """The object in an optional JSON file ({} where there is none)."""
  return tables.read_json_object(path) if path.is_file() else {}


def _folder_chat_template(folder: pathlib.Path, config: dict) -> str | None:
  """The folder's chat template, from where transformers 5 looks first (then processors)."""
  templates = {}
  if (folder / CHAT_TEMPLATE_FILE).is_file():
    templates[DEFAULT_TEMPLATE_NAME] = (folder / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
  if (folder / CHAT_TEMPLATE_DIR).is_dir():
    for file in sorted((folder / CHAT_TEMPLATE_DIR).glob("*.jinja")):
      templates[file.name.removesuffix(".jinja")] = file.read_text(encoding="utf-8")
  if templates:
    return _default_template(templates, folder)
  if config.get("chat_template"):
    return _default_template(config["chat_template"], folder / CONFIG_FILE)
  processor_file = folder / PROCESSOR_CHAT_TEMPLATE_FILE
  return _default_template(_read_json(processor_file).get("chat_template"), processor_file)


def _default_template(template: Any, where: str | os.PathLike) -> str | None:
  """One template: a string as is; of named ones (a dict, or a list of name/template dicts as
  configs store them), the one named "default", as transformers picks it when given no tools."""
  if isinstance(template, list):
    template = {t["name"]: t["template"] for t in template}
  if isinstance(template, dict):
    if DEFAULT_TEMPLATE_NAME not in template:
      raise InputError(f"several chat templates ({', '.join(sorted(template))}) and none named "
                       f"{DEFAULT_TEMPLATE_NAME!r}", where)
    template = template[DEFAULT_TEMPLATE_NAME]
  return template or None


# The jinja2 environment of transformers' chat templates (transformers.utils.chat_template_utils):
# sandboxed and immutable, blocks trimmed, `break`/`continue`, and these globals and filters.
def _raise_exception(message):
  raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
  # Not jinja2's own `tojson`, which escapes HTML characters.
  return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                    sort_keys=sort_keys)


def _strftime_now(format_string):
  return datetime.datetime.now().strftime(format_string)


class _TemplateDict:
  """`dict(...)` and `dict.fromkeys(...)` for templates, without the type itself."""

  def __call__(self, *args, **kwargs):
    return dict(*args, **kwargs)

  def fromkeys(self, *args, **kwargs):
    return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
  """jinja2's `namespace()`, refusing underscore-prefixed attribute names."""

  def __init__(*args, **kwargs):  # pylint: disable=no-method-argument
    self, args = args[0], args[1:]  # Jinja's own signature trick: `namespace(self=...)` works.
    attrs = dict(*args, **kwargs)
    for name in attrs:
      _TemplateNamespace.check_name(name)
    jinja2.utils.Namespace.__init__(self, attrs)

  def __setitem__(self, name, value):
    _TemplateNamespace.check_name(name)
    jinja2.utils.Namespace.__setitem__(self, name, value)

  @staticmethod
  def check_name(name):
    if isinstance(name, str) and name.startswith("_"):
      raise jinja2.exceptions.SecurityError(
          f"chat templates cannot store underscore-prefixed attributes, got {name!r}")


class _GenerationBlock(jinja2.ext.Extension):
  """`{% generation %}...{% endgeneration %}` (marks assistant text for masks): renders its body."""
  tags = {"generation"}

  def parse(self, parser):
    lineno = next(parser.stream).lineno
    body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
    return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

  def _body(self, caller):
    return caller()


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
  env = jinja2.sandbox.ImmutableSandboxedEnvironment(
      trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols])
  env.filters["tojson"] = _tojson
  env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                     dict=_TemplateDict(), namespace=_TemplateNamespace)
  return env.from_string(template)
