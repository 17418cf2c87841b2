"""Questions beyond one model's metrics tree: paired model comparisons, per-objective accuracies,
the spread over prompt templates, identity-swap effects, the value probe, the vocabulary scan's
statistics and the value-bias ablation. Nothing is imported here: each module imports the ones it
needs.
"""
