"""What every family's config shares: the head fields and the opening of `config_from_hf` (the
architecture checked, the head, labels and pad token read from `config.json` the same way), and
the JSON form of our own configs (what native checkpoints store)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from socialrm_jax.models import heads as heads_lib

# PretrainedConfig's default when a config.json carries neither `id2label` nor `num_labels`.
HF_DEFAULT_NUM_LABELS = 2


def num_labels(hf_config: dict[str, Any]) -> int:
  """How many outputs HF's classifier has: `id2label` wins, as in `PretrainedConfig`."""
  if hf_config.get("id2label"):
    return len(hf_config["id2label"])
  return int(hf_config.get("num_labels") or HF_DEFAULT_NUM_LABELS)


def head_fields(hf_config: dict[str, Any], architecture: str, architectures: Mapping[str, str],
                family: str) -> dict[str, Any]:
  """The opening of every family's `config_from_hf`: `architecture` checked to be one of the
  family's `architectures` (a ValueError naming them otherwise), then the `FamilyConfig` head
  fields as `config.json` gives them (a family overrides `num_labels` where its class fixes it)."""
  if architecture not in architectures:
    raise ValueError(f"{architecture!r} is not a {family} architecture; "
                     f"known: {sorted(architectures)}")
  return dict(architecture=architecture, head=architectures[architecture],
              num_labels=num_labels(hf_config), pad_token_id=hf_config.get("pad_token_id"))


def attention_heads(hidden_size: int, num_heads: int, hidden_name: str = "hidden_size",
                    heads_name: str = "num_attention_heads") -> None:
  """A ValueError, in `config.json`'s own field names, unless the heads split the width evenly
  (the families whose head width is hidden_size // num_heads)."""
  if hidden_size % num_heads:
    raise ValueError(f"{hidden_name}={hidden_size} is not a multiple of {heads_name}={num_heads}")


@dataclasses.dataclass(frozen=True)
class FamilyConfig:
  """The fields every family's frozen config dataclass starts with (hashable, so it can live in
  an nnx graph definition), and its JSON form: `to_dict` / `from_dict`. JSON has no tuples, so
  tuple fields go out as lists and come back as tuples; the reward head as its own dict.

  `head`: "score" (a sequence classifier), "lm" (a causal LM) or "none" (the trunk alone).
  `reward_head`: a custom reward head (ArmoRM, GRM, ...: `heads.describe`) in place of the
  family's `score` head; None for the standard one. Only the decoders carry one.
  `tie_word_embeddings`: the LM head is the token embedding (families with no LM head: False).
  """
  architecture: str
  head: str
  num_labels: int
  pad_token_id: int | None
  reward_head: heads_lib.HeadSpec | None = dataclasses.field(default=None, kw_only=True)
  tie_word_embeddings: bool = dataclasses.field(default=False, kw_only=True)

  @property
  def attention_logit_cap(self) -> float | None:
    """The soft cap on attention logits (Gemma 2), or None."""
    return None

  @property
  def has_sliding_windows(self) -> bool:
    """Whether some layer attends through a sliding window."""
    return False

  @property
  def appended_token_ids(self) -> tuple[int, ...]:
    """Tokens the model's own scorer appends after the templated conversation (InternLM2's
    reward token); none for every other model."""
    return ()

  def to_dict(self) -> dict[str, Any]:
    out = {k: list(v) if isinstance(v, tuple) else v
           for k, v in dataclasses.asdict(self).items() if k != "reward_head"}
    out["reward_head"] = None if self.reward_head is None else self.reward_head.to_dict()
    return out

  @classmethod
  def from_dict(cls, d: dict[str, Any]):
    head = d.get("reward_head")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k != "reward_head"}
    return cls(**fields, reward_head=None if head is None else heads_lib.HeadSpec.from_dict(head))
