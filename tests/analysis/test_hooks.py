"""Dataset analyses by name (analysis/hooks.py): where a dataset's analysis is found, what a
registration refuses, and the fields each item's analysis reads of its row (`Options.item_fields`).
An analysis installed by an entry point is tested in tests/datasets/test_registry.py."""

import json

import pytest

from socialrm_jax.analysis import hooks
from socialrm_jax.base.errors import InputError
from socialrm_jax.datasets import registry


def test_items_of_a_path_source_are_analysed_as_the_generic_dataset():
  assert hooks.for_dataset("someone_elses") is hooks.for_dataset(registry.GENERIC)
  assert hooks.for_dataset("bbq") is not hooks.for_dataset(registry.GENERIC)
  assert hooks.for_dataset(registry.GENERIC).summary is not None


def test_a_registration_must_be_an_analysis_and_once_a_name():
  with pytest.raises(TypeError, match="the analysis of 'mine' should be a DatasetAnalysis"):
    hooks.register("mine", {"summary": None})
  bbq = hooks.for_dataset("bbq")
  with pytest.raises(InputError, match="dataset analysis 'bbq' is registered twice"):
    hooks.register("bbq", hooks.DatasetAnalysis())
  assert hooks.for_dataset("bbq") is bbq


def test_item_fields_ask_each_rows_own_analysis():
  fields = hooks.Options().item_fields
  # StereoSet: its target term is the stratum group; no facts.
  assert fields({"dataset": "stereoset", "attributes": {"target": "nurse"}}) == ("nurse", "")
  # BBQ: no group; its facts are the question's polarity and the answers' groups.
  group, facts = fields({"dataset": "bbq", "attributes": {
      "question_polarity": "neg", "answer_groups": ["old", "young", "unknown"], "other": 1}})
  assert group == "" and json.loads(facts) == {"question_polarity": "neg",
                                               "answer_groups": ["old", "young", "unknown"]}
  # A path source's items are the generic dataset's: the label as the group, best-of-N facts.
  assert fields({"dataset": "mine", "attributes": {"label": "math", "num_correct": 1,
                                                   "id": 7}}) == ("math", "best_of_n")
  # HH-RLHF's analysis reads nothing of a row.
  assert fields({"dataset": "hh_rlhf", "attributes": {"label": "x", "num_correct": 1}}) == ("", "")
