"""Tolerances for comparing two float32 computations of one value that add their terms in
different orders (a sum split over devices, another kernel's blocking, another CPU's vector
width), derived from what differs rather than from what passed on one machine.

A float32 sum of n terms, added in any order, is within (n - 1) u sum|terms| of the exact sum,
u = eps / 2 the unit roundoff (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
section 4.2); two such evaluations are so within n eps sum|terms| of each other. A dot product is
such a sum; so is each step of a network that accumulates (projections, attention, norms).
Comparisons of one computation run twice are exact (`assert_array_equal`) instead.
"""

from __future__ import annotations

import numpy as np

FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 2**-23


def float32_tolerance(reduction_length: int, magnitude: float = 1.0) -> float:
  """How far apart two float32 evaluations of a sum of `reduction_length` terms may come out when
  the terms are added in different orders: n eps sum|terms|, `magnitude` being sum|terms| (or a
  bound on it). A chain of sums (a network's layers) adds its links' lengths."""
  return reduction_length * FLOAT32_EPS * magnitude
