"""Planning a TPU or GPU run without the hardware (`python -m socialrm_jax.main.plan`).

libtpu compiles for a TPU topology, and JAX's CUDA plugin for NVIDIA GPUs, on any host: the plan
compiles the scoring engine's own step (`scoring/step.py`) for every batch shape the engine would
use, and socialrm-train's step (`training/train_step.py`) for every block shape, with abstract
parameters (shapes and shardings, no weights), and reads memory, kernels and collectives from the
compiled programs and time from an analytic roofline. Modules: `hardware` (chips, GPUs and
topologies), `shapes` (real model configs), `cost` (the analytic FLOPs, bytes and roofline),
`programs` (what a compiled program holds), `compiler` (the scoring step per shape, and its
checks), `training` (the train step per block shape), `projection` (a real item set packed as the
engine packs it), `report` (plan.json and plan.md), `planner` (the settings and the plan the
command runs). Nothing below the command imports this package.
"""
