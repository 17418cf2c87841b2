"""Bad inputs through every command: each is refused with exit code 2 and one line on stderr,
`socialrm-<command>: error: ...`, that names the flag or the file at fault, with no traceback, and
leaves no output behind: the row's folder, where its outputs would go, is as it was, so nothing
that looks finished (run.json, metrics.json, report.md, an items table) appears, and what was
there before is unchanged. `--debug` shows the traceback instead.

Each row runs its command in this process as the console script runs it (`main.command`): the
command's flags defined on a `FlagValues` of the row's own and parsed from the row's arguments,
then the command's `main` given the settings, which checks them (the orchestrator's checks among
them) and does the work; a refused flag or an `InputError` becomes the line the command prints
(`command.error_line`), anything else fails the row with its traceback. A few rows run the
command in a process of its own, through `python -m socialrm_jax.main.<command>`, the exit code
and stderr as a user sees them: those that need what only a new process has (an environment
variable read when a library is imported, such as HF_HUB_OFFLINE; JAX left to choose its
platforms, where no libtpu start-up errors, nor the traceback of JAX's CUDA plugin failing its
start, may show on a machine without a TPU or GPU where they are installed). A row that
`succeeds` is an input once refused that now works: it runs through, and the file it names is
written. A scoring row may leave the run's manifest and locks (`leaves`), from which a rerun
resumes. The rows share one set of inputs (a tiny Llama reward model and its broken copies,
converted items, scores).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pathlib
import shutil
import subprocess
import sys
from typing import Callable

import gguf
import jax
import numpy as np
import pytest
from absl import flags
from jax.experimental.compilation_cache import compilation_cache as jax_compilation_cache

from socialrm_jax.base import tables
from socialrm_jax.base.errors import InputError, USER_ERROR_EXIT_CODE
from socialrm_jax.main import command
from socialrm_jax.orchestrators import convert
from tests.helpers import scoring_fixtures as fx

BUNDLED = fx.REPO_ROOT / "socialrm_jax" / "bundled"
COMMAND_TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class Inputs:
  """What the rows share, made once."""
  root: pathlib.Path
  model: pathlib.Path            # a tiny Llama with a one-output score head, and its tokenizer
  truncated_weights: pathlib.Path
  empty_weights: pathlib.Path
  bad_config: pathlib.Path
  no_tokenizer: pathlib.Path
  truncated_gguf: pathlib.Path
  items: pathlib.Path            # the fixture items (items.jsonl) for scoring
  converted: pathlib.Path        # XSTest converted: items and pairs tables for metrics
  scores: pathlib.Path           # a score for every candidate of `converted`
  other_scores: pathlib.Path     # scores of another conversion (CrowS-Pairs)
  a_file: pathlib.Path           # a plain file where a folder is expected


def _model_copy(source: pathlib.Path, target: pathlib.Path,
                change: Callable[[pathlib.Path], None]) -> pathlib.Path:
  shutil.copytree(source, target)
  change(target)
  return target


def _truncate(path: pathlib.Path, size: int) -> None:
  with open(path, "r+b") as f:
    f.truncate(size)


def _truncated_gguf(path: pathlib.Path) -> pathlib.Path:
  """A llama GGUF file whose tensor data is cut short, as an interrupted download leaves it."""
  writer = gguf.GGUFWriter(path, "llama")
  writer.add_tensor("token_embd.weight", np.zeros((64, 32), np.float32))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  _truncate(path, path.stat().st_size - 1000)
  return path


def _score_rows(converted: pathlib.Path) -> list[dict]:
  return [{"item_id": item["item_id"], "candidate": k, "reward": float(k)}
          for item in tables.read_rows(converted, "items") for k in range(len(item["candidates"]))]


def _without_tokenizer(folder: pathlib.Path) -> None:
  for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
               "chat_template.jinja"):
    (folder / name).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Inputs:
  root = tmp_path_factory.mktemp("bad_inputs")
  model = root / "rm"
  model.mkdir()
  fx.make_llama(model)
  weights = "model.safetensors"
  tables.write_rows(root / "items" / "items.jsonl", fx.all_items())
  convert.convert_to(root / "xstest", BUNDLED, "xstest", "jsonl")
  convert.convert_to(root / "crows", BUNDLED, "crows_pairs", "jsonl")
  tables.write_rows(root / "scores" / "scores.jsonl", _score_rows(root / "xstest"))
  tables.write_rows(root / "other_scores" / "scores.jsonl", _score_rows(root / "crows"))
  (root / "a_file").write_text("not a folder\n")
  return Inputs(
      root=root, model=model,
      truncated_weights=_model_copy(model, root / "rm_truncated", lambda d: _truncate(
          d / weights, (d / weights).stat().st_size // 2)),
      empty_weights=_model_copy(model, root / "rm_empty", lambda d: _truncate(d / weights, 0)),
      bad_config=_model_copy(model, root / "rm_bad_config", lambda d: (d / "config.json")
                             .write_text('{"architectures": ["LlamaForSequenceClassification"')),
      no_tokenizer=_model_copy(model, root / "rm_no_tokenizer", _without_tokenizer),
      truncated_gguf=_truncated_gguf(root / "truncated.gguf"), items=root / "items",
      converted=root / "xstest", scores=root / "scores", other_scores=root / "other_scores",
      a_file=root / "a_file")


# A row builds its command line from the shared inputs and its own folder (where it may write
# inputs of its own, and where its outputs go), and says what the error must name.
Build = Callable[[Inputs, pathlib.Path], tuple[list[str], str]]


@dataclasses.dataclass(frozen=True)
class Row:
  command: str  # the module under socialrm_jax
  name: str
  build: Build
  # False: the command runs without JAX_PLATFORMS, choosing its platforms itself.
  jax_platforms_set: bool = True
  # Files (under the row's folder) the command may leave: a scoring run's manifest and locks,
  # from which a rerun resumes; nothing that looks finished.
  leaves: tuple[str, ...] = ()
  # An input once refused or mishandled that now works: exit 0, and `names` exists afterwards.
  succeeds: bool = False
  # Environment variables the command runs with, `{here}` standing for the row's folder.
  env: tuple[tuple[str, str], ...] = ()

  @property
  def program(self) -> str:
    return "socialrm-" + self.command.replace("_", "-")

  @property
  def in_process(self) -> bool:
    """Whether this process can run the row: JAX, imported here, reads JAX_PLATFORMS once, and
    an environment variable of the row's may be read when a library is imported."""
    return self.jax_platforms_set and not self.env

  @property
  def id(self) -> str:
    return f"{self.command}-{self.name}"


def _score(model_of: Callable[[Inputs], pathlib.Path], *flags: str, names: str | None = None
           ) -> Build:
  """socialrm-score on the fixture items into the row's folder; the error names `names`, else
  the model's file or folder."""
  def build(i: Inputs, here: pathlib.Path):
    model = model_of(i)
    return ([f"--model={model}", f"--items={i.items}", f"--output_dir={here / 'scores'}",
             "--max_length=256", "--tokens_per_batch=1024", *flags], names or str(model))
  return build


def _broken_items(i: Inputs, here: pathlib.Path) -> pathlib.Path:
  """The fixture items with their second row cut in half."""
  lines = (i.items / "items.jsonl").read_text().splitlines(keepends=True)
  lines[1] = lines[1][:len(lines[1]) // 2] + "\n"
  (here / "items").mkdir()
  (here / "items" / "items.jsonl").write_text("".join(lines))
  return here / "items"


def _score_broken_items(i: Inputs, here: pathlib.Path):
  items = _broken_items(i, here)
  return ([f"--model={i.model}", f"--items={items}", f"--output_dir={here / 'scores'}"],
          f"{items / 'items.jsonl'}, row 2")


def _counterfactuals_broken_items(i: Inputs, here: pathlib.Path):
  items = _broken_items(i, here)
  return [f"--items={items}", f"--output_dir={here / 'swaps'}"], f"{items / 'items.jsonl'}, row 2"


def _score_item_without_id(i: Inputs, here: pathlib.Path):
  rows = tables.read_rows(i.items, "items")
  del rows[2]["item_id"]
  tables.write_rows(here / "items" / "items.jsonl", rows)
  return ([f"--model={i.model}", f"--items={here / 'items'}", f"--output_dir={here / 'scores'}"],
          f"{here / 'items'}, row 3")


def _metrics_damaged_scores(i: Inputs, here: pathlib.Path):
  """A scores.parquet cut short, as a full disk leaves it."""
  tables.write_rows(here / "scores" / "scores.parquet", _score_rows(i.converted), "parquet")
  _truncate(here / "scores" / "scores.parquet", 100)
  return ([f"--items={i.converted}", f"--scores={here / 'scores'}",
           f"--output_dir={here / 'report'}", "--n_resamples=10"],
          str(here / "scores" / "scores.parquet"))


def _metrics(scores_of: Callable[[Inputs], str], *flags: str, names: str) -> Build:
  def build(i: Inputs, here: pathlib.Path):
    return ([f"--items={i.converted}", f"--scores={scores_of(i)}",
             f"--output_dir={here / 'report'}", "--n_resamples=10", *flags], names)
  return build


def _metrics_broken_items(i: Inputs, here: pathlib.Path):
  shutil.copytree(i.converted, here / "converted")
  items = here / "converted" / "items.jsonl"
  lines = items.read_text().splitlines(keepends=True)
  items.write_text(lines[0] + "{broken\n" + "".join(lines[1:]))
  return ([f"--items={here / 'converted'}", f"--scores={i.scores}",
           f"--output_dir={here / 'report'}", "--n_resamples=10"], f"{items}, row 2")


def _metrics_second_set_bad(i: Inputs, here: pathlib.Path):
  """Two scores sets, the second of another conversion: not even the first one's metrics.json
  may appear."""
  return ([f"--items={i.converted}", f"--scores={i.scores},{i.other_scores}",
           f"--output_dir={here / 'report'}", "--n_resamples=10"], str(i.other_scores))


def _audit(arg: Callable[[Inputs, pathlib.Path], str], *flags: str,
           names: str | Callable[[Inputs], str]) -> Build:
  """socialrm-audit with the bundled-suite config and `arg` as the config's argument."""
  def build(i: Inputs, here: pathlib.Path):
    return ([f"--config=configs/bundled_suite.py:{arg(i, here)}", *flags],
            names if isinstance(names, str) else names(i))
  return build


def _audit_of(model_of: Callable[[Inputs], pathlib.Path],
              out_of: Callable[[Inputs, pathlib.Path], pathlib.Path] | None = None):
  """The config argument auditing `model_of` into `out_of` (default: the row's `run/`)."""
  def arg(i: Inputs, here: pathlib.Path) -> str:
    output = out_of(i, here) if out_of else here / "run"
    return f"hf_model={model_of(i)},name=rm,output_dir={output}"
  return arg


def _checkpoint(input_of: Callable[[Inputs], pathlib.Path], *flags: str, names: str | None = None,
                output_of: Callable[[Inputs, pathlib.Path], pathlib.Path] | None = None) -> Build:
  """socialrm-convert-checkpoint into the row's `native/`; the error names `names`, else the
  input's file or folder."""
  def build(i: Inputs, here: pathlib.Path):
    output = output_of(i, here) if output_of else here / "native"
    source = input_of(i)
    return ([f"--input={source}", f"--output={output}", *flags],
            names if names is not None else str(source))
  return build


def _checkpoint_into_non_empty(i: Inputs, here: pathlib.Path):
  (here / "native").mkdir()
  (here / "native" / "keep.txt").write_text("an earlier file\n")
  return [f"--input={i.model}", f"--output={here / 'native'}"], str(here / "native")


def _convert(*flags: str, names: str) -> Build:
  return lambda i, here: ([f"--output_dir={here / 'converted'}", *flags], names)


def _convert_broken_row(i: Inputs, here: pathlib.Path):
  source = here / "prefs.jsonl"
  source.write_text('{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"prompt": "a", "cho\n')
  return ([f"--datasets=preference:{source}", f"--output_dir={here / 'converted'}"],
          f"{source}, row 2")


def _convert_source(text: str, file_name: str, row: int | None) -> Build:
  """socialrm-convert on a preference source of the row's own (`text` in `file_name`); the error
  names the file, and the row when `row` is given."""
  def build(i: Inputs, here: pathlib.Path):
    source = here / file_name
    source.write_text(text)
    return ([f"--datasets=preference:{source}", f"--output_dir={here / 'converted'}"],
            f"{source}, row {row}" if row else str(source))
  return build


def _metrics_edited(table: str, edit: Callable[[dict], None]) -> Build:
  """socialrm-metrics on the converted tables with the first row of `table` (items or pairs)
  edited; the error names that file and row 1."""
  def build(i: Inputs, here: pathlib.Path):
    shutil.copytree(i.converted, here / "converted")
    path = here / "converted" / f"{table}.jsonl"
    rows = tables.read_rows(path, table)
    edit(rows[0])
    tables.write_rows(path, rows)
    return ([f"--items={here / 'converted'}", f"--scores={i.scores}",
             f"--output_dir={here / 'report'}", "--n_resamples=10"], f"{path}, row 1")
  return build


def _into_a_file(flag: str, rest: Callable[[Inputs], list[str]]) -> Build:
  return lambda i, here: ([f"--{flag}={i.a_file}", *rest(i)], str(i.a_file))


def _scan_model(change: Callable[[pathlib.Path], None]) -> Build:
  """socialrm-vocab-scan of a copy of the model changed by `change`; the error names the copy."""
  def build(i: Inputs, here: pathlib.Path):
    model = _model_copy(i.model, here / "rm", change)
    return [f"--model={model}", f"--output_dir={here / 'scan'}", "--max_tokens=8"], str(model)
  return build


def _without_chat_template(folder: pathlib.Path) -> None:
  (folder / "chat_template.jinja").unlink(missing_ok=True)
  config = json.loads((folder / "tokenizer_config.json").read_text())
  config.pop("chat_template", None)
  (folder / "tokenizer_config.json").write_text(json.dumps(config))


def _with_more_tokens_than_embeddings(folder: pathlib.Path) -> None:
  import tokenizers  # pylint: disable=import-outside-toplevel
  backend = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
  backend.add_tokens(["<no embedding>"])
  backend.save(str(folder / "tokenizer.json"))


def _with_a_value_head_tensor(folder: pathlib.Path) -> None:
  """GRM's value head saved beside a standard classifier's tensors, which no loader reads."""
  from safetensors.numpy import load_file, save_file  # pylint: disable=import-outside-toplevel
  tensors = load_file(folder / "model.safetensors")
  tensors["v_head.summary.weight"] = np.ones((1, 32), np.float32)
  save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def _with_an_unknown_auto_map_class(folder: pathlib.Path) -> None:
  config = json.loads((folder / "config.json").read_text())
  config["architectures"] = ["MyRewardModel"]
  config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_mine.MyRewardModel"}
  (folder / "config.json").write_text(json.dumps(config))


def _score_gated_without_its_pattern(i: Inputs, here: pathlib.Path):
  """An ArmoRM-shaped model whose tokenizer's chat template never writes Llama 3's assistant
  header: its gate cannot be read; the first item is named."""
  from tests.helpers import reward_head_fixtures as rh  # pylint: disable=import-outside-toplevel
  (here / "armorm").mkdir()
  rh.make_armorm(here / "armorm", llama3_ids=False)
  first = fx.all_items()[0]["item_id"]
  return _score(lambda _: here / "armorm", names=f"item {first!r}")(i, here)


def _without_generation_prompt(folder: pathlib.Path) -> None:
  """The fixture template less its generation-prompt branch: it renders an assistant's turn only
  when one is given."""
  branch = "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
  template = folder / "chat_template.jinja"
  if template.is_file():
    assert branch in template.read_text()
    template.write_text(template.read_text().replace(branch, ""))
  else:
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert branch in config["chat_template"]
    config["chat_template"] = config["chat_template"].replace(branch, "")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def _scan_without_generation_prompt(i: Inputs, here: pathlib.Path):
  build = _scan_model(_without_generation_prompt)
  args, _ = build(i, here)
  return args, str(here / "scan" / "vocab_scores.parquet")


def _convert_skipping_every_row(i: Inputs, here: pathlib.Path):
  source = here / "prefs.jsonl"
  source.write_text('{"prompt": "a", "chosen": "", "rejected": "c"}\n'
                    '{"prompt": "b", "chosen": "d", "rejected": ""}\n')
  return ([f"--datasets=preference:{source}", f"--output_dir={here / 'converted'}",
           "--on_error=skip"], str(source))


def _loglik_of_an_empty_response(i: Inputs, here: pathlib.Path):
  """A language model without a chat template (the plain format) and without an end-of-sequence
  token, so an empty response has no token; the error names the item."""
  fx.make_llama(here / "lm", head="lm", with_template=False)
  config = json.loads((here / "lm" / "tokenizer_config.json").read_text())
  del config["eos_token"]
  (here / "lm" / "tokenizer_config.json").write_text(json.dumps(config))
  item = fx.all_items()[0]
  tables.write_rows(here / "items" / "items.jsonl",
                    [dict(item, candidates=["", *item["candidates"][1:]])])
  return ([f"--model={here / 'lm'}", f"--items={here / 'items'}",
           f"--output_dir={here / 'scores'}", "--proxy=loglik"], repr(item["item_id"]))


def _scan_empty_prompts(i: Inputs, here: pathlib.Path):
  (here / "prompts.txt").write_text("\n  \n")
  return ([f"--model={i.model}", f"--output_dir={here / 'scan'}",
           f"--prompts={here / 'prompts.txt'}"], str(here / "prompts.txt"))


def _config_file(here: pathlib.Path, settings: dict) -> pathlib.Path:
  """A config file (ml_collections) in the row's folder whose get_config() returns `settings`."""
  path = here / "config.py"
  path.write_text("import ml_collections\n\n\ndef get_config():\n"
                  f"  return ml_collections.ConfigDict({settings!r})\n")
  return path


def _unknown_config_key(i: Inputs, here: pathlib.Path):
  """Any command's config file with a key of no setting: refused before any work, naming it."""
  return [f"--config={_config_file(here, {'max_lenght': 512})}"], "--config sets max_lenght"


def _score_flag_over_config(i: Inputs, here: pathlib.Path):
  """The file's chunk_size (4) would score; the flag's (0) is refused: the flag won."""
  config = _config_file(here, {"model": str(i.model), "items": str(i.items),
                               "output_dir": str(here / "scores"), "chunk_size": 4})
  return [f"--config={config}", "--chunk_size=0"], "--chunk_size"


# Every command takes a config file (base/settings.py), and refuses a key of no setting in it.
CONFIG_ROWS = [Row(command, "config_file_with_an_unknown_key", _unknown_config_key)
               for command in ("convert", "score", "metrics", "audit", "convert_checkpoint",
                               "probe", "ablation", "vocab_scan", "counterfactuals", "plan",
                               "fetch", "train", "validate")]


ROWS = [
    # socialrm-convert
    Row("convert", "output_dir_is_a_file", _into_a_file(
        "output_dir", lambda i: [f"--data_dir={BUNDLED}", "--datasets=xstest"])),
    Row("convert", "output_dir_under_a_file", lambda i, here: (
        [f"--output_dir={i.a_file / 'sub'}", f"--data_dir={BUNDLED}", "--datasets=xstest"],
        str(i.a_file))),
    Row("convert", "missing_data_dir", lambda i, here: (
        [f"--output_dir={here / 'converted'}", f"--data_dir={here / 'nowhere'}",
         "--datasets=xstest"], str(here / "nowhere"))),
    Row("convert", "unknown_dataset", _convert("--datasets=no_such_dataset",
                                               names="no_such_dataset")),
    Row("convert", "unknown_format", _convert("--format=xml", "--datasets=xstest",
                                              names="--format")),
    Row("convert", "missing_output_dir", lambda i, here: (["--datasets=xstest"], "--output_dir")),
    Row("convert", "templates_of_an_unknown_dataset", _convert(
        f"--data_dir={BUNDLED}", "--datasets=xstest", "--templates=no_such_dataset=all",
        names="--templates")),
    Row("convert", "templates_given_twice", _convert(
        f"--data_dir={BUNDLED}", "--datasets=xstest", "--templates=xstest=all,xstest=default",
        names="given templates twice")),
    Row("convert", "broken_json_row", _convert_broken_row),
    Row("convert", "preference_mixed_types_in_a_column", _convert_source(
        '{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"prompt": "a", "chosen": 5, '
        '"rejected": "c"}\n', "prefs.jsonl", 2)),
    Row("convert", "preference_empty_prompt", _convert_source(
        '{"prompt": "", "chosen": "b", "rejected": "c"}\n', "prefs.jsonl", 1)),
    # RewardBench 2-shaped rows (lists of responses), each refused naming its row.
    Row("convert", "rewardbench2_num_correct_larger_than_the_list", _convert_source(
        '{"id": "0", "prompt": "a", "chosen": ["b"], "rejected": ["c", "d"], "num_correct": 2}\n',
        "rb2.jsonl", 1)),
    Row("convert", "rewardbench2_empty_rejected_list", _convert_source(
        '{"id": "0", "prompt": "a", "chosen": ["b"], "rejected": ["c"], "num_correct": 1}\n'
        '{"id": "1", "prompt": "a", "chosen": ["b"], "rejected": [], "num_correct": 1}\n',
        "rb2.jsonl", 2)),
    Row("convert", "rewardbench2_lists_of_different_types", _convert_source(
        '{"id": "0", "prompt": "a", "chosen": ["b", "c"], "rejected": "d"}\n', "rb2.jsonl", 1)),
    Row("convert", "rewardbench2_ties_id_without_its_reference", _convert_source(
        '{"id": "ref:0", "prompt": "a", "chosen": ["b"], "rejected": ["c"], "subset": "Ties"}\n'
        '{"id": "tied:1", "prompt": "e", "chosen": ["b", "f"], "rejected": ["c"], '
        '"subset": "Ties"}\n', "rb2.jsonl", 2)),
    Row("convert", "skip_keeps_no_row", _convert_skipping_every_row),
    Row("convert", "parquet_that_is_json", _convert_source(
        '{"prompt": "a", "chosen": "b", "rejected": "c"}\n', "prefs.parquet", None)),
    # socialrm-score
    Row("score", "loglik_of_an_empty_response_without_end_of_turn",
        _loglik_of_an_empty_response,
        leaves=("scores", "scores/manifest.json", "scores/.manifest.lock",
                "scores/.writer-00000.lock")),
    Row("score", "truncated_safetensors",
        _score(lambda i: i.truncated_weights, names="model.safetensors")),
    Row("score", "empty_safetensors", _score(lambda i: i.empty_weights, names="model.safetensors")),
    Row("score", "invalid_config_json", _score(lambda i: i.bad_config, names="config.json")),
    Row("score", "no_tokenizer_files", _score(lambda i: i.no_tokenizer, names="tokenizer.json")),
    Row("score", "truncated_gguf", _score(lambda i: i.truncated_gguf)),
    Row("score", "no_such_model", _score(lambda i: i.root / "no_model", names="--model")),
    Row("score", "output_dir_is_a_file", lambda i, here: (
        [f"--model={i.model}", f"--items={i.items}", f"--output_dir={i.a_file}"], str(i.a_file))),
    Row("score", "chunk_size_0", _score(lambda i: i.model, "--chunk_size=0", names="--chunk_size")),
    Row("score", "chunk_size_negative",
        _score(lambda i: i.model, "--chunk_size=-2", names="--chunk_size")),
    Row("score", "max_length_0", _score(lambda i: i.model, "--max_length=0", names="--max_length")),
    Row("score", "objective_beyond_the_head",
        _score(lambda i: i.model, "--objective=3", names="--objective=3")),
    Row("score", "objective_weights_beyond_the_head",
        _score(lambda i: i.model, "--objective_weights=1,1", names="--objective_weights")),
    Row("score", "malformed_mesh", _score(lambda i: i.model, "--mesh=data:x", names="--mesh")),
    Row("score", "unknown_dtype", _score(lambda i: i.model, "--dtype=float16", names="--dtype")),
    Row("score", "implicit_without_ref_model",
        _score(lambda i: i.model, "--proxy=implicit", names="--ref_model")),
    Row("score", "unknown_dataset_filter",
        _score(lambda i: i.model, "--datasets=no_such_dataset", names="--datasets")),
    Row("score", "compilation_cache_is_a_file", lambda i, here: _score(
        lambda i: i.model, f"--compilation_cache={i.a_file}", names="--compilation_cache")(i, here)),
    Row("score", "missing_items", lambda i, here: (
        [f"--model={i.model}", f"--items={here / 'no_items'}", f"--output_dir={here / 'scores'}"],
        str(here / "no_items"))),
    Row("score", "broken_items_row", _score_broken_items),
    Row("score", "head_tensors_left_unused", lambda i, here: _score(
        lambda _: _model_copy(i.model, here / "rm", _with_a_value_head_tensor),
        names="v_head.summary.weight")(i, here)),
    Row("score", "unknown_auto_map_class", lambda i, here: _score(
        lambda _: _model_copy(i.model, here / "rm", _with_an_unknown_auto_map_class),
        names="AutoModelForSequenceClassification: modeling_mine.MyRewardModel")(i, here)),
    Row("score", "gated_head_without_its_prompt_pattern", _score_gated_without_its_pattern),
    Row("score", "item_without_id", _score_item_without_id),
    # A Hub id offline, not in the Hub cache: the command that fills it, once the AttributeError
    # of huggingface_hub.constants (tests/models/test_hub.py resolves one that is there).
    Row("score", "flag_wins_over_the_config_file", _score_flag_over_config),
    Row("score", "offline_hub_id_not_in_the_cache",
        _score(lambda i: "other-org/absent@v1",
               names="`hf download other-org/absent --revision v1` fills the cache"),
        env=(("HF_HUB_OFFLINE", "1"), ("HF_HUB_CACHE", "{here}/hub_cache"))),
    # socialrm-metrics
    Row("metrics", "output_dir_is_a_file", _into_a_file(
        "output_dir", lambda i: [f"--items={i.converted}", f"--scores={i.scores}"])),
    Row("metrics", "names_count_mismatch",
        _metrics(lambda i: str(i.scores), "--names=a,b", names="--names")),
    Row("metrics", "scores_of_other_items",
        _metrics(lambda i: str(i.other_scores), names="other_scores")),
    Row("metrics", "second_scores_set_of_other_items", _metrics_second_set_bad),
    Row("metrics", "missing_scores",
        _metrics(lambda i: str(i.root / "no_scores"), names="no_scores")),
    Row("metrics", "broken_items_row", _metrics_broken_items),
    Row("metrics", "empty_items", lambda i, here: (
        ["--items=", f"--scores={i.scores}", f"--output_dir={here / 'report'}"], "--items")),
    Row("metrics", "damaged_scores_parquet", _metrics_damaged_scores),
    Row("metrics", "nan_candidate_index", _metrics_edited(
        "pairs", lambda row: row.update(chosen_index=float("nan")))),
    Row("metrics", "candidate_index_as_text", _metrics_edited(
        "pairs", lambda row: row.update(rejected_index="1"))),
    Row("metrics", "infinite_desirability", _metrics_edited(
        "items", lambda row: row["desirability"].__setitem__(0, float("inf")))),
    Row("metrics", "zero_resamples",
        _metrics(lambda i: str(i.scores), "--n_resamples=0", names="--n_resamples")),
    # socialrm-audit
    Row("audit", "config_argument_without_equals", _audit(lambda i, here: "hf_model",
                                                         names="--config")),
    Row("audit", "missing_config_file", lambda i, here: (
        [f"--config={here / 'no_config.py'}"], "no_config.py")),
    Row("audit", "no_config", lambda i, here: ([], "--config")),
    Row("audit", "override_of_an_unknown_field",
        _audit(_audit_of(lambda i: i.model), "--config.metrics.no_such_field=1",
               names="no_such_field")),
    Row("audit", "no_such_model", _audit(_audit_of(lambda i: i.root / "no_model"),
                                         names="config.models.rm.path")),
    Row("audit", "output_dir_is_a_file", _audit(
        _audit_of(lambda i: i.model, lambda i, here: i.a_file), names=lambda i: str(i.a_file))),
    Row("audit", "chunk_size_0", _audit(_audit_of(lambda i: i.model),
                                        "--config.models.rm.chunk_size=0", names="--chunk_size")),
    # The file's output_dir (the row's run/) would audit; the flag's (a file) is refused.
    Row("audit", "flag_wins_over_the_config_file", lambda i, here: _audit(
        _audit_of(lambda i: i.model), f"--output_dir={i.a_file}",
        names=lambda i: str(i.a_file))(i, here)),
    Row("audit", "truncated_safetensors", _audit(_audit_of(lambda i: i.truncated_weights),
                                                 names="model.safetensors")),
    # socialrm-convert-checkpoint
    Row("convert_checkpoint", "output_is_a_file", _checkpoint(
        lambda i: i.model, names="--output", output_of=lambda i, here: i.a_file)),
    Row("convert_checkpoint", "output_not_empty", _checkpoint_into_non_empty),
    Row("convert_checkpoint", "no_such_input",
        _checkpoint(lambda i: i.root / "no_model", names="--input")),
    Row("convert_checkpoint", "truncated_safetensors",
        _checkpoint(lambda i: i.truncated_weights, names="model.safetensors")),
    Row("convert_checkpoint", "truncated_gguf", _checkpoint(lambda i: i.truncated_gguf)),
    Row("convert_checkpoint", "unknown_dtype",
        _checkpoint(lambda i: i.model, "--dtype=float16", names="--dtype")),
    # socialrm-counterfactuals
    Row("counterfactuals", "output_dir_is_a_file", _into_a_file(
        "output_dir", lambda i: [f"--items={i.converted}"])),
    Row("counterfactuals", "broken_items_row", _counterfactuals_broken_items),
    Row("counterfactuals", "nothing_to_swap", lambda i, here: (
        [f"--items={i.converted}", f"--output_dir={here / 'swaps'}"], str(i.converted))),
    Row("counterfactuals", "missing_items", lambda i, here: (
        [f"--items={i.root / 'no_items'}", f"--output_dir={here / 'swaps'}"], "no_items")),
    # socialrm-probe
    Row("probe", "output_dir_is_a_file", _into_a_file("output_dir", lambda i: [
        f"--model={i.model}"])),
    Row("probe", "negative_words_per_category", lambda i, here: (
        [f"--model={i.model}", f"--output_dir={here / 'probe'}", "--words_per_category=-1"],
        "--words_per_category")),
    Row("probe", "no_tokenizer_files", lambda i, here: (
        [f"--model={i.no_tokenizer}", f"--output_dir={here / 'probe'}"], "tokenizer.json")),
    # socialrm-vocab-scan
    Row("vocab_scan", "no_chat_template", _scan_model(_without_chat_template)),
    Row("vocab_scan", "embedding_smaller_than_vocabulary",
        _scan_model(_with_more_tokens_than_embeddings)),
    Row("vocab_scan", "empty_prompts_file", _scan_empty_prompts),
    Row("vocab_scan", "zero_max_tokens", lambda i, here: (
        [f"--model={i.model}", f"--output_dir={here / 'scan'}", "--max_tokens=0"],
        "--max_tokens")),
    # JAX left to choose its platforms where libtpu is installed (make test installs it): one
    # line still, none of libtpu's start-up errors.
    Row("vocab_scan", "no_chat_template_platforms_unset", _scan_model(_without_chat_template),
        jax_platforms_set=False),
    Row("vocab_scan", "template_without_generation_prompt", _scan_without_generation_prompt,
        succeeds=True),
    # socialrm-plan (GPU targets; the TPU rows are tests/orchestrators/test_plan.py's)
    Row("plan", "more_gpus_than_a_host_has", lambda i, here: (
        ["--topology=h100x16", "--model_shape=llama3.2-1b", f"--output_dir={here / 'plan'}"],
        "--topology")),
    Row("plan", "memory_fraction_of_a_tpu", lambda i, here: (
        ["--topology=v5e:2x2", "--memory_fraction=0.9", "--model_shape=llama3.2-1b",
         f"--output_dir={here / 'plan'}"], "--memory_fraction")),
    Row("plan", "unknown_training_mode", lambda i, here: (
        ["--topology=h100", "--train=half", "--model_shape=llama3.2-1b",
         f"--output_dir={here / 'plan'}"], "--train")),
    Row("plan", "lora_of_rank_0", lambda i, here: (
        ["--topology=h100", "--train=lora", "--lora_rank=0", "--model_shape=llama3.2-1b",
         f"--output_dir={here / 'plan'}"], "--lora_rank")),
    # JAX left to choose its platforms where its CUDA plugin is installed (make test installs
    # it): the compile-only GPUs are made all the same, and the error is one line.
    Row("plan", "splash_on_a_gpu_platforms_unset", lambda i, here: (
        ["--topology=h100", f"--model={i.model}", "--attention=splash",
         f"--output_dir={here / 'plan'}"], "attention='splash'"), jax_platforms_set=False),
] + CONFIG_ROWS


def _tree(folder: pathlib.Path) -> dict[str, bytes | None]:
  """Every file (its bytes) and folder (None) under `folder`, hidden ones too."""
  return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
          for p in sorted(folder.rglob("*"))}


@dataclasses.dataclass(frozen=True)
class Outcome:
  returncode: int
  stderr: str
  names: str                    # what the error must name
  before: dict[str, bytes | None]  # the row's folder before the command ...
  after: dict[str, bytes | None]   # ... and after


# The jax settings a command's compilation cache sets (`runtime/compilation_cache.py`): put back
# after each row run here, so no later test of this process compiles into a row's cache.
CACHE_SETTINGS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                  "jax_persistent_cache_min_entry_size_bytes")


def _in_process(row: Row, args: list[str]) -> tuple[int, str]:
  """The row's command in this process, as `Command.run` runs it: (exit code, stderr)."""
  cmd = importlib.import_module(f"socialrm_jax.main.{row.command}").COMMAND
  values = flags.FlagValues()
  holder = cmd.define_flags(values)
  try:
    values([cmd.program, *args])
  except Exception as error:  # pylint: disable=broad-except  # re-raised unless the user's
    message = command.flag_refusal(error)
    if message is None:
      raise
    return USER_ERROR_EXIT_CODE, command.error_line(cmd.program, message)
  try:
    cmd.main(holder.value)
  except InputError as error:
    return USER_ERROR_EXIT_CODE, command.error_line(cmd.program, str(error))
  return 0, ""


def _run(row: Row, i: Inputs, monkeypatch) -> Outcome:
  here = i.root / "rows" / row.id
  here.mkdir(parents=True)
  args, names = row.build(i, here)
  before, a_file = _tree(here), i.a_file.read_bytes()
  if row.in_process:
    monkeypatch.chdir(fx.REPO_ROOT)  # the config files' paths are the repository's
    # The config file flag reads its `--config.*` overrides from sys.argv, as the command has it.
    monkeypatch.setattr(sys, "argv", [row.program, *args])
    monkeypatch.setenv("XDG_CACHE_HOME", str(i.root / "cache"))  # a default compilation cache
    cache = {name: getattr(jax.config, name) for name in CACHE_SETTINGS}
    try:
      returncode, stderr = _in_process(row, args)
    finally:
      for name, value in cache.items():
        jax.config.update(name, value)
      jax_compilation_cache.reset_cache()
  else:
    env = {**fx.subprocess_env(), **{k: v.format(here=here) for k, v in row.env}}
    if not row.jax_platforms_set:
      del env["JAX_PLATFORMS"]
    done = subprocess.run([sys.executable, "-m", f"socialrm_jax.main.{row.command}", *args],
                          cwd=fx.REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    returncode, stderr = done.returncode, done.stderr
  assert i.a_file.read_bytes() == a_file
  return Outcome(returncode, stderr, names, before, _tree(here))


# What libtpu prints when it starts on a machine without a TPU.
LIBTPU_NOISE = ("TPU_WORKER_HOSTNAMES", "Failed to find host bounds", "libtpu")


def _param(row: Row):
  marks = () if row.in_process else (pytest.mark.slow,)  # a Python, JAX and the package anew
  return pytest.param(row, id=row.id, marks=marks)


@pytest.mark.parametrize("row", [_param(row) for row in ROWS])
def test_bad_input_is_refused_in_one_line(row, inputs, monkeypatch):
  outcome = _run(row, inputs, monkeypatch)
  stderr = outcome.stderr
  assert "Traceback" not in stderr, stderr[-3000:]
  assert not [mark for mark in LIBTPU_NOISE if mark in stderr], stderr[-3000:]
  if row.succeeds:
    assert outcome.returncode == 0, stderr[-3000:]
    assert pathlib.Path(outcome.names).is_file(), outcome.names
    return
  assert outcome.returncode == USER_ERROR_EXIT_CODE, stderr[-3000:]
  last = [line for line in stderr.splitlines() if line.strip()][-1]
  assert last.startswith(f"{row.program}: error: "), stderr[-3000:]
  assert outcome.names in last, last
  assert stderr.count(f"{row.program}: error:") == 1, stderr[-3000:]
  # Nothing written, so nothing that looks finished (run.json, metrics.json, report.md, a table):
  # the row's folder holds what it held before, byte for byte.
  after = {path: data for path, data in outcome.after.items()
           if path not in row.leaves or path in outcome.before}
  assert after == outcome.before, sorted(set(after) ^ set(outcome.before))


def test_a_few_rows_run_as_their_own_process():
  """Each family of commands has at most one row run through `python -m`, and at least one
  row shows the one line and exit code 2 end to end."""
  families = [row.command for row in ROWS if not row.in_process]
  assert families and len(families) == len(set(families)), families


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_debug_shows_the_traceback(inputs, tmp_path):
  done = subprocess.run(
      [sys.executable, "-m", "socialrm_jax.main.score", f"--model={inputs.model}",
       f"--items={inputs.items}", f"--output_dir={tmp_path / 'scores'}", "--chunk_size=0",
       "--debug"], cwd=fx.REPO_ROOT, env=fx.subprocess_env(), capture_output=True, text=True,
      timeout=COMMAND_TIMEOUT_S)
  assert done.returncode != 0
  assert "Traceback (most recent call last)" in done.stderr
  assert done.stderr.rstrip().endswith("InputError: --chunk_size must be positive, got 0")
  assert not (tmp_path / "scores").exists()
