"""Whole-process vocabulary-scan throughput: `socialrm-vocab-scan` against a per-sequence PyTorch
loop, same model, same tokens.

The reference loop is what a RewardBench-style scorer does with a vocabulary scan: every
(prompt, token) as its own sequence (the templated prompt, the token id, the template's end of
turn), in batches of `--torch_batch` (64) through transformers' AutoModelForSequenceClassification
(sdpa), reward = the head's logit at the last token. Ours computes the prompt once per row and
each token as a two-token branch after it (`scoring/vocab_rows.py`).

Presets (`--scan_preset`):
- `cpu35m`: a 35,267,584-parameter Llama-shaped reward model (hidden 512, 8 layers, 8 heads, 4 KV
  heads, intermediate 1024, 32,000 tokens: `gpu_throughput.SIZES["35m"]`), a byte-level BPE
  trained on the bundled BBQ + HH-RLHF text (which yields 4,668 tokens) and extended to 32,000 by
  merges of random pairs of its tokens (`extend_vocabulary`), a Llama-3-like chat template with
  its default system block (knowledge cutoff and today's date); the first 8,192 tokens x the two
  default prompts, float32 on CPU:
  `python -m benchmarks.gpu.vocab_scan_throughput --scan_preset=cpu35m --device=cpu`.
- `1b`: Llama 3.2 1B's layers with a 128,256-token vocabulary (the same BPE, extended to
  128,256), the whole vocabulary x both prompts, bf16 on GPU. Through the device tool (see gpu_throughput.py for the one-time `gguf`
  wheel in `.whl/`), with carry=[".whl"]:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
    PYTHONPATH=/tmp/site:$PWD python3 -m benchmarks.gpu.vocab_scan_throughput --scan_preset=1b
    --device=gpu --scan_work_dir=/tmp/vs 2>&1 | tee $OUT/log.txt; cp /tmp/vs/report-1b/* $OUT/

It builds the model once (cached in `--scan_work_dir/models`), runs ours (a cold compilation cache)
and the loop, one whole process after the other, then prints the table (process seconds, tokens
scored per second, the ratio) and the largest reward difference over the same (prompt, token)s, and
writes `report-<preset>/{results.json,table.txt}` and the logs.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import sys
import time

import numpy as np
from absl import app, flags

from benchmarks.common import child_env, module_command, timed_with_cpu
from benchmarks.gpu import gpu_throughput as gt  # its flags
from benchmarks.gpu import gpu_throughput_inputs as inputs  # the model builder
from benchmarks.gpu import gpu_throughput_presets as presets
from socialrm_jax.orchestrators import convert

# Llama 3.1's chat template, shortened: the system block with the knowledge cutoff and the date
# is always written, then each turn between header ids and <|eot_id|> (tests use it too).
CHAT_TEMPLATE = (pathlib.Path(__file__).parent / "llama3_like_chat_template.jinja").read_text()
SENTINEL = "VOCABSCANSENTINEL7f3a"


@dataclasses.dataclass(frozen=True)
class ScanPreset:
  size: presets.Size
  max_tokens: int | None   # None: the whole vocabulary
  device: str
  dtype: str
  tokens_per_batch: int


PRESETS = {
    "cpu35m": ScanPreset(presets.SIZES["35m"], 8192, "cpu", "float32", 16384),
    "1b": ScanPreset(dataclasses.replace(presets.SIZES["1b"], vocab=128_256), None, "gpu", "bfloat16",
                     65536),
}

# gpu_throughput's flags (--device, --dtype, --torch_batch, ...) are this script's too: --help
# lists them.
flags.adopt_module_key_flags(gt)
_PRESET = flags.DEFINE_enum("scan_preset", None, list(PRESETS), "The run to time.")
_WORK_DIR = flags.DEFINE_string("scan_work_dir", "runs/vocab_scan_throughput",
                                "Built models, run outputs and the report.")
_MAX_TOKENS = flags.DEFINE_integer("scan_max_tokens", None, "Tokens per prompt (default: the "
                                   "preset's).")
_CHILD = flags.DEFINE_string("scan_torch_child", None, "(internal) run the PyTorch loop, writing "
                             "its JSON here.")


def extend_vocabulary(tokenizer, target: int, seed: int = 0):
  """The BPE with merges of random pairs of its own tokens added until it has `target` ids (a
  corpus too small to learn that many merges): real, decodable tokens, deterministic."""
  import tokenizers  # pylint: disable=import-outside-toplevel
  spec = json.loads(tokenizer.to_str())
  vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
  specials = {t["content"] for t in spec["added_tokens"]}
  pieces = [t for t in vocab if t not in specials]
  rng = np.random.default_rng(seed)
  while len(vocab) + len(specials - set(vocab)) < target:
    a, b = (pieces[i] for i in rng.integers(0, len(pieces), 2))
    if a + b in vocab or len(a + b) > 16:
      continue
    vocab[a + b] = len(vocab)
    merges.append([a, b])
    pieces.append(a + b)
  return tokenizers.Tokenizer.from_str(json.dumps(spec))


def build_model(size: presets.Size, texts: list[str], models_dir: pathlib.Path) -> pathlib.Path:
  """A random-weight Llama reward model of `size` with the Llama-3-like template, built once, its
  tokenizer's vocabulary filled to the model's (`extend_vocabulary`)."""

  def tokenizer_of(texts, vocab):
    tokenizer = inputs.train_tokenizer(texts, vocab)
    return tokenizer if tokenizer.get_vocab_size() >= vocab else extend_vocabulary(tokenizer, vocab)
  return inputs.build_model(f"scan-{size.hidden}x{size.layers}-v{size.vocab}", texts, models_dir,
                            size=size, chat_template=CHAT_TEMPLATE, tokenizer_of=tokenizer_of)


def torch_child(model_dir: str, output: str, max_tokens: int | None, device: str, dtype: str,
                batch: int) -> None:
  """The per-sequence loop: each (prompt, token) as its own sequence, `batch` at a time."""
  marks = {"start": time.perf_counter()}
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  prompts = json.loads(pathlib.Path(output).with_name("prompts.json").read_text())
  torch_device = "cuda" if device == "gpu" else "cpu"
  tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      model_dir, dtype=torch.bfloat16 if dtype == "bfloat16" else torch.float32,
      attn_implementation="sdpa", local_files_only=True).to(torch_device).eval()
  marks["loaded"] = time.perf_counter()
  special = set(tokenizer.all_special_ids) | {
      i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
  tokens = [i for i in range(len(tokenizer)) if i not in special][:max_tokens]
  sequences = {}
  for prompt_id, text in prompts.items():
    turn = [{"role": "user", "content": text}]
    prefix = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(turn + [{"role": "assistant", "content": SENTINEL}],
                                         tokenize=False)
    suffix = full.split(SENTINEL)[1]
    sequences[prompt_id] = (tokenizer(prefix, add_special_tokens=False)["input_ids"],
                            tokenizer(suffix, add_special_tokens=False)["input_ids"])
  rewards, real = {}, 0
  with torch.inference_mode():
    for prompt_id, (prefix, suffix) in sequences.items():
      out = []
      for start in range(0, len(tokens), batch):
        block = tokens[start:start + batch]
        ids = torch.tensor([prefix + [t] + suffix for t in block], device=torch_device)
        out += model(input_ids=ids).logits[:, 0].float().cpu().tolist()
        real += ids.numel()
      rewards[prompt_id] = out
  marks["scored"] = time.perf_counter()
  pathlib.Path(output).write_text(json.dumps({
      "tokens": tokens, "rewards": rewards, "real_tokens": real,
      "device_name": torch.cuda.get_device_name() if torch_device == "cuda" else "cpu",
      "seconds": {"load": marks["loaded"] - marks["start"],
                  "forward": marks["scored"] - marks["loaded"]}}))


def scan_prompts() -> dict[str, str]:
  from socialrm_jax.orchestrators import vocab_scan  # pylint: disable=import-outside-toplevel  # jax
  return dict(zip(vocab_scan.DEFAULT_PROMPTS.ids, vocab_scan.DEFAULT_PROMPTS.texts))


def ours_rewards(folder: pathlib.Path) -> dict[str, dict[int, float]]:
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  out: dict[str, dict[int, float]] = {}
  for row in pq.read_table(folder / "vocab_scores.parquet").to_pylist():
    out.setdefault(row["prompt_id"], {})[row["token_id"]] = row["reward"]
  return out


def benchmark(name: str, preset: ScanPreset, max_tokens: int | None, device: str, dtype: str,
              work_dir: pathlib.Path) -> str:
  report_dir, run_dir = work_dir / f"report-{name}", work_dir / f"runs-{name}"
  for folder in (report_dir, run_dir):
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
  converted = convert.convert_all(gt.BUNDLED, ["bbq", "hh_rlhf"])
  model_dir = build_model(preset.size, inputs.corpus(converted.items), work_dir / "models")
  cache = run_dir / "xla_cache"
  env = {"XDG_CACHE_HOME": str(run_dir / "xdg"), **({"JAX_PLATFORMS": "cpu"}
                                                      if device == "cpu" else {})}
  ours_cmd = [sys.executable, "-m", "socialrm_jax.main.vocab_scan", f"--model={model_dir}",
              f"--output_dir={run_dir / 'ours'}", f"--dtype={dtype}",
              f"--tokens_per_batch={preset.tokens_per_batch}", f"--compilation_cache={cache}"]
  ours_cmd += [f"--max_tokens={max_tokens}"] if max_tokens else []
  ok_ours, ours_s, _ = timed_with_cpu("ours", ours_cmd, child_env(env), run_dir / "ours.log")
  torch_json = run_dir / "torch.json"
  # The prompts the scan used, for the loop (which imports neither jax nor this package).
  (run_dir / "prompts.json").write_text(json.dumps(scan_prompts()))
  torch_cmd = [*module_command("benchmarks.gpu.vocab_scan_throughput"),
               f"--scan_torch_child={torch_json}", f"--model={model_dir}", f"--device={device}",
               f"--dtype={dtype}", f"--torch_batch={torch_batch()}"]
  torch_cmd += [f"--scan_max_tokens={max_tokens}"] if max_tokens else []
  ok_torch, torch_s, _ = timed_with_cpu("torch", torch_cmd, child_env(
      {"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}), run_dir / "torch.log")
  if not (ok_ours and ok_torch):
    raise RuntimeError(f"a run failed; logs in {run_dir}")
  scan = json.loads((run_dir / "ours" / "scan.json").read_text())
  reference = json.loads(torch_json.read_text())
  ours = ours_rewards(run_dir / "ours")
  diffs = []
  for prompt_id, values in reference["rewards"].items():
    assert sorted(ours[prompt_id]) == reference["tokens"], "the runs scored other tokens"
    diffs += [abs(ours[prompt_id][t] - v) for t, v in zip(reference["tokens"], values)]
  scored = len(diffs)
  params, matmul = inputs.model_params(model_dir)
  lines = [
      f"preset {name}: {scored:,} (prompt, token) sequences ({scored // 2:,} tokens x 2 prompts), "
      f"model {model_dir.name}: {params:,} parameters, {dtype}, {reference['device_name']}",
      "seconds: whole processes, start to exit (ours: a cold compilation cache, statistics and "
      "plot included)",
      "",
      "| run | process s | sequences/s | tokens through the model |",
      "|---|---|---|---|",
      f"| socialrm-vocab-scan | {ours_s:.1f} | {scored / ours_s:,.0f} | "
      f"{scan['scoring']['tokens_computed']:,} |",
      f"| PyTorch, one sequence per (prompt, token), batches of {torch_batch()} | "
      f"{torch_s:.1f} | {scored / torch_s:,.0f} | {reference['real_tokens']:,} |",
      "",
      f"speed-up (whole processes): {torch_s / ours_s:.1f}x; tokens computed / naive: "
      f"{scan['scoring']['tokens_computed_over_naive']:.3f}; largest |reward difference|: "
      f"{max(diffs):.2e}"]
  text = "\n".join(lines)
  (report_dir / "table.txt").write_text(text + "\n")
  (report_dir / "results.json").write_text(json.dumps({
      "preset": name, "max_tokens": max_tokens, "device": device, "dtype": dtype,
      "model": str(model_dir), "params": params, "matmul_params": matmul,
      "ours_seconds": ours_s, "torch_seconds": torch_s, "sequences": scored,
      "max_abs_diff": max(diffs), "ours_scoring": scan["scoring"],
      "torch_seconds_inside": reference["seconds"]}, indent=2))
  for log_name in ("ours.log", "torch.log"):
    shutil.copy(run_dir / log_name, report_dir / log_name)
  return text


def torch_batch() -> int:
  """The PyTorch loop's sequences a batch: --torch_batch (gpu_throughput's flag), else 64."""
  return flags.FLAGS.torch_batch or presets.TORCH_BATCH


def main(argv):
  del argv
  if _CHILD.value:
    torch_child(flags.FLAGS.model, _CHILD.value, _MAX_TOKENS.value, flags.FLAGS.device,
                flags.FLAGS.dtype or "float32", torch_batch())
    return
  if not _PRESET.value:
    raise app.UsageError("pass --scan_preset")
  preset = PRESETS[_PRESET.value]
  device = preset.device if flags.FLAGS.device == "auto" else flags.FLAGS.device
  text = benchmark(_PRESET.value, preset, _MAX_TOKENS.value or preset.max_tokens, device,
                   flags.FLAGS.dtype or preset.dtype, pathlib.Path(_WORK_DIR.value).resolve())
  print(text, flush=True)


if __name__ == "__main__":
  app.run(main)
