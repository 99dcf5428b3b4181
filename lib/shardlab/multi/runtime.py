"""Start one controller: logical CPU devices, gloo collectives, jax.distributed, the global mesh.

The launcher passes the coordinator, the process count and id and the local device count
through environment variables. Without a coordinator the controller calls
`jax.distributed.initialize()` with no arguments, so JAX's own cluster auto-detection
(SLURM, Open MPI, TPU VMs, ...) supplies them.
"""

import os
from dataclasses import dataclass

COORDINATOR = "SHARDLAB_COORDINATOR"  # host:port of process 0's coordination service
NUM_PROCESSES = "SHARDLAB_NUM_PROCESSES"
PROCESS_ID = "SHARDLAB_PROCESS_ID"
LOCAL_DEVICES = "SHARDLAB_LOCAL_DEVICES"  # logical CPU devices per process (unset: the real ones)


@dataclass(frozen=True)
class World:
    """Processes, devices per process and this controller's id."""

    processes: int
    local_devices: int
    process_id: int

    @property
    def devices(self) -> int:
        """Global device count: the mesh size."""
        return self.processes * self.local_devices

    @property
    def label(self) -> str:
        """'2x2' = 2 processes x 2 devices each."""
        return f"{self.processes}x{self.local_devices}"

    def as_dict(self) -> dict:
        """Plain literals for reports and manifests."""
        return {"processes": self.processes, "local_devices": self.local_devices, "devices": self.devices}


def heartbeat_seconds(timeout: float) -> int:
    """JAX's own liveness bound: longer than ours, so our named error comes first."""
    return int(3 * timeout + 30)


def initialize(timeout: float) -> World:
    """Configure CPU devices and gloo, then `jax.distributed.initialize`, before any device query."""
    import jax

    local = os.environ.get(LOCAL_DEVICES)
    if local:
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", int(local))
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    bounds = {
        "initialization_timeout": int(max(3 * timeout, 60)),
        "heartbeat_timeout_seconds": heartbeat_seconds(timeout),
        "shutdown_timeout_seconds": int(max(timeout, 10)),
    }
    coordinator = os.environ.get(COORDINATOR)
    if coordinator:
        jax.distributed.initialize(coordinator, int(os.environ[NUM_PROCESSES]), int(os.environ[PROCESS_ID]), **bounds)
    else:
        jax.distributed.initialize(**bounds)  # cluster auto-detection supplies address, count and id
    return World(jax.process_count(), jax.local_device_count(), jax.process_index())


def client():
    """The coordination service client (key-value store and barriers) of this process."""
    from orbax.checkpoint import multihost

    return multihost.get_jax_distributed_client()
