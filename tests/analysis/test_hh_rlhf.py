"""HH-RLHF's analysis (analysis/datasets/hh_rlhf.py): the generic work alone, registered under
its own name so that its items do not get the generic dataset's label and best-of-N rows."""

import dataclasses

from socialrm_jax.analysis import dataset_analysis
from socialrm_jax.analysis.datasets import hh_rlhf
from socialrm_jax.datasets.registry import GENERIC


def test_hh_rlhf_has_its_own_analysis_with_every_hook_left_out():
  analysis = dataset_analysis.for_dataset("hh_rlhf")
  assert analysis is hh_rlhf.ANALYSIS
  generic = dataset_analysis.for_dataset(GENERIC)
  assert analysis is not generic and generic.summary is not None
  bare = dataset_analysis.DatasetAnalysis()
  for field in dataclasses.fields(dataset_analysis.DatasetAnalysis):
    assert getattr(analysis, field.name) == getattr(bare, field.name), field.name
