"""Runtime: what every computing command needs below its own work, scoring and training alike.

mesh (the `data` x `model` device mesh on the devices' topology, batch sharding, data-parallel
groups), distributed (how a process joins a multi-process job: `DistributedSettings`, the
coordinator, barriers), global_arrays (host arrays to arrays that span the mesh's processes and
back), compilation_cache (JAX's persistent cache and its hit count), provenance (package versions
and model file digests, which every run's manifest records). Nothing here scores or trains.
"""
