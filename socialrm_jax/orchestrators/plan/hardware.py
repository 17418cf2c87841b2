"""TPU chips (published specifications) and topologies (as libtpu describes them, no TPU needed).

`topology("v5e:4x4", chips_per_host="2x2")` asks libtpu (`jax.experimental.topologies`) for the
devices of a slice: their chips, hosts (`process_index`) and slices, as a real slice would have
them, so a program can be compiled for them from any host.
"""

from __future__ import annotations

import dataclasses
import os
import re

import jax

from socialrm_jax.base.errors import InputError


@dataclasses.dataclass(frozen=True)
class ChipSpec:
  """One chip's published figures: what a roofline estimate divides by."""
  name: str
  bf16_flops_per_second: float  # peak dense bfloat16 matmul throughput
  hbm_bytes: int                # HBM capacity
  hbm_bytes_per_second: float   # HBM bandwidth
  chip_config: str = "default"  # libtpu's chip configuration: one JAX device per chip


# Google Cloud TPU documentation, "System architecture" tables of the pages tpu/docs/v4, v5e,
# v5p-training and v6e (read 2026): peak compute per chip (bf16), HBM capacity and bandwidth, in
# the units printed there (GiB for v4, GB = 1e9 bytes for the others). v4 chips have two
# TensorCores that JAX runs as one device ("megacore"), as Cloud TPU v4 VMs do.
CHIPS: dict[str, ChipSpec] = {
    "v4": ChipSpec("v4", 275e12, 32 * 2**30, 1200e9, chip_config="megacore"),
    "v5e": ChipSpec("v5e", 197e12, 16 * 10**9, 819e9),
    "v5p": ChipSpec("v5p", 459e12, 95 * 10**9, 2765e9),
    "v6e": ChipSpec("v6e", 918e12, 32 * 10**9, 1638e9),
}

# libtpu's switch for loading it in several processes at once (see `topology`).
ALLOW_MULTIPLE_LOADS = "ALLOW_MULTIPLE_LIBTPU_LOAD"
# libtpu's topology names: a chip version and the slice's chip grid, "v5e:4x4", "v4:2x2x2".
_TOPOLOGY_NAME = re.compile(r"^(?P<chip>[a-z0-9]+):(?P<grid>\d+(x\d+){1,2})$")


@dataclasses.dataclass(frozen=True)
class Topology:
  """A TPU slice (or several) as libtpu describes it."""
  name: str
  chip: ChipSpec
  devices: tuple[jax.Device, ...]  # every device of the job, sorted by (host, id)
  num_slices: int

  @property
  def hosts(self) -> int:
    return len({d.process_index for d in self.devices})

  @property
  def devices_per_host(self) -> int:
    return len(self.devices) // self.hosts


def parse_grid(text: str, flag: str) -> tuple[int, ...]:
  """"2x2" -> (2, 2, 1): chips along each axis (a third axis of 1 when two are given)."""
  parts = text.split("x")
  if not 2 <= len(parts) <= 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
    raise InputError(f"--{flag}={text!r}: expected chips along each axis, e.g. 2x2 or 2x2x1")
  return tuple(int(p) for p in parts) + (1,) * (3 - len(parts))


def topology(name: str, chips_per_host: str | None = None, num_slices: int = 1) -> Topology:
  """The devices of the TPU slice `name` ("v5e:4x4"), with `chips_per_host` per host ("2x4";
  default: libtpu's for that chip), `num_slices` slices of it. An unknown chip or grid is an
  InputError naming --topology."""
  match = _TOPOLOGY_NAME.match(name)
  if match is None:
    raise InputError(f"--topology={name!r}: expected CHIP:GRID with CHIP one of "
                     f"{', '.join(CHIPS)}, e.g. v5e:4x4 or v5p:2x2x2")
  chip = CHIPS.get(match["chip"])
  if chip is None:
    raise InputError(f"--topology={name!r}: unknown chip {match['chip']!r}; planned chips: "
                     f"{', '.join(CHIPS)}")
  if num_slices <= 0:
    raise InputError(f"--num_slices must be positive, got {num_slices}")
  bounds = {} if chips_per_host is None else {
      "chips_per_host_bounds": parse_grid(chips_per_host, "chips_per_host")}
  # libtpu takes a machine-wide lock file when it loads, to keep two processes off the same TPU
  # chips; a plan uses it as a compiler only, so plans (and tests) may run side by side.
  os.environ.setdefault(ALLOW_MULTIPLE_LOADS, "1")
  from jax.experimental import topologies  # needs libtpu only when a plan is made
  try:
    described = topologies.get_topology_desc(
        platform="tpu", topology_name=name, chip_config_name=chip.chip_config,
        num_slices=num_slices, **bounds)
  except Exception as error:  # pylint: disable=broad-except  # libtpu's refusal, as one line
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "libtpu" in reason.lower() or "tpu" not in reason.lower():
      reason += " (is libtpu installed? `pip install socialrm_jax[tpu]`)"
    raise InputError(f"--topology={name!r}: libtpu cannot describe it: {reason}") from None
  devices = sorted(described.devices, key=lambda d: (d.process_index, d.id))
  return Topology(name, chip, tuple(devices), num_slices)

