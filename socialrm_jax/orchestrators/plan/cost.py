"""The analytic cost of one compiled scoring step, and its roofline estimate.

XLA's own `cost_analysis()` is reported as it comes but cannot be used for time: it counts a
scanned layer body once (the decoders scan their layers), and its `optimal_seconds` can be
negative. So the plan counts the work itself, for a batch of B rows of T tokens with S readout
slots a row (`packing.Batcher.shape`), on a model of L layers, N query heads of width H:

    analytic_flops = 2 * matmul_params * B * T          (every token slot, padding included)
                   + 2 * head_params * B * S            (the head runs on the readout slots only)
                   + L * 4 * B * T^2 * N * H * kernel_share   (attention's own: q.k and p.v)

`matmul_params` are the trunk's weight matrices (every `kernel`: projections and MLPs; the
embedding is a gather, not a matmul); `head_params` the score head's, or the LM head's (the
embedding, when tied) for log-likelihood readouts. `kernel_share` is the share of the [T, T]
query-key blocks the attention kernel computes: 1 for the dense XLA softmax; for splash, the
blocks its static mask keeps (causal: n(n+1)/2 of n^2 blocks of `block` tokens) times its passes
(two for causal rows: the shared prefix, then the own branch).

The roofline estimate of a step, per chip, is max(flops / peak bf16 FLOP/s, bytes / HBM
bandwidth), with flops = analytic_flops / chips of the mesh (rows split over `data`, matrices
over `model`) and bytes = the step's arguments on the chip (its parameter shard, read once) +
the residual stream each layer reads and writes (2 * L * B/data * T * D * dtype bytes). It leaves
out communication between chips and every inefficiency, so a real step is slower: it is an
estimate, labelled as one wherever it is shown.
"""

from __future__ import annotations

import dataclasses

from flax import nnx

from socialrm_jax.models import attention, weights

# Parameter path prefixes of the heads (decoder, GPT-2 and BERT families; custom reward heads).
HEAD_PREFIXES = ("score/", "lm_head/", "classifier/", "reward_head/")
# The one kind of parameter a matmul multiplies activations by.
MATMUL_SUFFIX = "/kernel"


@dataclasses.dataclass(frozen=True)
class ModelCounts:
  """What the analytic count needs of a model."""
  parameters: int      # every parameter
  matmul_params: int   # the trunk's weight matrices
  head_params: int     # the matrix the head applies to each readout
  layers: int
  heads: int
  head_dim: int
  hidden: int


def model_counts(module: nnx.Module, config, readout: str) -> ModelCounts:
  """Counts of an (abstract) model's parameters, from their shapes."""
  sizes = {path: int(_size(variable.get_value().shape))
           for path, variable in weights.param_paths(module).items()}
  matmul = sum(n for path, n in sizes.items()
               if path.endswith(MATMUL_SUFFIX) and not path.startswith(HEAD_PREFIXES))
  head = sum(n for path, n in sizes.items()
             if path.startswith(HEAD_PREFIXES) and path.endswith(MATMUL_SUFFIX))
  if readout == "loglik" and head == 0 and config.tie_word_embeddings:
    head = sizes.get("embedder/embedding", 0)  # the tied LM head is the embedding
  heads = config.num_heads
  return ModelCounts(parameters=sum(sizes.values()), matmul_params=matmul, head_params=head,
                     layers=config.num_layers, heads=heads,
                     head_dim=config.head_dim,
                     hidden=config.hidden_size)


def _size(shape) -> int:
  out = 1
  for n in shape:
    out *= int(n)
  return out


def attention_share(implementation: str, length: int, is_causal: bool) -> float:
  """The share of a row's [T, T] query-key blocks the attention kernel computes (see above)."""
  if implementation != "splash" or attention.splash_block(length) is None:
    return 1.0  # the dense softmax (and splash's fallback for rows that are not block multiples)
  if not is_causal:
    return 1.0  # one pass, a full mask
  blocks = length // attention.splash_block(length)
  return 2 * (blocks * (blocks + 1) / 2) / blocks**2  # two causal passes


def analytic_flops(counts: ModelCounts, shape: tuple[int, int, int], implementation: str,
                   is_causal: bool) -> float:
  """FLOPs of one step on batches of `shape` (rows, length, readout slots); see the module doc."""
  rows, length, slots = shape
  matmuls = 2 * counts.matmul_params * rows * length + 2 * counts.head_params * rows * slots
  attention_flops = (counts.layers * 4 * rows * length**2 * counts.heads * counts.head_dim
                     * attention_share(implementation, length, is_causal))
  return float(matmuls + attention_flops)


def bytes_moved(argument_bytes: int, counts: ModelCounts, shape: tuple[int, int, int],
                data: int, dtype_bytes: int) -> float:
  """HBM bytes one chip reads and writes in a step, at least (see the module doc)."""
  rows, length, _ = shape
  return float(argument_bytes + 2 * counts.layers * (rows // data) * length * counts.hidden
               * dtype_bytes)


def roofline_seconds(flops_per_chip: float, bytes_per_chip: float, peak_flops: float,
                     bandwidth: float) -> float:
  """The roofline estimate of a step: max(compute time at peak, memory time at full bandwidth)."""
  return max(flops_per_chip / peak_flops, bytes_per_chip / bandwidth)
