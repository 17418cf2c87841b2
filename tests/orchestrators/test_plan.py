"""`socialrm_jax.main.plan`: the engine's scoring step compiled for a TPU slice on this CPU (libtpu, no
TPU), with splash attention as a Mosaic kernel, and the plan's memory, FLOPs and projections.

The compiled model is Llama-shaped with the head size of the real ones (128), small everywhere
else so that it compiles in seconds: v5e:2x2 (4 chips, one host), mesh data:2,model:2.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import jax.numpy as jnp
import pytest

from socialrm_jax.base import records, tables
from socialrm_jax.models import reward_model, weights
from socialrm_jax.orchestrators import train
from socialrm_jax.orchestrators.plan import (compiler, cost, hardware, projection, report,
                                                   shapes, training)
from socialrm_jax.scoring import engine
from socialrm_jax.runtime import mesh as mesh_lib
from tests.helpers import reward_head_fixtures as rh
from tests.helpers.plan_fixtures import TINY_LLAMA
from tests.helpers import scoring_fixtures as fx

pytest.importorskip("libtpu", reason="the TPU compiler comes with libtpu (the test extra)")

# Rows of 128 and 256 tokens (two buckets), 1024 token slots a batch.
OPTIONS = engine.ScoringOptions(max_length=256, tokens_per_batch=1024, dtype="bfloat16",
                                mesh="data:2,model:2", compilation_cache="", chunk_size=4)
# Published sizes of the language models (model cards), in parameters; ours within 1%.
PUBLISHED_PARAMETERS = {"llama3.2-1b": 1.24e9, "llama3.1-8b": 8.03e9, "llama3.1-70b": 70.6e9,
                        "gemma2-27b": 27.2e9, "qwen3-0.6b": 0.6e9, "qwen3-8b": 8.2e9}


@pytest.fixture(scope="module")
def tiny_plan():
  topology = hardware.topology("v5e:2x2")
  setup = compiler.build(topology, TINY_LLAMA, "tiny-llama", OPTIONS)
  batches = [compiler.compile_shape(setup, shape) for shape in compiler.shapes(setup)]
  return setup, batches


def test_every_bucket_compiles_for_v5e_with_splash_as_a_mosaic_kernel(tiny_plan, tmp_path):
  setup, batches = tiny_plan
  assert (len(setup.topology.devices), setup.topology.hosts) == (4, 1)
  assert dict(setup.mesh.shape) == {"data": 2, "model": 2}
  assert setup.attention == "splash"
  assert [entry["shape"] for entry in batches] == [[8, 128, 16], [4, 256, 32]]
  for entry in batches:
    assert entry["compiled"]
    # The kernel was compiled for the TPU, not interpreted: this host's backend is the CPU.
    assert "tpu_custom_call" in entry["custom_calls"], entry["custom_calls"]
    assert entry["fits"] and 0 < entry["hbm_bytes_per_chip"] < entry["hbm_capacity_bytes"]
    assert entry["estimated_seconds"] > 0
  plan = report.build_plan(setup, "tiny-llama", "test", OPTIONS, batches, None, None, None)
  report.write(str(tmp_path), plan)
  written = json.loads((tmp_path / "plan.json").read_text())
  assert written["fits"] and written["devices"] == 4 and written["hosts"] == 1
  assert written["mesh"] == {"data": 2, "model": 2}
  assert "roofline estimate" in (tmp_path / "plan.md").read_text()


def test_each_compiled_program_is_a_line_saying_what_remains(tiny_plan, caplog):
  """A plan compiles for minutes on a large model: each program is said as it is compiled, its
  shape, seconds, memory, whether it fits, and how many are left."""
  setup, _ = tiny_plan
  with caplog.at_level("INFO"):
    batches, _ = compiler.compile_all(setup)
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[")]
  assert len(lines) == 2, lines
  for i, (line, entry) in enumerate(zip(lines, batches)):
    rows, length = entry["shape"][:2]
    gib = entry["hbm_bytes_per_chip"] / 2**30
    assert line == (f"[{i + 1}/2] scoring rows {rows}x{length}: {entry['compile_seconds']:.1f} s, "
                    f"{gib:.2f} GiB/device, fits; {1 - i} to go"), line


def test_analytic_flops_match_a_hand_count(tiny_plan):
  setup, batches = tiny_plan
  # Per layer: q 256x4x128 + k, v 256x2x128 each + o 4x128x256 + gate, up, down 3x256x512.
  per_layer = 131_072 + 2 * 65_536 + 131_072 + 393_216
  assert setup.counts.matmul_params == 2 * per_layer == 1_572_864
  assert setup.counts.head_params == 256
  # [8, 128, 16]: 8 x 128 token slots, 8 x 16 readouts; splash blocks of 128: one block a row,
  # computed in both causal passes (2 x the [T, T] product) of 2 layers, 4 heads of 128.
  short = (2 * 1_572_864 * 8 * 128 + 2 * 256 * 8 * 16
           + 2 * 2 * (2 * 8 * 128 * 128 * 4 * 128) * 2)
  # [4, 256, 32]: a block of 256 divides the row: one block again.
  long = (2 * 1_572_864 * 4 * 256 + 2 * 256 * 4 * 32
          + 2 * 2 * (2 * 4 * 256 * 256 * 4 * 128) * 2)
  assert [entry["analytic_flops"] for entry in batches] == [short, long]
  # XLA's own count is kept as it comes; it counts the scanned layer once, so it is far lower.
  assert all(entry["flops"] < entry["analytic_flops"] for entry in batches)


def test_splash_share_counts_the_blocks_its_causal_mask_keeps():
  assert cost.attention_share("xla", 2048, True) == 1.0
  assert cost.attention_share("splash", 2048, False) == 1.0
  # 2048 = 4 blocks of 512: 10 of 16 blocks a pass, two passes.
  assert cost.attention_share("splash", 2048, True) == 2 * 10 / 16


@pytest.mark.parametrize("name", sorted(shapes.MODEL_SHAPES))
def test_model_shapes_have_their_published_sizes(name):
  family, config = reward_model.family_and_config(shapes.MODEL_SHAPES[name], name)
  module = reward_model.abstract_module(family, config, jnp.bfloat16, "xla")
  parameters = sum(math.prod(v.get_value().shape) for v in weights.param_paths(module).values())
  assert abs(parameters / PUBLISHED_PARAMETERS[name] - 1) < 0.01, parameters
  # As a reward model: the same trunk, a one-output score head.
  family, config = reward_model.family_and_config(shapes.reward_model_config(name), name)
  assert (config.head, config.num_labels) == ("score", 1)


def test_projection_packs_items_as_the_engine_does(tiny_plan, tmp_path):
  setup, batches = tiny_plan
  fx.train_chat_tokenizer(tmp_path / "tokenizer")
  items = fx.all_items()
  tables.write_rows(tmp_path / "items" / "items.jsonl", items)
  projected = projection.project(setup, str(tmp_path / "items"), str(tmp_path / "tokenizer"),
                                 OPTIONS)
  assert projected["items"] == len(items)
  assert projected["pairs"] == sum(len(records.item_pairs(item)) for item in items)
  shapes_compiled = {"x".join(map(str, entry["shape"])) for entry in batches}
  (group,) = projected["groups"]
  assert set(group["batches"]) <= shapes_compiled
  slots = sum(count * math.prod(map(int, shape.split("x")[:2]))
              for shape, count in group["batches"].items())
  assert slots == projected["token_slots"] > projected["tokens"] > 0
  timed = report.project_time(projected, batches, "tokenizer")
  assert timed["estimated_seconds"] == pytest.approx(sum(
      count * next(e["estimated_seconds"] for e in batches
                   if "x".join(map(str, e["shape"])) == shape)
      for shape, count in group["batches"].items()))


def _plan_command(*flags) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "socialrm_jax.main.plan", *flags], cwd=fx.REPO_ROOT,
                        env=fx.subprocess_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_a_model_that_does_not_fit_is_a_plan_naming_the_model_axis_that_fits(tmp_path):
  # A bfloat16 embedding of 36M x 256 (18.4 GB) is more than a v5e chip holds (16 GB); split
  # over a model axis of 2 it fits.
  config = dict(TINY_LLAMA, vocab_size=36_000_000, num_hidden_layers=1)
  (tmp_path / "model").mkdir()
  (tmp_path / "model" / "config.json").write_text(json.dumps(config))
  done = _plan_command("--topology=v5e:2x2", f"--model={tmp_path / 'model'}",
                       "--mesh=data:4,model:1", "--max_length=128", "--tokens_per_batch=512",
                       "--dtype=bfloat16", f"--output_dir={tmp_path / 'plan'}")
  assert done.returncode == 0, done.stderr[-2000:]
  # Each program said as it goes, on stderr: the mesh asked for, then the model axes tried.
  said = [line.split("] ", 1)[1] for line in done.stderr.splitlines() if "] [" in line]
  assert said[0].startswith("[1/1] scoring rows 4x128: ") and said[0].endswith(
      "does not fit; 0 to go"), said
  assert any(line.endswith("fits; 0 to go (the smallest model axis that fits: 2)")
             for line in said), said
  plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
  assert not plan["fits"]
  (entry,) = plan["batches"]
  # The compiler refuses the program; the bytes come from its message, at least the parameters.
  assert not entry["compiled"]
  assert entry["hbm_bytes_per_chip"] >= 36_000_000 * 256 * 2 > entry["hbm_capacity_bytes"]
  assert plan["fitting_mesh"]["model"] == 2
  markdown = (tmp_path / "plan" / "plan.md").read_text()
  assert "**Does not fit**" in markdown and "model:2" in markdown
  assert f"{entry['hbm_bytes_per_chip']:,} bytes" in markdown


@pytest.mark.parametrize("flag, named", [("--topology=v9z:2x2", "--topology"),
                                          ("--topology=v5e:3", "--topology")])
def test_an_unknown_topology_is_one_line_and_exit_2(tmp_path, flag, named):
  done = _plan_command(flag, "--model_shape=llama3.2-1b", f"--output_dir={tmp_path / 'plan'}")
  assert done.returncode == 2
  error_lines = [line for line in done.stderr.splitlines() if "socialrm-plan: error" in line]
  assert len(error_lines) == 1 and named in error_lines[0], done.stderr[-2000:]
  assert not (tmp_path / "plan").exists()


def test_an_unknown_model_shape_is_one_line_and_exit_2(tmp_path):
  done = _plan_command("--topology=v5e:2x2", "--model_shape=llama9-1t",
                       f"--output_dir={tmp_path / 'plan'}")
  assert done.returncode == 2
  assert done.stderr.strip().splitlines()[-1].startswith("socialrm-plan: error")
  assert "--model_shape" in done.stderr and not (tmp_path / "plan").exists()


@pytest.fixture(scope="module")
def armorm_folder(tmp_path_factory):
  folder = tmp_path_factory.mktemp("plan") / "armorm"
  rh.make_armorm(folder, llama3_ids=False)
  return folder


def test_a_custom_head_is_planned_from_the_checkpoints_tensor_names(armorm_folder):
  hf_config = tables.read_json_object(armorm_folder / "config.json")
  options = dataclasses.replace(OPTIONS, mesh="data:4,model:1", max_length=128)
  setup = compiler.build(hardware.topology("v5e:2x2"), hf_config, str(armorm_folder), options,
                         weights.SafetensorsSource(armorm_folder))
  head = setup.config.reward_head
  assert (head.kind, head.num_outputs) == ("gated", 20)  # the score, then 19 objectives
  # The head's matrices: regression [D, 19], gating D -> 16 -> 16 -> 16 -> 19 (D = 32).
  assert setup.counts.head_params == 32 * 19 + 32 * 16 + 16 * 16 + 16 * 16 + 16 * 19
  (entry,) = [compiler.compile_shape(setup, shape) for shape in compiler.shapes(setup)]
  assert entry["compiled"] and entry["fits"]


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_plan_command_describes_a_custom_head_from_its_folder(armorm_folder, tmp_path):
  done = _plan_command("--topology=v5e:2x2", f"--model={armorm_folder}", "--mesh=data:4,model:1",
                       "--max_length=128", "--tokens_per_batch=512", "--largest_batch=false",
                       f"--output_dir={tmp_path / 'plan'}")
  assert done.returncode == 0, done.stderr[-2000:]
  plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
  assert plan["model"]["reward_head"] == {"class": "LlamaForRewardModelWithGating",
                                          "kind": "gated", "outputs": 20}
  assert "LlamaForRewardModelWithGating's gated reward head (20 outputs)" in (
      tmp_path / "plan" / "plan.md").read_text()


def test_a_custom_heads_config_alone_is_one_line_asking_for_its_folder(armorm_folder, tmp_path):
  (tmp_path / "config_only").mkdir()
  (tmp_path / "config_only" / "config.json").write_bytes((armorm_folder / "config.json").read_bytes())
  done = _plan_command("--topology=v5e:2x2", f"--model={tmp_path / 'config_only'}",
                       f"--output_dir={tmp_path / 'plan'}")
  assert done.returncode == 2
  (line,) = [l for l in done.stderr.splitlines() if "socialrm-plan: error" in l]
  assert "config_only" in line and "*.safetensors" in line, line
  assert not (tmp_path / "plan").exists()


def test_training_mesh_spans_a_four_host_slice_and_says_each_hosts_share():
  """socialrm-train's mesh is the job's (every host's chips), and each host feeds the rows of the
  data positions its chips hold: v5e:4x4 is 4 hosts of 2x2 chips."""
  topology = hardware.topology("v5e:4x4")
  assert topology.hosts == 4 and len(topology.devices) == 16
  shares = {spec: training.host_share(mesh_lib.make_mesh(spec, devices=topology.devices))
            for spec in ("data:16,model:1", "data:4,model:4", "data:2,model:8")}
  # A model axis of 4 runs along neighbouring chips, two hosts' worth of a row each.
  assert shares == {"data:16,model:1": {"hosts": 4, "data_per_host": 4},
                    "data:4,model:4": {"hosts": 4, "data_per_host": 2},
                    "data:2,model:8": {"hosts": 4, "data_per_host": 1}}
  setup = compiler.build(topology, TINY_LLAMA, "tiny-llama",
                         engine.ScoringOptions(mesh="data:4,model:1", max_length=64))
  assert setup.groups == 4  # scoring: each host is a data-parallel group
  job = training.job_setup(setup)
  assert dict(job.mesh.shape) == {"data": 16, "model": 1} and job.mesh.devices.size == 16
  # Splash trains as it scores (its backward kernels): the training step is planned with it too,
  # and its flags name it (not --attention=auto, nor socialrm-train's default, xla), with the
  # block size the default gives there: 16384 token slots of rows of 128 (twice --max_length).
  assert setup.attention == "splash" and job.attention == "splash"
  settings = training.settings_for(engine.ScoringOptions(mesh="data:4,model:1", max_length=64),
                                   train.TrainConfig(), "full")
  assert settings.attention == "auto"
  flags = training.command_flags(training.target_settings(settings, job))
  assert ("--row_length=512 --tokens_per_block=16384 --attention=splash" in flags
          and "--mesh=data:16,model:1" in flags), flags
