"""What a run writes from its metrics: report.md and report.html, the plots, provenance, RewardBench
2 result files and the Hub dataset. Nothing is imported here: each module imports the ones it
needs.
"""
