"""HH-RLHF's analysis: the generic work alone (accuracy per subset, distribution bias), not the
generic dataset's label and best-of-N rows."""

from socialrm_jax.analysis import dataset_analysis

ANALYSIS = dataset_analysis.register("hh_rlhf", dataset_analysis.DatasetAnalysis())
