"""XSTest's analysis: over-refusal and unsafe-compliance rates (`analysis.safety`)."""

from socialrm_jax.analysis import hooks, report, safety

ANALYSIS = hooks.register("xstest", hooks.DatasetAnalysis(
    summary=safety.summary,
    report_metrics=("accuracy", "over_refusal_rate", "unsafe_compliance_rate", "js_distance"),
    null_values={rate: report.CHANCE for rate in safety.RATES},
    higher_is_undesirable=tuple(safety.RATES), findings=safety.findings))
