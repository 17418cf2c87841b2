"""FSDP (`training/fsdp.py`): on 8 devices the trained parameters, their gradient sums and the
optimizer state are split over the mesh, a step returns its state sharded as it came in (one
program a block shape), and the weights after several steps equal one device's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.helpers import model_fixtures
from tests.helpers.paths import REPO_ROOT

SCRIPT = """
    import json, numpy as np, jax, optax
    from socialrm_jax.runtime import mesh as mesh_lib
    from socialrm_jax.scoring.item_tokens import EncodedItem
    from socialrm_jax.training import pair_batches, trainable
    from socialrm_jax.training import train_step as train_step_lib
    assert jax.device_count() == 8, jax.devices()
    rng = np.random.default_rng(0)
    items = []
    for i in range(16):  # a prompt and two responses that differ from their first token on
      prompt, chosen, rejected = (rng.integers(3, 100, n).tolist() for n in (5, 3, 4))
      rejected[0] = chosen[0] + 1
      items.append(EncodedItem(i, f"p{{i}}", (np.array(prompt + chosen, np.int32),
                                              np.array(prompt + rejected, np.int32)),
                               (len(prompt), len(prompt)), None, 0))
    blocks = [b.arrays() for b in pair_batches.pack_pairs(
        items, [0.0] * len(items), buckets=(16,), row_length=16, rows_per_block=8)]
    assert len(blocks) == 2

    def train(spec, lora):
      mesh = mesh_lib.make_mesh(spec, devices=jax.devices()[:1] if spec is None else None)
      model = trainable.load_base({folder!r}, dtype="float32", mesh=mesh, seed=0)
      trained, frozen = trainable.split_trainable(model.params, lora)
      if lora:
        targets = trainable.lora_targets(model, trainable.DEFAULT_LORA_TARGETS)
        trained.update(trainable.init_lora(model, targets, 4, 0))
      step = train_step_lib.TrainStep(model, optax.adamw(1e-2), mesh, dtype=np.float32,
                                      lora_scale=2.0 if lora else 1.0)
      trained, frozen = step.place(trained), step.place(frozen)
      opt_state = step.init(trained)
      first = {{p: v.sharding for p, v in trained.items()}}
      moved = set()
      for _ in range(3):
        trained, opt_state, _ = step.step(trained, opt_state, frozen, blocks)
        moved |= {{f"{{p}}: {{first[p].spec}} -> {{v.sharding.spec}}" for p, v in trained.items()
                   if not v.sharding.is_equivalent_to(first[p], v.ndim)}}
      specs = {{p: str(v.sharding.spec) for p, v in trained.items()}}
      largest = max(trained, key=lambda p: trained[p].size)
      moments = [leaf for leaf in jax.tree.leaves(opt_state) if leaf.ndim]
      return {{
          "trained": {{p: np.asarray(v).tolist() for p, v in trained.items()}},
          "moments": [np.asarray(m).tolist() for m in moments],
          "moved": sorted(moved),
          "specs": specs,
          "largest_shard": [list(trained[largest].addressable_shards[0].data.shape),
                            list(trained[largest].shape)],
          "moment_shards": sorted({{m.addressable_shards[0].data.size * 8 // m.size
                                    for m in moments}}),
          "accumulate_programs": step.accumulate._cache_size(),
          "update_programs": step.update._cache_size()}}

    out = {{}}
    for lora in (False, True):
      for spec in (None, "data:8,model:1", "data:4,model:2"):
        out[f"{{lora}} {{spec}}"] = train(spec, lora)
    print("RESULT" + json.dumps(out))
"""


@pytest.mark.slow  # a subprocess on 8 fake devices
def test_fsdp_on_8_devices_equals_one_device_and_keeps_its_shardings(tmp_path):
  folder = model_fixtures.save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification",
                                             num_key_value_heads=2)
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO_ROOT), JAX_NUM_CPU_DEVICES="8",
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT.format(folder=str(folder)))],
                        env=env, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  out = json.loads(done.stdout.split("RESULT", 1)[1])
  for lora in (False, True):
    one = out[f"{lora} None"]
    for spec in ("data:8,model:1", "data:4,model:2"):
      run = out[f"{lora} {spec}"]
      assert not run["moved"], (lora, spec, run["moved"])  # each step's state as it came in
      assert run["accumulate_programs"] == 1 and run["update_programs"] == 1, (lora, spec, run)
      assert any("data" in s for s in run["specs"].values()), run["specs"]
      shard, whole = run["largest_shard"]
      assert np.prod(shard) * (8 if spec == "data:8,model:1" else 4) <= np.prod(whole), (spec, shard)
      assert max(run["moment_shards"]) < 8, run["moment_shards"]  # no moment whole on a device
      # Three Adam steps from the same weights on the same pairs: the sums over the mesh's rows
      # and the gradients' reduce-scatters add in another order than one device's, each an
      # error of a few float32 epsilons of the largest term (the 8 rows of a block, a 32-wide
      # model), and Adam's normalised step moves each weight by at most its learning rate, so
      # that error reaches the weights scaled by no more than the step count: 3 steps x 1e-2
      # x 1e-3 of a relative change covers it with room (an error of a sign's flip would be 2e-2).
      for path, weights in one["trained"].items():
        np.testing.assert_allclose(run["trained"][path], weights, rtol=0, atol=3e-5,
                                   err_msg=f"{lora} {spec} {path}")
      for got, want in zip(run["moments"], one["moments"]):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7, err_msg=f"{lora} {spec}")
