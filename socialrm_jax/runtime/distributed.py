"""How a command joins a multi-process job (one process per host), declared once for every command.

`DistributedSettings` are the flags a launcher passes (launch/: `local.py` simulates N processes
on one machine, `slurm.sbatch` and `tpu_pod.sh` start one per node or TPU host; docs/multihost.md).
Every command that computes (socialrm-audit, -score, -train, -ablation, -probe, -vocab-scan)
declares them (`settings.group(DistributedSettings)` or `settings.define_flags`) and calls
`initialize` before it touches a device, so JAX sees the whole job and device ids are global.

After that, the rules every multi-process command keeps: files one job writes once (a report,
metrics, a manifest, an export) are written by the coordinator (`is_coordinator`: process 0);
a process waits for the others' files at a `barrier` before reading them. In a one-process run
both are no-ops, so a command reads the same either way.
"""

from __future__ import annotations

import dataclasses

import jax

from socialrm_jax.base import settings


@dataclasses.dataclass(frozen=True)
class DistributedSettings:
  """How this process joins a multi-process job (flags a launcher passes; docs/multihost.md)."""
  coordinator_address: str | None = settings.field(
      None, "host:port of process 0, for multi-process runs.")
  num_processes: int | None = settings.field(None, "Processes in the job.")
  process_id: int | None = settings.field(None, "This process's index.")
  distributed: bool = settings.field(False, "Join a multi-process job described by the "
                                     "environment (Cloud TPU pod, Slurm).")


def initialize(job: DistributedSettings) -> None:
  """Joins a multi-process job: with an explicit coordinator (the local launcher, Slurm scripts)
  or, with `job.distributed`, from the environment JAX recognises (Cloud TPU pods, Slurm). A
  one-process run (no setting given) does nothing."""
  if job.coordinator_address or job.distributed:
    # CPU processes (the local launcher's) need a cross-process collective backend for barriers
    # and for arrays that span processes; accelerators bring their own.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if job.coordinator_address:
    jax.distributed.initialize(coordinator_address=job.coordinator_address,
                               num_processes=job.num_processes, process_id=job.process_id)
  elif job.distributed:
    jax.distributed.initialize()


def is_coordinator() -> bool:
  """Whether this process writes the job's once-only files (process 0)."""
  return jax.process_index() == 0


def barrier(name: str) -> None:
  """Waits until every process of the job reaches the barrier `name` (nothing in one process)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
    multihost_utils.sync_global_devices(f"socialrm_jax: {name}")
