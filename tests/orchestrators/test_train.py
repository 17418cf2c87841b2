"""socialrm-train end to end on tiny random bases (in-process `orchestrators.train.run`, and the
command for the resume after kill -9).

- A tiny random Llama trained on a learnable preference set reaches >= 0.95 held-out accuracy;
  transformers' AutoModelForSequenceClassification loads the export with no missing or
  unexpected keys and gives the project's rewards (its own loader and scorer) within 1e-4.
- kill -9 after a checkpoint, the same command again: it says it resumed, and ends on the
  uninterrupted run's weights bit for bit (the same computation).
- LoRA: only the adapters and the head train; the merged export scores as the unmerged model (the
  base in transformers with each adapter's W x + (alpha / r) x A B added by a forward hook)
  within 1e-5.
- A pad token that ends every templated conversation (pad == eos) is refused with one line.
- One writer per run folder: a second training into a live one's folder is refused naming it; a
  killed run's lock is taken over by the rerun.
- A run whose loss goes NaN (learning rate 1e12, no clipping) stops at that step with one line
  naming it and the last checkpoint, exits 3, exports no model/; its metrics are strict JSON. An
  update that overflows the weights with a finite loss (learning rate 1e39) is caught on the
  device before its checkpoint.
- A larger --max_steps extends a finished run from its last checkpoint, the learning-rate
  schedule recomputed for the new length; a changed learning rate or a shorter run is refused.
- --report_to=tensorboard: TensorBoard's own event reader finds every value of
  train_metrics.jsonl, under transformers' names, at its step.
"""

import json
import math
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

from socialrm_jax.base import settings as settings_lib
from socialrm_jax.base.errors import InputError
from socialrm_jax.models import reward_model
from socialrm_jax.orchestrators import train
from socialrm_jax.scoring import item_tokens
from socialrm_jax.training import divergence, training_run
from tests.helpers.model_fixtures import pad_rows
from tests.helpers.preference_fixtures import write_learnable_pairs
from tests.helpers.scoring_fixtures import make_llama, subprocess_env
from tests.helpers.tolerances import float32_tolerance

pytestmark = pytest.mark.usefixtures("one_torch_thread")

@pytest.fixture(scope="module")
def base(tmp_path_factory):
  root = tmp_path_factory.mktemp("train")
  make_llama(root / "base", head="lm", seed=0)
  return root / "base", write_learnable_pairs(root / "pairs.jsonl", 160)


def settings(base_folder, data, out, **overrides):
  values = dict(model=str(base_folder), data=(f"preference:{data}",), output_dir=str(out),
                max_steps=24, batch_size=8, learning_rate=1e-3, seed=0, checkpoint_every=8,
                eval_fraction=0.2, log_every=4, max_length=128)
  values.update(overrides)
  return settings_lib.from_config(train.TrainConfig, values)


@pytest.fixture(scope="module")
def trained(base, tmp_path_factory):
  folder, data = base
  out = tmp_path_factory.mktemp("trained") / "run"
  train.run(settings(folder, data, out, eval_every=8, checkpoint_steps=(0, 2),
                     report_to=("tensorboard",)))
  return out


def held_out_sequences(base_folder, run_dir, data):
  """The held-out pairs (split.json) as token ids, templated as the scorer templates them."""
  held = set(json.loads((run_dir / "split.json").read_text())["eval_pair_ids"])
  rows = [json.loads(line) for line in data.read_text().splitlines()]
  templater = item_tokens.Templater(item_tokens.load_tokenizer(base_folder), is_causal=True,
                                    max_length=128)
  items = [{"item_id": f"pairs/{i}", "prompt": [{"role": "user", "content": r["prompt"]}],
            "candidates": [r["chosen"], r["rejected"]]}
           for i, r in enumerate(rows) if f"pairs/{i}:0>1" in held]
  return [s for item in templater.encode_many(0, items) for s in item.sequences]


def test_training_reaches_held_out_accuracy_and_transformers_loads_the_export(base, trained):
  folder, data = base
  rows = [json.loads(line) for line in (trained / train.METRICS_FILE).read_text().splitlines()]
  train_rows = [r for r in rows if "loss" in r]
  evals = [r for r in rows if "eval_accuracy" in r]
  for key in ("loss", "accuracy", "margin", "rewards/chosen", "rewards/rejected", "learning_rate",
              "grad_norm", "num_tokens", "tokens_per_second"):
    assert key in train_rows[-1], key
  assert [r["step"] for r in evals] == [8, 16, 24]
  assert evals[-1]["eval_pairs"] == 32 and evals[-1]["eval_accuracy"] >= 0.95
  assert train_rows[-1]["loss"] < train_rows[0]["loss"]
  manifest = json.loads((trained / train.MANIFEST_FILE).read_text())
  assert len(manifest["data"]["sha256"]) == 64
  assert {f["name"] for f in manifest["base"]["files"]} >= {"model.safetensors", "config.json"}

  export = trained / train.MODEL_DIR
  hf, info = transformers.AutoModelForSequenceClassification.from_pretrained(
      export, output_loading_info=True, dtype=torch.float32)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  assert hf.config.num_labels == 1 and hf.config.pad_token_id == manifest["pad_token_id"]
  assert transformers.AutoTokenizer.from_pretrained(export).chat_template
  sequences = held_out_sequences(folder, trained, data)
  ids, mask = pad_rows(sequences, max(map(len, sequences)), "right", hf.config.pad_token_id)
  with torch.no_grad():
    want = hf.eval()(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits[:, 0]
  ours = np.asarray(reward_model.load_reward_model(str(export))(ids, mask))
  assert np.abs(ours - want.numpy()).max() <= 1e-4
  chosen, rejected = ours[0::2], ours[1::2]
  assert (chosen > rejected).mean() >= 0.95


def test_tensorboard_reads_back_every_value_of_train_metrics(trained):
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  from transformers.integrations.integration_utils import rewrite_logs
  events = EventAccumulator(str(trained / "logs"), size_guidance={"scalars": 0})
  events.Reload()
  rows = _strict_json_rows(trained / train.METRICS_FILE)
  expected: dict[str, dict[int, float]] = {}
  for row in rows:
    numbers = {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
    for name, value in rewrite_logs(numbers).items():  # transformers' names for TRL's keys
      expected.setdefault(name, {})[row["step"]] = value
  assert {"train/loss", "train/accuracy", "train/rewards/chosen", "eval/loss",
          "eval/accuracy"} <= set(expected)
  assert set(events.Tags()["scalars"]) == set(expected)
  for name, by_step in expected.items():
    found = {e.step: e.value for e in events.Scalars(name)}
    assert found.keys() == by_step.keys(), name
    for step, value in by_step.items():
      # TensorBoard's scalar (`simple_value`) is a float32 field: the row's value rounded once.
      assert found[step] == float(np.float32(value)), (name, step)


def test_pad_token_ending_the_conversation_is_refused(tmp_path):
  make_llama(tmp_path / "plain", head="lm", with_template=False)  # the plain format ends with eos
  data = write_learnable_pairs(tmp_path / "pairs.jsonl", 16)
  eos = transformers.AutoTokenizer.from_pretrained(tmp_path / "plain").eos_token_id
  with pytest.raises(InputError, match="ends with the pad token .* ln 2"):
    train.run(settings(tmp_path / "plain", data, tmp_path / "out", pad_token_id=eos))


def command(base_folder, data, out):
  return [sys.executable, "-m", "socialrm_jax.main.train", f"--model={base_folder}",
          f"--data=preference:{data}", f"--output_dir={out}", "--max_steps=40", "--batch_size=8",
          "--learning_rate=1e-3", "--seed=1", "--checkpoint_every=4", "--max_length=128",
          "--eval_fraction=0.1"]


@pytest.mark.slow
def test_resume_after_kill_ends_on_the_uninterrupted_weights(base, tmp_path):
  folder, data = base
  env = subprocess_env()
  whole = subprocess.run(command(folder, data, tmp_path / "whole"), env=env, capture_output=True,
                         text=True)
  assert whole.returncode == 0, whole.stderr[-2000:]
  killed = tmp_path / "killed"
  proc = subprocess.Popen(command(folder, data, killed), env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + 300
  while not (killed / "checkpoints" / "4").is_dir() and proc.poll() is None:
    assert time.monotonic() < deadline
    time.sleep(0.02)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (killed / train.MODEL_DIR).exists()  # killed before the end
  # The killed run's lock file names it still; the rerun takes it over.
  assert (killed / train.LOCK_FILE).read_text() == f"host {socket.gethostname()} pid {proc.pid}\n"
  again = subprocess.run(command(folder, data, killed), env=env, capture_output=True, text=True)
  assert again.returncode == 0, again.stderr[-2000:]
  resumed = [line for line in again.stdout.splitlines() if line.startswith("resuming from step")]
  assert resumed and int(resumed[0].split()[3]) % 4 == 0 and 4 <= int(resumed[0].split()[3]) < 40
  a = load_file(str(tmp_path / "whole" / train.MODEL_DIR / "model.safetensors"))
  b = load_file(str(killed / train.MODEL_DIR / "model.safetensors"))
  assert set(a) == set(b)
  # The same computation: the resumed run restores the checkpoint's bits (weights, Adam's moments,
  # step) and runs the same programs on the same micro-batches (each a function of its index
  # alone, `pair_batches`), so it ends on the same bits.
  for k in a:
    np.testing.assert_array_equal(b[k], a[k], err_msg=k)
  rows = [json.loads(line) for line in (killed / train.METRICS_FILE).read_text().splitlines()]
  steps = [r["step"] for r in rows if "loss" in r]
  assert steps == sorted(set(steps)) and steps[-1] == 40  # no step logged twice


def test_trls_margin_column_reaches_the_pairs(tmp_path):
  path = tmp_path / "margins.jsonl"
  path.write_text("".join(json.dumps({"prompt": f"Hi {i}.", "chosen": "Hello!", "rejected": "No.",
                                      **({"margin": m} if m is not None else {})}) + "\n"
                          for i, m in enumerate([0.75, None, -1])))
  pairs = train.load_pairs([f"preference:{path}"], None, "data")
  assert [p.margin for p in pairs] == [0.75, 0.0, -1.0]
  path.write_text(json.dumps({"prompt": "Hi.", "chosen": "a", "rejected": "b", "margin": "x"}))
  with pytest.raises(InputError, match="margin 'x' is not a number"):
    train.load_pairs([f"preference:{path}"], None, "data")


def test_a_loss_that_stays_at_ln2_is_warned_about(tmp_path, caplog):
  """A reward model whose head is 0 scores chosen and rejected alike; with a learning rate too
  small to move it, the loss stays at ln 2 and the run says so."""
  make_llama(tmp_path / "flat", head="score", seed=0)
  weights_file = tmp_path / "flat" / "model.safetensors"
  tensors = load_file(str(weights_file))
  tensors["score.weight"] = np.zeros_like(tensors["score.weight"])
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  save_file(tensors, str(weights_file), metadata={"format": "pt"})
  data = write_learnable_pairs(tmp_path / "pairs.jsonl", 24)
  with caplog.at_level("WARNING"):
    train.run(settings(tmp_path / "flat", data, tmp_path / "out", max_steps=20, batch_size=4,
                       learning_rate=1e-12, log_every=1, checkpoint_every=0, eval_fraction=0.0))
  assert any("stayed at ln 2" in r.getMessage() for r in caplog.records)


def test_bad_flags_are_one_line_and_exit_code_2(base, tmp_path):
  folder, data = base
  done = subprocess.run(command(folder, data, tmp_path / "out") + ["--batch_size=0"],
                        env=subprocess_env(), capture_output=True, text=True)
  assert done.returncode == 2
  assert done.stderr.strip().splitlines()[-1] == (
      "socialrm-train: error: --batch_size must be at least 1, got 0")


def test_a_checkpoint_exports_as_a_model(base, trained, tmp_path):
  """`export_checkpoint`: the last step's is the run's export; step 0's is the base with the new
  head; a step with no checkpoint is one line naming those there are."""
  folder, data = base
  run = settings(folder, data, trained, eval_every=8, checkpoint_steps=(0, 2))
  assert [int(p.name) for p in sorted((trained / "checkpoints").iterdir(), key=lambda p: int(
      p.name))] == [0, 2, 8, 16, 24]
  last = load_file(f"{train.export_checkpoint(run, 24, tmp_path / 'last')}/model.safetensors")
  final = load_file(str(trained / train.MODEL_DIR / "model.safetensors"))
  assert all(np.array_equal(last[k], final[k]) for k in final)
  first = load_file(f"{train.export_checkpoint(run, 0, tmp_path / 'first')}/model.safetensors")
  base_tensors = load_file(str(folder / "model.safetensors"))
  assert all(np.array_equal(first[k], base_tensors[k]) for k in first if k != "score.weight")
  assert not np.array_equal(first["score.weight"], final["score.weight"])
  with pytest.raises(InputError, match="no checkpoint at step 5 .* there are: 0, 2, 8, 16, 24"):
    train.export_checkpoint(run, 5, tmp_path / "none")


def _strict_json_rows(path: pathlib.Path) -> list[dict]:
  """Each line of a JSON-lines file, parsed refusing NaN and Infinity (not JSON)."""
  def refuse(constant):
    raise ValueError(f"not JSON: {constant}")
  return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


@pytest.mark.slow  # a subprocess
def test_a_second_training_into_a_live_runs_folder_is_refused_and_a_diverged_run_exits_3(
    base, tmp_path):
  """The first run (the command) takes the folder; a second, started while it lives, is refused
  at once naming it. The first, at a learning rate of 1e12 unclipped, diverges at step 2: one line
  naming the step and checkpoint 1, exit code 3, no model/, and metrics that are strict JSON."""
  folder, data = base
  out = tmp_path / "run"
  first = subprocess.Popen(
      command(folder, data, out) + ["--max_steps=8", "--learning_rate=1e12", "--max_grad_norm=0",
                                    "--checkpoint_every=1", "--log_every=1"],
      env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  lock = out / train.LOCK_FILE
  holder = f"host {socket.gethostname()} pid {first.pid}"
  deadline = time.monotonic() + 120
  while not (lock.exists() and lock.read_text().strip() == holder):
    assert first.poll() is None and time.monotonic() < deadline
    time.sleep(0.02)
  with pytest.raises(InputError) as refused:  # seeds differ: only the lock can refuse it this soon
    train.run(settings(folder, data, out, seed=7))
  assert str(refused.value) == (f"{out}: another training run ({holder}) is writing into this "
                                "folder; wait for it or use another --output_dir")
  stdout, stderr = first.communicate(timeout=300)
  assert first.returncode == 3, stderr[-3000:]
  lines = [line for line in stderr.splitlines() if line.strip()]
  assert lines[-1] == (
      "socialrm-train: error: step 2: the training diverged (loss nan, grad_norm nan); stopped "
      "before saving or exporting it, nothing exported. The last checkpoint, every step before "
      f"it finite: {out / 'checkpoints' / '1'}. A lower --learning_rate or --max_grad_norm "
      "clipping may keep it finite"), stderr[-3000:]
  assert "Traceback" not in stderr and "Model:" not in stdout
  assert not (out / train.MODEL_DIR).exists()
  assert sorted(int(p.name) for p in (out / "checkpoints").iterdir()) == [1]
  rows = _strict_json_rows(out / train.METRICS_FILE)
  assert [r["step"] for r in rows] == [1, 2]
  assert all(math.isfinite(v) for k, v in rows[0].items() if isinstance(v, float))
  assert rows[1]["loss"] is None and rows[1]["grad_norm"] is None
  assert {"loss", "grad_norm"} <= set(rows[1]["non_finite"])
  assert all(rows[1][k] is None for k in rows[1]["non_finite"])


def test_a_larger_max_steps_extends_a_finished_run_and_other_changes_are_refused(
    base, trained, tmp_path, capsys):
  """The module's 24-step run (linear decay to 0 at 24) extended to 32 steps: it resumes from
  checkpoint 24, says so, and the learning rate follows the linear schedule recomputed for 32
  steps from step 24 on (transformers' Trainer's behaviour); it ends at step 32, exported."""
  folder, data = base
  run_dir = tmp_path / "run"
  shutil.copytree(trained, run_dir)
  longer = settings(folder, data, run_dir, eval_every=8, checkpoint_steps=(0, 2), max_steps=32)
  with pytest.raises(InputError, match=r"other settings \(--learning_rate\); use a new"):
    train.run(settings_lib.replace(longer, learning_rate=2e-3))
  with pytest.raises(InputError, match=r"give 16 steps, but .* holds a run of 24 steps "
                     r"\(checkpoint at step 24\): a run is extended, never shortened"):
    train.run(settings_lib.replace(longer, max_steps=16))
  capsys.readouterr()
  train.run(longer)
  said = capsys.readouterr().out
  peak = longer.optimizer.learning_rate
  assert ("extending the run from 24 to 32 steps: resuming from step 24; the learning rate follows "
          "the linear schedule recomputed for 32 steps, from step 24 on (learning rate "
          f"{peak * (1 - 24 / 32):.4g} there)") in said
  rows = [json.loads(line) for line in (run_dir / train.METRICS_FILE).read_text().splitlines()]
  logged = {r["step"]: r for r in rows if "loss" in r}
  assert sorted(logged) == [4, 8, 12, 16, 20, 24, 28, 32]
  # optax's float32 schedule against Python's float64: a few roundings of the peak times a fraction
  # (tests/training/test_optimizer.py), so a few eps of the peak.
  close = float32_tolerance(4, peak)
  assert logged[24]["learning_rate"] == pytest.approx(peak * (1 - 23 / 24), abs=close)
  assert logged[28]["learning_rate"] == pytest.approx(peak * (1 - 27 / 32), abs=close)
  assert logged[32]["learning_rate"] == pytest.approx(peak * (1 - 31 / 32), abs=close)
  manifest = json.loads((run_dir / train.MANIFEST_FILE).read_text())
  assert manifest["total_steps"] == 32 and manifest["settings"]["max_steps"] == 32
  assert 32 in [int(p.name) for p in (run_dir / "checkpoints").iterdir()]
  assert [r["step"] for r in rows if "eval_accuracy" in r] == [8, 16, 24, 32]
  extended = load_file(str(run_dir / train.MODEL_DIR / "model.safetensors"))
  before = load_file(str(trained / train.MODEL_DIR / "model.safetensors"))
  assert not np.array_equal(extended["score.weight"], before["score.weight"])


def test_an_update_that_overflows_the_weights_is_caught_before_its_checkpoint(base, tmp_path):
  """A learning rate beyond float32 (1e39 is inf there): the first step's loss and gradient
  norm, computed before its update, are finite, but the update makes the weights NaN; the check
  on the device before the step's checkpoint stops the run, nothing saved or exported."""
  folder, data = base
  out = tmp_path / "run"
  with pytest.raises(divergence.TrainingDivergedError) as stopped:
    train.run(settings(folder, data, out, max_steps=1, learning_rate=1e39, max_grad_norm=0.0,
                       eval_fraction=0.0))
  assert str(stopped.value).startswith(
      "step 1: the trained parameters or the optimizer state are not finite (an update "
      "overflowed); stopped before saving or exporting them, nothing exported. No checkpoint "
      "was saved before it.")
  assert not (out / "checkpoints" / "1").exists() and not (out / train.MODEL_DIR).exists()
  rows = _strict_json_rows(out / train.METRICS_FILE)
  assert [r["step"] for r in rows] == [1] and math.isfinite(rows[0]["loss"])


def test_the_remat_policy_setting_reaches_the_loaded_model_and_a_bad_name_is_refused(base, tmp_path):
  folder, data = base
  config = settings(folder, data, tmp_path / "out", remat_policy="full")
  assert training_run.load_base(config, train.training_mesh(config)).module.remat_policy == "full"
  with pytest.raises(InputError, match="remat_policy='keep_all': use one of auto, "):
    settings(folder, data, tmp_path / "out", remat_policy="keep_all")


def test_a_block_smaller_than_a_row_a_device_is_refused_before_the_base_loads(base, tmp_path,
                                                                               monkeypatch):
  folder, data = base
  monkeypatch.setattr(training_run, "load_base", lambda *a: pytest.fail("the base was loaded"))
  # Rows of 256 (twice --max_length): 128 token slots hold none.
  with pytest.raises(InputError, match=r"^--tokens_per_block=128: a block holds at least one "
                                       r"row of --row_length=256"):
    train.run(settings(folder, data, tmp_path / "out", tokens_per_block=128))
  with pytest.raises(InputError, match=r"^--tokens_per_block must be 0 or more, got -1$"):
    train.run(settings(folder, data, tmp_path / "out", tokens_per_block=-1))
