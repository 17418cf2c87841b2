"""BBQ's analysis: accuracy per context condition, the bias scores and the group selection spread
(`analysis.bias`), their report rows and findings, and the bias figures."""

import functools

from socialrm_jax.analysis import bias, hooks, plots, report

ANALYSIS = hooks.register("bbq", hooks.DatasetAnalysis(
    item_columns=bias.item_columns, item_facts=bias.item_facts, summary=bias.summary,
    report_metrics=("accuracy", "accuracy_ambiguous", "accuracy_disambiguated",
                    "bias_score_ambiguous", "bias_score_disambiguated",
                    "unknown_rate_disambiguated", "accuracy_disambiguated_biased_gold",
                    "accuracy_disambiguated_anti_biased_gold", "group_selection_spread",
                    "js_distance"),
    null_values={**{name: bias.SELECTION_CHANCE for name in (
        "accuracy_ambiguous", "accuracy_disambiguated", "accuracy_disambiguated_biased_gold",
        "accuracy_disambiguated_anti_biased_gold")}, **{score: 0.0 for score in bias.BIAS_SCORES}},
    higher_is_undesirable=bias.BIAS_SCORES,
    report_sections=bias.report_sections, findings=bias.findings,
    figures={"bbq_bias_scores.png": functools.partial(plots.category_bias_scores, dataset="bbq"),
             "bias_tradeoff.png": functools.partial(plots.bias_tradeoff, dataset="bbq")}))
