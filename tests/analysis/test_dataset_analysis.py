"""Dataset analyses by name (analysis/dataset_analysis.py): where a dataset's analysis is found,
what a registration refuses, and the fields each item's analysis reads of its row
(`Options.item_fields`).
An analysis installed by an entry point is tested in tests/datasets/test_registry.py."""

import json

import pytest

from socialrm_jax.analysis import dataset_analysis
from socialrm_jax.base.errors import InputError
from socialrm_jax.datasets import registry


def test_items_of_a_path_source_are_analysed_as_the_generic_dataset():
  generic = dataset_analysis.for_dataset(registry.GENERIC)
  assert dataset_analysis.for_dataset("someone_elses") is generic
  assert dataset_analysis.for_dataset("bbq") is not generic
  assert generic.summary is not None


def test_a_registration_must_be_an_analysis_and_once_a_name():
  with pytest.raises(TypeError, match="the analysis of 'mine' should be a DatasetAnalysis"):
    dataset_analysis.register("mine", {"summary": None})
  bbq = dataset_analysis.for_dataset("bbq")
  with pytest.raises(InputError, match="dataset analysis 'bbq' is registered twice"):
    dataset_analysis.register("bbq", dataset_analysis.DatasetAnalysis())
  assert dataset_analysis.for_dataset("bbq") is bbq


def test_item_fields_ask_each_rows_own_analysis():
  fields = dataset_analysis.Options().item_fields
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
