"""The same scores on 1 device, on 8 fake CPU devices with data:8, and with data:4,model:2."""

import json
import subprocess
import sys
import textwrap

import pytest

from socialrm_jax.base import tables
from socialrm_jax.models.reward_model import load_reward_model
from socialrm_jax.scoring import engine
from tests.helpers import scoring_fixtures as fx

TOLERANCE = 1e-5
OPTIONS = dict(max_length=256, tokens_per_batch=1024, chunk_size=4, smallest_bucket=64)

# Runs in a child process: JAX_NUM_CPU_DEVICES must be set before jax is imported.
CHILD = textwrap.dedent("""
    import json, sys
    import jax
    from tests.helpers import scoring_fixtures as fx
    from socialrm_jax.base import tables
    from socialrm_jax.models.reward_model import load_reward_model
    from socialrm_jax.runtime import mesh as mesh_lib
    from socialrm_jax.scoring import engine
    model_dir, out, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    assert len(jax.devices()) == 8, jax.devices()
    for spec in ("data:8", "data:4,model:2"):
      mesh = mesh_lib.make_mesh(spec)
      model = load_reward_model(model_dir, mesh=mesh)
      run = engine.score_items(model, fx.all_items(), f"{out}/{spec}", mesh=mesh,
                               options=engine.ScoringOptions(**options))
      assert run["mesh"] == mesh_lib.describe(mesh) and run["devices"] == 8, run
    """)


@pytest.mark.slow
def test_scores_agree_across_meshes(tmp_path):
  fx.make_llama(tmp_path / "rm")
  engine.score_items(load_reward_model(tmp_path / "rm"), fx.all_items(), tmp_path / "one",
                     options=engine.ScoringOptions(**OPTIONS))
  one = {k: r["reward"] for k, r in fx.scores_by_key(tables.read_rows(tmp_path / "one", "scores")).items()}
  subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "rm"), str(tmp_path),
                  json.dumps(OPTIONS)], env=fx.subprocess_env(8), check=True, timeout=300)
  for spec in ("data:8", "data:4,model:2"):
    rows = tables.read_rows(tmp_path / spec, "scores")
    got = {k: r["reward"] for k, r in fx.scores_by_key(rows).items()}
    assert fx.max_abs_diff(one, got) <= TOLERANCE, spec
