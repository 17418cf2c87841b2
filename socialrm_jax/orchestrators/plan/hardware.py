"""Accelerators a plan compiles for, with no accelerator: TPU slices as libtpu describes them,
NVIDIA GPUs as XLA's GPU compiler describes them (published specifications beside each).

`topology("v5e:4x4", chips_per_host="2x2")` asks libtpu (`jax.experimental.topologies`) for the
devices of a slice: their chips, hosts (`process_index`) and slices, as a real slice would have
them, so a program can be compiled for them from any host. `topology("h100x8")` asks JAX's CUDA
plugin for eight compile-only H100s on one host, described by a `GpuTargetConfigProto` (`GPUS`:
XLA's own device description of each GPU, and the CUDA runtime and cuDNN versions this host's
plugin would run, which are what JAX's own cuDNN checks read while the step is traced).
"""

from __future__ import annotations

import dataclasses
import importlib
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
  kind: str = "TPU"             # what the reports call one: "TPU" chip or "GPU"


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
  """A TPU slice (or several) as libtpu describes it, or one host's GPUs as XLA describes them."""
  name: str
  chip: ChipSpec
  devices: tuple[jax.Device, ...]  # every device of the job, sorted by (host, id)
  num_slices: int
  # The share of a device's memory a run's programs may take: all of a TPU chip's HBM; on a GPU
  # JAX's allocator's share (`XLA_CLIENT_MEM_FRACTION`, 0.75 unless set; `--memory_fraction`).
  memory_fraction: float = 1.0
  software: tuple[tuple[str, str], ...] = ()  # (name, version) the target was compiled for

  @property
  def usable_bytes(self) -> int:
    """The memory of one device a program may use: what "fits" is measured against."""
    return int(self.chip.hbm_bytes * self.memory_fraction)

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


def topology(name: str, chips_per_host: str | None = None, num_slices: int = 1,
             memory_fraction: float | None = None) -> Topology:
  """The devices of the TPU slice `name` ("v5e:4x4"), with `chips_per_host` per host ("2x4";
  default: libtpu's for that chip), `num_slices` slices of it; or of the GPUs `name` ("h100",
  "h100x8": `gpu_topology`). An unknown chip or grid is an InputError naming --topology."""
  if _GPU_NAME.match(name) and _GPU_NAME.match(name)["gpu"] in GPUS:
    if chips_per_host is not None or num_slices != 1:
      raise InputError(f"--topology={name!r} is one host's GPUs: --chips_per_host and "
                       "--num_slices are for TPU slices")
    return gpu_topology(name, DEFAULT_GPU_MEMORY_FRACTION if memory_fraction is None
                        else memory_fraction)
  if memory_fraction is not None:
    raise InputError(f"--memory_fraction is JAX's share of a GPU's memory; --topology={name!r} "
                     "is a TPU slice, whose programs may take all of a chip's HBM")
  match = _TOPOLOGY_NAME.match(name)
  if match is None:
    raise InputError(f"--topology={name!r}: expected a TPU slice CHIP:GRID with CHIP one of "
                     f"{', '.join(CHIPS)} (e.g. v5e:4x4, v5p:2x2x2), or GPUs GPU[xCOUNT] with GPU "
                     f"one of {', '.join(GPUS)} (e.g. h100, h100x8)")
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



# --- NVIDIA GPUs ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GpuSpec:
  """One GPU: its published figures (the roofline's, and the memory "fits" is measured against)
  and XLA's description of it, the `gpu_device_info` a compile-only device is made from."""
  chip: ChipSpec
  description: str  # the CUDA device name a real one reports
  compute_capability: tuple[int, int]
  device_info: tuple[tuple[str, int | float], ...]  # GpuDeviceInfoProto's fields but the above


# XLA's device description of the H100 SXM (xla/tools/hlo_opt/gpu_specs/h100_sxm.txtpb, read from
# a real one); the A100 SXM 80 GB's is a100_sxm_80.txtpb there. XLA ships no H200 file: the H200
# is the H100's GH100 chip (132 SMs, the same clocks, caches but L2) with HBM3e, so its
# description is the H100's with the memory, bandwidth and L2 of the H200 (143,771 MiB as
# nvidia-smi reports an H200's memory; 4.8 TB/s published; 60 MiB of L2 as CUDA reports it).
_H100_INFO = (("threads_per_block_limit", 1024), ("threads_per_warp", 32),
              ("shared_memory_per_block", 49152), ("shared_memory_per_core", 233472),
              ("threads_per_core_limit", 2048), ("core_count", 132), ("fpus_per_core", 128),
              ("block_dim_limit_x", 2147483647), ("block_dim_limit_y", 65535),
              ("block_dim_limit_z", 65535), ("memory_bandwidth", 3352320000000),
              ("l2_cache_size", 52428800), ("clock_rate_ghz", 1.98),
              ("device_memory_size", 84978434048), ("shared_memory_per_block_optin", 232448),
              ("registers_per_core_limit", 65536), ("registers_per_block_limit", 65536))
_H200_INFO = tuple((k, {"memory_bandwidth": 4800000000000, "l2_cache_size": 62914560,
                        "device_memory_size": 143771 * 2**20}.get(k, v)) for k, v in _H100_INFO)
_A100_80G_INFO = (("threads_per_block_limit", 1024), ("threads_per_warp", 32),
                  ("shared_memory_per_block", 49152), ("shared_memory_per_core", 167936),
                  ("threads_per_core_limit", 2048), ("core_count", 108), ("fpus_per_core", 64),
                  ("block_dim_limit_x", 2147483647), ("block_dim_limit_y", 65535),
                  ("block_dim_limit_z", 65535), ("memory_bandwidth", 2039040000000),
                  ("l2_cache_size", 41943040), ("clock_rate_ghz", 1.41),
                  ("device_memory_size", 85100068864), ("shared_memory_per_block_optin", 166912),
                  ("registers_per_core_limit", 65536), ("registers_per_block_limit", 65536))


def _gpu(name: str, bf16_flops: float, bandwidth: float, description: str,
         capability: tuple[int, int], info) -> GpuSpec:
  memory = dict(info)["device_memory_size"]
  return GpuSpec(ChipSpec(name, bf16_flops, memory, bandwidth, kind="GPU"), description,
                 capability, info)


# NVIDIA's datasheets (H100 Tensor Core GPU, H200 Tensor Core GPU, A100 Tensor Core GPU; the SXM
# forms): dense bf16 Tensor Core peak (half the "with sparsity" figure) and memory bandwidth. The
# memory is the device's as CUDA reports it (`device_info`), the most a process can be given.
GPUS: dict[str, GpuSpec] = {
    "h100": _gpu("H100 SXM 80GB", 989.5e12, 3.35e12, "NVIDIA H100 80GB HBM3", (9, 0), _H100_INFO),
    "h200": _gpu("H200 SXM 141GB", 989.5e12, 4.8e12, "NVIDIA H200", (9, 0), _H200_INFO),
    "a100-80g": _gpu("A100 SXM 80GB", 312e12, 2.039e12, "NVIDIA A100-SXM4-80GB", (8, 0),
                     _A100_80G_INFO),
}
# JAX's allocator takes this share of a GPU's memory unless XLA_CLIENT_MEM_FRACTION says otherwise
# (JAX's "GPU memory allocation" page); a program needing more fails on the GPU.
DEFAULT_GPU_MEMORY_FRACTION = 0.75
# One host's NVLink domain: at most eight GPUs (HGX H100/H200/A100 boards).
MAX_GPUS_PER_HOST = 8
# "h100", "h100x8", "a100-80gx4": a GPU's name and how many of it one host has.
_GPU_NAME = re.compile(r"^(?P<gpu>[a-z0-9-]+?)(?:x(?P<count>\d+))?$")
# What a GPU plan needs installed: pyproject's extra of that name, and cuDNN without the CUDA
# libraries it declares (only its version is read).
GPU_EXTRA = ("pip install 'socialrm_jax[gpu-plan]' && pip install --no-deps "
             "nvidia-cudnn-cu12==9.28.0.42")


# JAX's CUDA plugin packages, in the order JAX looks for them.
CUDA_PLUGIN_PACKAGES = ("jax_cuda13_plugin", "jax_cuda12_plugin")


def cuda_software() -> tuple[tuple[int, int], tuple[int, int, int]]:
  """(CUDA runtime (major, minor), cuDNN (major, minor, patch)) of JAX's CUDA plugin on this host:
  the versions a compile-only GPU is described with. They are what JAX's own cuDNN attention
  checks read while a step is traced: the `_versions` module of JAX's CUDA plugin package, which
  JAX itself imports from the first of these packages installed, so the program XLA compiles and
  the checks JAX makes agree on one cuDNN."""
  cuda_versions = None
  for package in CUDA_PLUGIN_PACKAGES:
    try:
      cuda_versions = importlib.import_module(f"{package}._versions")
      break
    except ImportError:
      continue
  if cuda_versions is None:
    raise InputError(f"GPU targets need JAX's CUDA plugin, which is not installed: {GPU_EXTRA}")
  try:
    runtime, cudnn = cuda_versions.cuda_runtime_get_version(), cuda_versions.cudnn_get_version()
  except RuntimeError as error:  # a library the plugin loads is missing
    raise InputError(f"GPU targets need the CUDA runtime and cuDNN libraries JAX's CUDA plugin "
                     f"loads ({str(error).strip().splitlines()[0]}): {GPU_EXTRA}") from None
  return (runtime // 1000, runtime % 1000 // 10), (cudnn // 10000, cudnn % 10000 // 100,
                                                   cudnn % 100)


def target_config(gpu: GpuSpec, cuda: tuple[int, int], cudnn: tuple[int, int, int]) -> str:
  """The GpuTargetConfigProto (text form) of `gpu` with this CUDA runtime and cuDNN."""
  major, minor = gpu.compute_capability
  lines = ["gpu_device_info {", *(f"  {key}: {value}" for key, value in gpu.device_info),
           f"  cuda_compute_capability {{ major: {major} minor: {minor} }}", "}",
           'platform_name: "CUDA"', f'device_description_str: "{gpu.description}"',
           f"runtime_version {{ major: {cuda[0]} minor: {cuda[1]} }}",
           f"dnn_version_info {{ major: {cudnn[0]} minor: {cudnn[1]} patch: {cudnn[2]} }}"]
  return "\n".join(lines) + "\n"


def gpu_topology(name: str, memory_fraction: float = DEFAULT_GPU_MEMORY_FRACTION) -> Topology:
  """`name`'s GPUs ("h100": one H100, "h100x8": eight on one host) as compile-only devices of
  JAX's CUDA plugin, no GPU needed."""
  match = _GPU_NAME.match(name)
  gpu = GPUS.get(match["gpu"]) if match else None
  count = int(match["count"] or 1) if match else 0
  if gpu is None or not 1 <= count <= MAX_GPUS_PER_HOST:
    raise InputError(f"--topology={name!r}: expected GPU[xCOUNT] with GPU one of "
                     f"{', '.join(GPUS)} and 1 to {MAX_GPUS_PER_HOST} GPUs, e.g. h100 or h100x8")
  if not 0 < memory_fraction <= 1:
    raise InputError(f"--memory_fraction must be in (0, 1], got {memory_fraction}")
  cuda, cudnn = cuda_software()
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  try:
    described = topologies.get_topology_desc(
        platform="cuda", target_config=target_config(gpu, cuda, cudnn), topology=f"1x1x{count}")
  except NotImplementedError:  # JAX without its CUDA plugin has no cuda topologies
    raise InputError(f"--topology={name!r}: JAX's CUDA plugin is not installed: "
                     f"{GPU_EXTRA}") from None
  devices = sorted(described.devices, key=lambda d: (d.process_index, d.id))
  software = (("CUDA runtime", "%d.%d" % cuda), ("cuDNN", "%d.%d.%d" % cudnn),
              ("jax", jax.__version__))
  return Topology(name, gpu.chip, tuple(devices), 1, memory_fraction, software)
