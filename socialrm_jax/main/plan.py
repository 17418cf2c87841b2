"""Plans a scoring (and training) run on a TPU slice or NVIDIA GPUs without the hardware:
compiles the engine's own step for the target and says what fits, which attention kernel and
collectives the programs hold, and how long a step would take (a roofline estimate).

  python -m socialrm_jax.main.plan --topology=v5e:4x4 --model_shape=llama3.1-8b \
      --output_dir=plans/8b-v5e-16 [--chips_per_host=2x2] [--num_slices=1] \
      [--model=PATH (a config.json, or a folder holding one; of its *.safetensors only the
      tensor names and shapes are read, for a custom reward head)] \
      [--mesh=data:4,model:4] [--max_length=2048] [--tokens_per_batch=16384] \
      [--dtype=bfloat16] [--proxy=none|loglik|implicit|judge] [--attention=auto] \
      [--items=CONVERTED --tokenizer=PATH] [--largest_batch=false]
  python -m socialrm_jax.main.plan --topology=h100x8 --model_shape=llama3.1-8b --dtype=bfloat16 \
      --output_dir=plans/8b-h100x8 [--train=full,lora [--row_length=512] [--lora_rank=16] \
      [--tokens_per_block=16384] [--remat_policy=auto]] [--memory_fraction=0.75]

Writes plan.json and plan.md into --output_dir. A model that does not fit is a plan too (exit
0): plan.md says by how much and names the smallest model axis that fits; a training step that
does not fit names the first of --remat_policy=full and a halved --tokens_per_block that does. A step that fails a
check (asked-for cuDNN attention missing from its program, a host transfer inside it, more
programs than batch shapes, weights in another dtype, no program at all) is written and listed,
and the command exits 3. TPU targets need libtpu (`pip install socialrm_jax[tpu]`), GPU targets
JAX's CUDA plugin and cuDNN (`pip install socialrm_jax[gpu-plan]`, then `pip install --no-deps
nvidia-cudnn-cu12==9.28.0.42`); `make test` installs both. How: socialrm_jax/orchestrators/plan/
(the stage: planner.py); docs/tpu_planning.md, docs/gpu_planning.md.
"""

from __future__ import annotations

from socialrm_jax.main import command
from socialrm_jax.orchestrators.plan import planner, report


class ChecksFailed(Exception):
  """A planned step failed a check (plan.md lists each); the plan is written."""


def main(config: planner.PlanSettings) -> None:
  planner.check(config)
  plan = planner.run(config)
  print(report.render_markdown(plan), end="")
  if plan["failures"]:
    raise ChecksFailed(f"{len(plan['failures'])} check(s) failed, listed in "
                       f"{config.output_dir}/plan.md: {plan['failures'][0]}")


COMMAND = command.Command("socialrm-plan", planner.PlanSettings, main, exit_codes={ChecksFailed: 3})


def run():
  COMMAND.run()


if __name__ == "__main__":
  run()
