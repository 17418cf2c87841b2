"""A model loaded with `--mesh=data:1,model:8` by two processes of 4 CPU devices (launch/local.py),
each a simulated host: every device's shard is the same slice of the whole tensor (loaded apart,
with no mesh), and each process reads from the files only the bytes of its own devices' shards
(`SafetensorsSource.bytes_read`, counted), not the whole checkpoint."""

import json
import re
import subprocess
import sys

from tests.helpers.model_fixtures import save_tiny_hf_model
from tests.helpers.multiprocess import launched
from tests.helpers.scoring_fixtures import subprocess_env

SCRIPT = """
import json, math, sys
import jax
import numpy as np
from absl import flags
from socialrm_jax.models import load_reward_model, weights
from socialrm_jax.runtime import mesh as mesh_lib

flags.DEFINE_string("coordinator_address", None, "")
flags.DEFINE_integer("num_processes", 1, "")
flags.DEFINE_integer("process_id", 0, "")
flags.FLAGS(sys.argv)
F = flags.FLAGS
jax.distributed.initialize(F.coordinator_address, F.num_processes, F.process_id)
folder = {folder!r}

opened = []  # every safetensors source a load opens, to read its byte count
original_init = weights.SafetensorsSource.__init__
def counting_init(self, *args, **kwargs):
  original_init(self, *args, **kwargs)
  opened.append(self)
weights.SafetensorsSource.__init__ = counting_init

mesh = mesh_lib.make_mesh("data:1,model:8")
model = load_reward_model(folder, mesh=mesh)
read = sum(source.bytes_read for source in opened)
# The reference: the whole model on one of this process's own devices.
whole_model = load_reward_model(
    folder, mesh=mesh_lib.make_mesh("data:1,model:1", devices=jax.local_devices()[:1]))
whole = {{path: np.asarray(v.get_value()) for path, v in weights.param_paths(whole_model.module).items()}}

own_bytes, split, mismatched = 0, 0, []
for path, variable in weights.param_paths(model.module).items():
  value = variable.get_value()
  distinct = {{}}
  for shard in value.addressable_shards:
    key = tuple(s.indices(n)[:2] for s, n in zip(shard.index, value.shape))
    distinct[key] = shard
    if not np.array_equal(np.asarray(shard.data), whole[path][shard.index]):
      mismatched.append(path)
  split += len(distinct) > 1
  own_bytes += sum(math.prod(b - a for a, b in key) * value.dtype.itemsize for key in distinct)
print("RESULT" + json.dumps({{"read": read, "own": own_bytes, "split": split,
                             "mismatched": mismatched,
                             "checkpoint": sum(a.nbytes for a in whole.values())}}))
"""


def test_each_host_reads_only_its_devices_shards(tmp_path):
  # 8 query and key/value heads and an MLP of 64: the heads' and MLP's axes split eight ways.
  folder = save_tiny_hf_model(tmp_path, "LlamaForSequenceClassification",
                              num_attention_heads=8, num_key_value_heads=8, head_dim=4)
  script = tmp_path / "load.py"
  script.write_text(SCRIPT.format(folder=str(folder)))
  result = subprocess.run(launched([sys.executable, str(script)]), capture_output=True, text=True,
                          timeout=300, env=subprocess_env())
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  reports = [json.loads(line.split("RESULT", 1)[1])
             for line in result.stdout.splitlines() if "RESULT" in line]
  assert len(reports) == 2
  for report in reports:
    assert report["mismatched"] == []
    assert report["split"] >= 7  # q, k, v, o, gate, up, down (and the embedding's vocabulary)
    # Only its own shards (a replicated parameter once): half of each split tensor, all of the
    # rest, so less than the checkpoint.
    assert report["read"] == report["own"]
    assert report["read"] < 0.7 * report["checkpoint"]
  assert re.search(r"\[1\] RESULT", result.stdout)
