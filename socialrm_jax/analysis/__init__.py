"""Metrics, report and plots: from scores to `metrics.json`, `report.md` and PNGs.

Reads as its pipeline: `reward_tables` (read a scores set) -> `pairs` (join to items and pairs,
ties, selections) -> `accuracy`, `distribution`, `calibration`, `confounds` (every dataset) and the
modules dataset plug-ins take their metrics from (`bias`, `stereotypes`, `safety`, `ethics`,
`moral_stories`), over the intervals of `bootstrap` -> `evaluate` (the metrics.json tree) ->
`report` and `plots`; `objectives` (each output of a multi-objective head alone) and `values`
(the value probe's statistics, section and plot) add report sections. Nothing is imported here: the dataset plug-ins import the metric modules
they need, and a converter that imports them should not pay for JAX (`calibration`).
"""
