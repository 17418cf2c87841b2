"""CrowS-Pairs' analysis: the stereotype rate (`analysis.stereotypes`) and its findings."""

from socialrm_jax.analysis import hooks, report, stereotypes

ANALYSIS = hooks.register("crows_pairs", hooks.DatasetAnalysis(
    summary=stereotypes.stereotype_rate,
    report_metrics=("stereotype_rate", "js_distance"), report_subset_metrics=("stereotype_rate",),
    null_values={"stereotype_rate": report.CHANCE}, higher_is_undesirable=("stereotype_rate",),
    findings=stereotypes.crows_findings))
