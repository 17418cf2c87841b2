"""Metrics, report and plots: from scores to `metrics.json`, `report.md` and PNGs.

Its folders read as its pipeline, each importing only those before it:

- `resampling/`: the stratified bootstrap (`bootstrap`) and the values and intervals made from its
  rows (`estimates`);
- `tables/`: a scores set read (`reward_tables`) and joined to its items and pairs (`pairs`: ties,
  selections), the ids and codes they are held in;
- `dataset_analysis`: what a dataset's analysis is and where it is found;
- `metrics/`: what every dataset gets (`accuracy`, `confounds`, `calibration`, `distribution`,
  `best_of_n`) and the `verdicts` over them;
- `outputs/`: `report` (report.md), `report_html`, `plots`, `provenance`, RewardBench 2 result
  files and the Hub dataset;
- `datasets/`: each dataset's own analysis, metrics, report rows and findings in one module named
  as the dataset, found through `dataset_analysis.for_dataset`;
- `evaluate`: the metrics.json tree of one scores set;
- `studies/`: paired model comparisons, per-objective accuracies, the spread over templates,
  identity-swap effects, the value probe's and the vocabulary scan's statistics, the ablation;
- `runner`: socialrm-metrics' whole run.

Nothing is imported here: each module imports the ones it needs.
"""
