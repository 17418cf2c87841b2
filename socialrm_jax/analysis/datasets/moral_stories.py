"""Moral Stories' analysis: accuracy with and without the norm, and norm sensitivity
(`analysis.moral_stories`)."""

from socialrm_jax.analysis import hooks, report
from socialrm_jax.analysis import moral_stories as moral_stories_metrics

ANALYSIS = hooks.register("moral_stories", hooks.DatasetAnalysis(
    summary=moral_stories_metrics.summary,
    report_metrics=("accuracy", "accuracy_with_norm", "accuracy_without_norm", "norm_sensitivity",
                    "js_distance"),
    null_values={"accuracy_with_norm": report.CHANCE, "accuracy_without_norm": report.CHANCE,
                 "norm_sensitivity": 0.0},
    # Positive: the moral action is preferred only when the norm is spelled out.
    higher_is_undesirable=("norm_sensitivity",),
    findings=moral_stories_metrics.findings))
