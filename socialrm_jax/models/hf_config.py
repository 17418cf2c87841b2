"""What every family's config shares: `config.json` fields read the same way, and the JSON form
of our own configs (what native checkpoints store)."""

from __future__ import annotations

import dataclasses
from typing import Any

# PretrainedConfig's default when a config.json carries neither `id2label` nor `num_labels`.
HF_DEFAULT_NUM_LABELS = 2


def num_labels(hf_config: dict[str, Any]) -> int:
  """How many outputs HF's classifier has: `id2label` wins, as in `PretrainedConfig`."""
  if hf_config.get("id2label"):
    return len(hf_config["id2label"])
  return int(hf_config.get("num_labels") or HF_DEFAULT_NUM_LABELS)


class JsonConfig:
  """`to_dict` / `from_dict` for a family's frozen config dataclass. JSON has no tuples, so
  tuple fields (hashable, as an nnx graph needs) go out as lists and come back as tuples."""

  def to_dict(self) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v
            for k, v in dataclasses.asdict(self).items()}

  @classmethod
  def from_dict(cls, d: dict[str, Any]):
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
