"""socialrm_jax: audit reward models for socially undesirable preferences, in JAX/Flax.

The package reads as its pipeline: `datasets` (one adapter per dataset reads its source into
items and pairs; `orchestrators/convert` writes them), `models` (Flax reward models from real
checkpoints), `runtime` (the device mesh, the multi-process job, the compilation cache: what every
computing command runs on), `scoring` (one jit-compiled, mesh-sharded scorer), `analysis` (metrics
and report, with each dataset's own in `analysis/datasets/`, found by the dataset's name), and the
audit (`orchestrators/audit`: all of it from one config); `training` trains reward models on
preference pairs (`orchestrators/train`). The commands are `main/`: `socialrm-score` is
`python -m socialrm_jax.main.score`; `api/` is the same for Python (`socialrm_jax.audit(...)`,
`score`, `train`: docs/python_api.md).

The house is one-way, and its folders show it: each layer is one folder of this package, and this
file, the package's face, is the only module outside them. A module imports (at module level,
inside a function or under TYPE_CHECKING alike) only modules of its own layer or of the layers
above it in this list, and no two modules import each other, directly or around a loop. A module
also depends on its parent packages, whose `__init__` runs before it. import-linter's contracts
in pyproject.toml state this list (`lint-imports`; tests/test_layering.py runs it and checks that
the two agree); a module in no layer folder breaks them. docs/architecture.md says why each
layer sits where it does. The face itself imports nothing
of the package but one thing: its `__getattr__` (PEP 562) takes the API's names from the top layer
on first use, so `import socialrm_jax` stays light (tests/test_layering.py checks it).

Layers, bottom first, one folder each:
  base           errors, records, settings, tables, templates, registry: the vocabulary, formats
  sources        reading and hf_reading (original files row by row), lexicons, identity_swaps
  datasets       one input adapter per dataset, its templates; which exist; dataset specs
  models         Flax model code, weights, tokenizers, default_model
  runtime        the mesh, the multi-process job, global arrays, compilation cache, provenance
  scoring        the compiled step, packing, the streaming run
  analysis       metrics, intervals, report and plots; each dataset's analysis (datasets/)
  training       reward-model training: pair batches, TRL's loss, LoRA, optimizer, step, export
  orchestrators  convert, audit, probe, vocab_scan, train, plan/: each named after its command
  main           the absl mains, one per console script, and command (how each runs)
  api            the Python API: audit, score, train, as the commands run them (for notebooks)
"""

__version__ = "0.1.0"

# The Python API's names (socialrm_jax/api), reachable from here without importing it up front.
API_NAMES = ("audit", "score", "train", "AuditResult", "TrainResult")


def __getattr__(name: str):
  if name in API_NAMES:
    from socialrm_jax import api  # the face's one import of the package: on first use
    return getattr(api, name)
  raise AttributeError(f"module 'socialrm_jax' has no attribute {name!r}")


def __dir__() -> list[str]:
  return sorted([*globals(), *API_NAMES])
