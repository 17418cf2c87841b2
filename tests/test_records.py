"""The shared vocabulary: items outside it are refused, and the pairs an items row implies are
the pairs the converter wrote for it (what a scorer counts when it has no pairs table)."""

import pytest

from socialrm_jax.base import records
from socialrm_jax.orchestrators import convert, audit


def _item(**changes):
  fields = dict(item_id="x/1", domain="bias", dataset="x", subset="s", split="test",
                prompt=records.user_prompt("q"), candidates=["a", "b"],
                roles=[records.CHOSEN, records.REJECTED], desirability=[1, -1],
                context_condition=None, template="t", attributes={},
                pairs=records.gold_pairs([1, -1]))
  return records.Item(**{**fields, **changes})


@pytest.mark.parametrize("changes, message", [
    ({"roles": ["chosen", "the_worse_one"]}, r"roles \['the_worse_one'\] are not in"),
    ({"context_condition": "ambig"}, "context condition 'ambig' is not in"),
    ({"domain": "fairness"}, "unknown domain 'fairness'"),
])
def test_an_item_outside_the_vocabulary_is_refused(changes, message):
  _item()
  with pytest.raises(ValueError, match=message):
    _item(**changes)


def test_implied_pairs_are_the_converted_pairs_for_every_bundled_dataset():
  converted = convert.convert_all(audit.BUNDLED_DATA, "all")
  written: dict[str, list[tuple[int, int]]] = {}
  for row in converted.pairs:
    written.setdefault(row["item_id"], []).append((row["chosen_index"], row["rejected_index"]))
  for item in converted.items:
    assert records.item_pairs(item) == written[item["item_id"]], item["item_id"]
  sources = {row["label_source"] for row in converted.pairs}
  assert sources == set(records.LABEL_SOURCES)  # gold, directional and control all checked
