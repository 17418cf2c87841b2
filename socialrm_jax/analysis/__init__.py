"""Metrics, report and plots: from scores to `metrics.json`, `report.md` and PNGs.

Reads as its pipeline: `reward_tables` (read a scores set) -> `pairs` (join to items and pairs,
ties, selections) -> `accuracy`, `distribution`, `calibration`, `confounds` (every dataset) and
each dataset's own analysis, metrics, report rows and findings in one module (`datasets/<name>.py`,
found by the dataset's name through `hooks.for_dataset`; your own preference data's takes
`best_of_n`), over the intervals of `bootstrap` -> `evaluate` (the metrics.json
tree) -> `report` and `plots`; `objectives` (each output of a multi-objective head alone) and
`values` (the value probe's statistics, section and plot) add report sections. Nothing is
imported here: each module imports the ones it needs.
"""
