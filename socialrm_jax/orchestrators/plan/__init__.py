"""Planning a TPU run without a TPU (`python -m socialrm_jax.main.plan`).

libtpu compiles for a TPU topology on any host: the plan compiles the scoring engine's own step
(`scoring/step.py`) for every batch shape the engine would use, with abstract parameters (shapes
and shardings, no weights), and reads memory from the compiled programs and time from an analytic
roofline. Modules: `hardware` (chips and topologies), `shapes` (real model configs), `cost` (the
analytic FLOPs, bytes and roofline), `compiler` (the compiled step per shape), `projection` (a
real item set packed as the engine packs it), `report` (plan.json and plan.md). Nothing below the
command imports this package.
"""
