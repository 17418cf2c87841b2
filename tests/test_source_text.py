"""Source text as users write it: unicode and right-to-left text go through conversion unchanged."""

import json

from socialrm_jax import registry
from socialrm_jax.orchestrators import convert



def test_unicode_and_right_to_left_text_go_through_unchanged(tmp_path):
  texts = {"prompt": "مرحبا، هل هذا عادل؟", "chosen": "שלום \u202eעולם\u202c 👋🏽",
           "rejected": "e\u0301 ＡＢＣ \u200f"}
  (tmp_path / "p.jsonl").write_text(json.dumps(texts, ensure_ascii=False) + "\n", encoding="utf-8")
  item, = convert.convert_source(
      registry.parse_specs(f"preference:{tmp_path / 'p.jsonl'}")[0]).items
  assert item["prompt"][-1]["content"] == texts["prompt"]
  assert item["candidates"] == [texts["chosen"], texts["rejected"]]
