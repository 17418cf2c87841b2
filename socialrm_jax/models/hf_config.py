"""Reading `config.json` fields whose meaning every family shares."""

from __future__ import annotations

from typing import Any

# PretrainedConfig's default when a config.json carries neither `id2label` nor `num_labels`.
HF_DEFAULT_NUM_LABELS = 2


def num_labels(hf_config: dict[str, Any]) -> int:
  """How many outputs HF's classifier has: `id2label` wins, as in `PretrainedConfig`."""
  if hf_config.get("id2label"):
    return len(hf_config["id2label"])
  return int(hf_config.get("num_labels") or HF_DEFAULT_NUM_LABELS)
