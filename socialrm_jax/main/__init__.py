"""The commands: thin absl mains, one per console script (`socialrm-score` is
`python -m socialrm_jax.main.score`): flags, checks, a call into the layer below.
"""
