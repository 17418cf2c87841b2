"""socialrm_jax: audit reward models for socially undesirable preferences, in JAX/Flax.

The package reads as its pipeline: datasets -> items and pairs (`orchestrators/convert`),
`models` (Flax reward models from real checkpoints), `scoring` (one jit-compiled, mesh-sharded
scorer), `analysis` (metrics and report), and the audit (`orchestrators/audit`: all of it from
one config); `training` trains reward models on preference pairs (`orchestrators/train`). The
commands are `main/`: `socialrm-score` is `python -m socialrm_jax.main.score`.

The house is one-way, and its folders show it: each layer is one folder of this package, and this
file, the package's face, is the only module outside them. A module imports (at module level,
inside a function or under TYPE_CHECKING alike) only modules of its own layer or of the layers
above it in this list, and no two modules import each other, directly or around a loop. A module
also depends on its parent packages, whose `__init__` runs before it. tests/test_layering.py reads
a module's layer from its folder and the order from this list; a module in no layer folder fails
it. docs/architecture.md says why each layer sits where it does.

Layers, bottom first, one folder each:
  base           errors, records, settings, tables, templates: the vocabulary, formats, settings
  sources        reading and hf_reading (original files row by row), lexicons, identity_swaps
  models         Flax model code, weights, tokenizers, default_model
  scoring        the compiled step, packing, the streaming run
  analysis       metrics, intervals, report and plots
  datasets       the plug-in interface and one plug-in per dataset
  registry       which plug-ins exist; dataset specs
  training       reward-model training: pair batches, TRL's loss, LoRA, optimizer, step, export
  orchestrators  convert, audit, probe, vocab_scan, train, plan/: each named after its command
  main           the absl mains, one per console script, and command (how each runs)
"""

__version__ = "0.1.0"
