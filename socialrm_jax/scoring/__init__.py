"""Scoring: every (item, candidate) through a reward model, once, on a device mesh.

item_tokens (items -> token ids) -> packing (ids -> fixed-shape packed batches) -> engine (the one
jit-compiled step and the streaming loop) -> shards (resumable output) and run_report (run.json);
proxies turns readouts into rewards (score head and objectives, loglik, implicit, judge); progress
logs. The device mesh, the multi-process job and the compilation cache are `runtime/`. `engine.ScoringOptions` declares every scoring setting once;
the commands' flags and the audit's model configs come from it (base/settings.py). See README.md beside this file for the choices made.
"""

from socialrm_jax.scoring.engine import ScoringOptions, score_items, select_items

__all__ = ["ScoringOptions", "score_items", "select_items"]
