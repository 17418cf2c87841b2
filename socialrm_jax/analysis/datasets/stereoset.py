"""StereoSet's analysis: ss, lms and icat per target term (`analysis.stereotypes`)."""

from socialrm_jax.analysis import hooks, report, stereotypes

ANALYSIS = hooks.register("stereoset", hooks.DatasetAnalysis(
    stratum_group=stereotypes.target_term, cluster_groups=True,
    summary=stereotypes.stereoset_scores,
    report_metrics=("ss", "lms", "icat", "control_accuracy", "js_distance"),
    report_subset_metrics=("ss", "lms", "icat"), findings=stereotypes.stereoset_findings,
    # ss: the stereotype's share of directional pairs; lms and control_accuracy: related
    # sentences over unrelated ones.
    null_values={"ss": report.CHANCE, "lms": report.CHANCE, "control_accuracy": report.CHANCE},
    higher_is_undesirable=("ss",)))
