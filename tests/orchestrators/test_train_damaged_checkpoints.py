"""socialrm-train resuming from a folder whose checkpoints were damaged after they were complete
(a full disk or a killed copy leaves files cut short): a finished run whose newest checkpoint is
cut short goes on from the one before, saying so in one line; one whose every checkpoint is
damaged is one line naming the folder and exit code 2. Neither shows a traceback."""

import json
import shutil
import subprocess
import sys

import pytest

from socialrm_jax.base import settings as settings_lib
from socialrm_jax.orchestrators import train
from tests.helpers.preference_fixtures import write_learnable_pairs
from tests.helpers.scoring_fixtures import make_llama, subprocess_env
from tests.training.test_checkpoints import cut_short

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 4  # checkpoints at 2 and 4


def arguments(root, out, max_steps=STEPS) -> dict:
  return dict(model=str(root / "base"), data=(f"preference:{root / 'pairs.jsonl'}",),
              output_dir=str(out), max_steps=max_steps, batch_size=4, learning_rate=1e-3, seed=0,
              checkpoint_every=2, eval_fraction=0.0, log_every=2, max_length=64)


@pytest.fixture(scope="module", name="finished")
def finished_run(tmp_path_factory):
  """(the folder holding the base and the pairs, a finished run of `STEPS` steps)."""
  root = tmp_path_factory.mktemp("damaged")
  make_llama(root / "base", head="lm", seed=0)
  write_learnable_pairs(root / "pairs.jsonl", 16)
  train.run(settings_lib.from_config(train.TrainConfig, arguments(root, root / "run")))
  return root, root / "run"


def test_a_run_whose_newest_checkpoint_is_cut_short_goes_on_from_the_one_before(
    finished, tmp_path, capsys, caplog):
  root, run = finished
  out = tmp_path / "run"
  shutil.copytree(run, out)
  newest = out / "checkpoints" / str(STEPS)
  cut_short(newest / "leaves" / "_sharding")
  capsys.readouterr()
  with caplog.at_level("WARNING"):
    train.run(settings_lib.from_config(train.TrainConfig, arguments(root, out, max_steps=6)))
  skipped = [r.getMessage() for r in caplog.records if "does not restore" in r.getMessage()]
  assert skipped == [
      f"checkpoint {newest} does not restore completely: its metadata does not read: "
      f"FAILED_PRECONDITION: Error reading local file \"{newest}/leaves/_sharding\": Invalid "
      f"JSON; set aside as {newest}.damaged, resuming from checkpoint 2"], skipped
  said = capsys.readouterr().out
  assert "extending the run from 4 to 6 steps: resuming from step 2;" in said, said
  assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["2", "4", "4.damaged", "6"]
  rows = [json.loads(line) for line in (out / train.METRICS_FILE).read_text().splitlines()]
  assert [r["step"] for r in rows if "loss" in r] == [2, 4, 6]  # step 4 trained again, once
  assert (out / train.MODEL_DIR / "model.safetensors").is_file()


@pytest.mark.slow  # a subprocess
def test_a_run_whose_every_checkpoint_is_damaged_is_one_line_and_exit_code_2(finished, tmp_path):
  root, run = finished
  out = tmp_path / "run"
  shutil.copytree(run, out)
  for step in (2, STEPS):
    cut_short(out / "checkpoints" / str(step) / "leaves" / "_sharding")
  flags = [f"--{k}={v[0] if isinstance(v, tuple) else v}" for k, v in arguments(root, out).items()]
  done = subprocess.run([sys.executable, "-m", "socialrm_jax.main.train", *flags],
                        env=subprocess_env(), capture_output=True, text=True, timeout=300)
  assert done.returncode == 2, done.stderr[-3000:]
  assert "Traceback" not in done.stderr, done.stderr[-3000:]
  last = done.stderr.strip().splitlines()[-1]
  assert last.startswith(f"socialrm-train: error: {out / 'checkpoints'}: no checkpoint restores "
                         f"completely (checkpoint {out / 'checkpoints' / '4'} does not restore "
                         "completely: its metadata does not read: FAILED_PRECONDITION"), last
  assert last.endswith("remove the damaged checkpoints to train from the start, or use a new "
                       "--output_dir"), last
  assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["2", "4"]
