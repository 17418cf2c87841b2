"""The model-family interface (`ModelFamily`, with the config every family builds, `ModelConfig`)
and which module implements which HuggingFace architecture.

A family is a module (`decoder`, `gpt2`, `gpt_neox`, `bert`, `deberta`) that declares every member
of `ModelFamily`; `family_for` returns it typed so, and the loader, the trainer and the planner read
a family only through these members. `ARCHITECTURES` maps a HF architecture name (as in
`config.json`'s `architectures`) to the head it carries: `"score"` (sequence classification),
`"lm"` (causal language model) or `"none"` (bare encoder). Family modules are imported lazily, so
importing this module costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Mapping, Protocol, runtime_checkable

if TYPE_CHECKING:  # the types the interface names, imported for hints only (they import jax)
  from socialrm_jax.models import heads, weights

FAMILY_MODULES = ("decoder", "gpt2", "gpt_neox", "bert", "deberta")


@runtime_checkable
class ModelConfig(Protocol):
  """What every family's `Config` carries (`hf_config.FamilyConfig` gives the first six and the
  JSON form; the family the rest): frozen and hashable, so it can live in an nnx graph."""
  architecture: str
  head: str  # "score" | "lm" | "none"
  num_labels: int
  pad_token_id: int | None
  reward_head: heads.HeadSpec | None  # a custom reward head in place of `score`; None: `score`
  tie_word_embeddings: bool  # the LM head is the token embedding
  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  head_dim: int

  @property
  def attention_logit_cap(self) -> float | None: ...

  @property
  def has_sliding_windows(self) -> bool: ...

  @property
  def appended_token_ids(self) -> tuple[int, ...]: ...

  def to_dict(self) -> dict[str, Any]: ...


@runtime_checkable
class ModelFamily(Protocol):
  """What a family module declares, every member explicitly (no defaults are assumed)."""
  # HF architecture name -> "score" | "lm" | "none".
  ARCHITECTURES: Mapping[str, str]
  # Architectures of this family that are refused -> why (`family_for` says so).
  REFUSED_ARCHITECTURES: Mapping[str, str]
  IS_CAUSAL: bool  # a decoder (reads at the last token) or an encoder (at the first)
  # Attention adds a position bias that only "xla" attention takes (DeBERTa).
  HAS_POSITION_BIAS: bool
  # HF's `base_model_prefix` ("transformer."), which a checkpoint saved from the bare trunk
  # lacks (`reward_model` then reads its names with it); "" where every class saves the trunk
  # under the same names.
  BASE_MODEL_PREFIX: str
  Config: type  # a dataclass implementing ModelConfig, with `from_dict`
  Model: type  # an nnx.Module: Model(config, *, attention, dtype, param_dtype, rngs)

  def config_from_hf(self, hf_config: dict[str, Any], architecture: str) -> ModelConfig:
    """Our config from a HF `config.json` dict; ValueError/KeyError/TypeError if unsupported."""

  def weight_sources(self, config: ModelConfig) -> dict[str, weights.WeightSource]:
    """Every parameter path of `Model(config)` -> the HF tensor(s) it is read from."""

  def is_saved_buffer(self, hf_name: str) -> bool:
    """True for a checkpoint tensor that is a saved buffer, not a weight (the loader skips it)."""


def family_modules() -> list[ModelFamily]:
  """Every family module, each checked to declare the whole `ModelFamily` interface."""
  modules = [importlib.import_module(f"socialrm_jax.models.{name}") for name in FAMILY_MODULES]
  for module in modules:
    if not isinstance(module, ModelFamily):
      missing = [name for name in ModelFamily.__annotations__ if not hasattr(module, name)]
      missing += [name for name in ("config_from_hf", "weight_sources", "is_saved_buffer")
                  if not hasattr(module, name)]
      raise TypeError(f"{module.__name__} does not declare the ModelFamily interface: lacks "
                      + ", ".join(missing))
  return modules


def supported_architectures() -> dict[str, str]:
  """Every supported HF architecture name -> its head kind."""
  out: dict[str, str] = {}
  for module in family_modules():
    out.update(module.ARCHITECTURES)
  return dict(sorted(out.items()))


def family_for(architecture: str) -> ModelFamily:
  """The family module implementing `architecture`, or a ValueError listing the supported ones
  (or saying why a family refuses it: its `REFUSED_ARCHITECTURES`)."""
  for module in family_modules():
    if architecture in module.ARCHITECTURES:
      return module
  for module in family_modules():
    reason = module.REFUSED_ARCHITECTURES.get(architecture)
    if reason:
      raise ValueError(f"unsupported architecture {architecture!r}: {reason}")
  raise ValueError(
      f"unsupported architecture {architecture!r}; supported: "
      + ", ".join(supported_architectures()))
