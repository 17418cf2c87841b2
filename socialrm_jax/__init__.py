"""socialrm_jax: audit reward models for socially undesirable preferences, in JAX/Flax.

The package reads as its pipeline: `convert` (datasets -> items and pairs), `models` (Flax reward
models from real checkpoints), `scoring` (one jit-compiled, mesh-sharded scorer), `analysis`
(metrics and report), and `audit` (all three from one config).

The house is one-way. Each module belongs to one layer below; it imports (at module level, inside
a function or under TYPE_CHECKING alike) only modules of its own layer or of the layers above it
in this list, and no two modules import each other, directly or around a loop. A module also
depends on its parent packages, whose `__init__` runs before it. tests/test_layering.py reads this
table and checks every import against it; docs/architecture.md says why each layer sits where it
does. An exact name wins over a `prefix.*` pattern.

Layers, bottom first:
  base           socialrm_jax errors records tables templates
  sources        datasets datasets.reading datasets.hf_reading counterfactuals
  models         default_model models models.*
  scoring        scoring scoring.*
  analysis       analysis analysis.*
  plug-ins       datasets.plugin datasets.*
  registry       datasets.registry
  orchestrators  conversion value_probe vocabulary_scan pipeline planning planning.*
  commands       convert score metrics audit probe vocab_scan convert_checkpoint plan
"""

__version__ = "0.1.0"
