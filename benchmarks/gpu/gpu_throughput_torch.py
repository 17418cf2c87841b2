"""benchmarks/gpu/gpu_throughput.py's PyTorch loops: a RewardBench-style loop over the same pairs with
transformers, in dataset order or sorted by length, run as `gpu_throughput.py --torch_child` in its
own process so that its import and load are timed as ours are."""

from __future__ import annotations

import json
import pathlib
import time

import numpy as np

from benchmarks.common import child_env, module_command, timed_with_cpu
from benchmarks.gpu.gpu_throughput_runs import Run
from socialrm_jax.base import tables


def run_torch(name: str, order: str, model_dir: pathlib.Path, items_dir: pathlib.Path,
              run_dir: pathlib.Path, device: str, dtype: str, batch: int, date: str) -> Run:
  output = run_dir / f"{name}.json"
  output.unlink(missing_ok=True)
  command = [*module_command("benchmarks.gpu.gpu_throughput"), f"--torch_child={order}",
             f"--model={model_dir}", f"--child_items={items_dir}", f"--child_output={output}",
             f"--device={device}", f"--dtype={dtype}", f"--torch_batch={batch}",
             f"--child_date={date}"]
  env = {"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}
  ok, seconds, cpu_seconds = timed_with_cpu(name, command, child_env(env),
                                            run_dir / f"{name}.log")
  info = json.loads(output.read_text()) if ok and output.exists() else {}
  return Run(name, ok and bool(info), seconds, str(run_dir / f"{name}.log"), info, cpu_seconds)


def torch_child(order: str, model_dir: str, items_dir: str, output: str, device: str,
                dtype: str, batch: int, date: str) -> None:
  """A RewardBench-style loop: every pair's chosen and rejected, chat-templated, as separate
  sequences in right-padded batches of `batch` (dataset order: each batch of pairs' chosen, then
  their rejected, as RewardBench runs them; or all sequences sorted by length)."""
  marks = {"start": time.perf_counter()}
  import torch
  import transformers
  marks["imported"] = time.perf_counter()
  torch_device = "cuda" if device == "gpu" else "cpu"
  torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
  tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
  kwargs = {"device_map": torch_device} if torch_device == "cuda" else {}
  model, loading = transformers.AutoModelForSequenceClassification.from_pretrained(
      model_dir, dtype=torch_dtype, attn_implementation="sdpa", local_files_only=True,
      output_loading_info=True, **kwargs)
  model = model.to(torch_device).eval()
  pad_id = model.config.pad_token_id
  if pad_id is None:  # HF's head then pools at the last token unequal to this id.
    pad_id = tokenizer.pad_token_id
    pad_id = tokenizer.eos_token_id if pad_id is None else pad_id
    model.config.pad_token_id = pad_id
  if torch_device == "cuda":
    torch.cuda.synchronize()
  marks["loaded"] = time.perf_counter()

  pairs = tables.read_rows(items_dir, "pairs")

  def render(prompt, response):
    messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
    messages.append({"role": "assistant", "content": response})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False,
                                         date_string=date)

  texts = []  # Sequence 2p is pair p's chosen, 2p + 1 its rejected.
  for pair in pairs:
    texts += [render(pair["prompt"], pair["chosen"]), render(pair["prompt"], pair["rejected"])]
  ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
  lengths = np.array([len(x) for x in ids])
  if order == "sorted":
    sequence_order = list(np.argsort(lengths, kind="stable"))
  else:
    sequence_order = []
    for start in range(0, len(pairs), batch):
      block = range(start, min(start + batch, len(pairs)))
      sequence_order += [2 * p for p in block] + [2 * p + 1 for p in block]
  marks["tokenized"] = time.perf_counter()

  rewards = np.zeros(len(ids), np.float64)
  slots = 0
  with torch.inference_mode():
    for start in range(0, len(sequence_order), batch):
      rows = sequence_order[start:start + batch]
      width = int(max(lengths[r] for r in rows))
      input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
      mask = torch.zeros((len(rows), width), dtype=torch.long)
      for i, r in enumerate(rows):
        input_ids[i, :lengths[r]] = torch.tensor(ids[r])
        mask[i, :lengths[r]] = 1
      logits = model(input_ids=input_ids.to(torch_device),
                     attention_mask=mask.to(torch_device)).logits
      rewards[rows] = logits[:, 0].float().cpu().numpy()
      slots += len(rows) * width
  marks["scored"] = time.perf_counter()
  info = {
      "order": order, "device": torch_device, "dtype": dtype, "batch": batch,
      "device_name": torch.cuda.get_device_name() if torch_device == "cuda" else "cpu",
      "torch": torch.__version__, "transformers": transformers.__version__,
      "attn_implementation": model.config._attn_implementation,
      "missing_keys": sorted(loading.get("missing_keys", [])),
      "unexpected_keys": sorted(loading.get("unexpected_keys", [])),
      "mismatched_keys": [str(k) for k in loading.get("mismatched_keys", [])],
      "pairs": len(pairs), "sequences": len(ids), "real_tokens": int(lengths.sum()),
      "token_slots": slots, "padding_fraction": 1 - lengths.sum() / max(slots, 1),
      "seconds": {"import": marks["imported"] - marks["start"],
                  "load": marks["loaded"] - marks["imported"],
                  "tokenize": marks["tokenized"] - marks["loaded"],
                  "forward": marks["scored"] - marks["tokenized"]},
      "chosen": rewards[0::2].tolist(), "rejected": rewards[1::2].tolist(),
      "chosen_tokens": lengths[0::2].tolist(), "rejected_tokens": lengths[1::2].tolist(),
  }
  tables.atomic_write_json(output, info)
