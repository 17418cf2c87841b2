"""socialrm_jax: audit reward models for socially undesirable preferences, in JAX/Flax.

The package reads as its pipeline: `convert` (datasets -> items and pairs), `models` (Flax reward
models from real checkpoints), `scoring` (one jit-compiled, mesh-sharded scorer), `analysis`
(metrics and report), and `audit` (all three from one config).
"""

__version__ = "0.1.0"
