"""The scoring flags `socialrm-score` and the value probe both take: defined once, with the
defaults of `engine.ScoringOptions`, and read back as one `ScoringOptions`.

Defining them here (not in score.py) lets `python -m socialrm_jax.main.probe` take the same flags
without importing score.py's own required ones (`--items`).
"""

from __future__ import annotations

from absl import flags

from socialrm_jax.scoring import engine

# Defaults come from engine.ScoringOptions, the one place they are set.
_DEFAULTS = engine.ScoringOptions()

MODEL = flags.DEFINE_string("model", None, "HF checkpoint folder, native checkpoint folder, "
                            "GGUF file (or a folder holding one), 'smollm2' (the embedded "
                            "default model), or a Hub id org/name[@REVISION] (downloaded, "
                            "checked against the Hub's sha256; docs/fetching.md).", required=True)
_MAX_LENGTH = flags.DEFINE_integer("max_length", _DEFAULTS.max_length,
                                   "Longest sequence, in tokens.")
_DTYPE = flags.DEFINE_enum("dtype", _DEFAULTS.dtype, ["float32", "bfloat16"],
                           "Parameter/compute dtype.")
_MESH = flags.DEFINE_string("mesh", _DEFAULTS.mesh, "Mesh over this process's devices, e.g. "
                            "data:8,model:1 (default: every device on data); a model axis larger "
                            "than one host's devices spans hosts.")
_TOKENS_PER_BATCH = flags.DEFINE_integer("tokens_per_batch", _DEFAULTS.tokens_per_batch,
                                         "Batch size in token slots (rows x row length).")
_TRUNCATION = flags.DEFINE_enum("truncation", _DEFAULTS.truncation, ["left", "error"],
                                "Over-long items: drop prompt tokens from the left, or stop.")
_PROXY = flags.DEFINE_enum("proxy", _DEFAULTS.proxy, list(engine.PROXIES),
                           "Reward: 'none' = the score head; 'loglik' = mean response "
                           "log-probability; 'implicit' = DPO implicit reward against "
                           "--ref_model; 'judge' = pairwise judgements by the model, both orders "
                           "(default: loglik for LM heads, else none).")
_REF_MODEL = flags.DEFINE_string("ref_model", _DEFAULTS.ref_model,
                                 "--proxy=implicit: the reference model (as --model); its "
                                 "tokenizer must be the policy's.")
_LENGTH_NORMALIZE = flags.DEFINE_bool("length_normalize", _DEFAULTS.length_normalize,
                                      "--proxy=implicit: divide the log-ratio sum by the "
                                      "response's token count.")
_CHUNK_SIZE = flags.DEFINE_integer("chunk_size", _DEFAULTS.chunk_size, "Items per output shard.")
_OBJECTIVE = flags.DEFINE_integer("objective", _DEFAULTS.objective,
                                  "Multi-output score heads: the output used as `reward` "
                                  "(default 0); the whole vector is kept in `rewards`.")
_OBJECTIVE_WEIGHTS = flags.DEFINE_list("objective_weights", list(_DEFAULTS.objective_weights),
                                       "Multi-output score heads: `reward` is the outputs' sum "
                                       "with these weights, one per output.")
_ATTENTION = flags.DEFINE_enum("attention", _DEFAULTS.attention,
                               ["auto", "xla", "cudnn", "splash"],
                               "Attention kernel: auto = cuDNN on GPU (bf16), splash on TPU, "
                               "XLA otherwise.")
_COMPILATION_CACHE = flags.DEFINE_string(
    "compilation_cache", _DEFAULTS.compilation_cache,
    "Persistent XLA compilation cache folder; 'default' = ~/.cache/socialrm_jax/xla (or under "
    "$XDG_CACHE_HOME); empty = off.")

_CHECK_INVARIANCE = flags.DEFINE_integer(
    "check_invariance", _DEFAULTS.check_invariance,
    "After scoring, re-score this many of the items (a fixed sample) in other batch "
    "compositions and row lengths, and record the largest reward difference in run.json "
    "(`invariance`); 0 = off.")


def options() -> engine.ScoringOptions:
  """The parsed flags as scoring options."""
  return engine.ScoringOptions(
      max_length=_MAX_LENGTH.value, truncation=_TRUNCATION.value, proxy=_PROXY.value,
      ref_model=_REF_MODEL.value, length_normalize=_LENGTH_NORMALIZE.value,
      tokens_per_batch=_TOKENS_PER_BATCH.value, chunk_size=_CHUNK_SIZE.value,
      objective=_OBJECTIVE.value, objective_weights=tuple(_OBJECTIVE_WEIGHTS.value),
      dtype=_DTYPE.value, mesh=_MESH.value, attention=_ATTENTION.value,
      compilation_cache=_COMPILATION_CACHE.value, check_invariance=_CHECK_INVARIANCE.value)
