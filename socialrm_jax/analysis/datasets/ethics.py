"""ETHICS' analysis: group accuracy per task (`analysis.ethics`)."""

from socialrm_jax.analysis import ethics as ethics_metrics
from socialrm_jax.analysis import hooks

ANALYSIS = hooks.register("ethics", hooks.DatasetAnalysis(
    summary=ethics_metrics.summary,
    report_metrics=("accuracy", "group_accuracy", "js_distance"),
    report_subset_metrics=("accuracy", "group_accuracy")))
