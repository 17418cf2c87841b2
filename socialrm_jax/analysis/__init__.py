"""Metrics, report and plots: from scores to `metrics.json`, `report.md` and PNGs.

Reads as its pipeline: `scores` (read a scores set) -> `pairs` (join to items and pairs, ties,
selections) -> per-concern metric modules (`accuracy`, `bias`, `stereotypes`, `safety`, `ethics`,
`moral_stories`, `distribution`, `calibration`, `confounds`) over the intervals of `bootstrap`
-> `evaluate` (the metrics.json tree) -> `report` and `plots`.
"""

from socialrm_jax.analysis.evaluate import Options, compute_metrics, metrics_from_scored
from socialrm_jax.analysis.scores import Scores, model_name, read_scores

__all__ = ["Options", "Scores", "compute_metrics", "metrics_from_scored", "model_name",
           "read_scores"]
