"""Start one controller: logical CPU devices, gloo collectives, jax.distributed, the global mesh.

The launcher passes the coordinator, the process count and id and the local device count
through environment variables ('explicit'). Without a coordinator JAX's own cluster detection
supplies them: 'slurm' lets `jax.distributed.initialize()` detect a SLURM-style environment,
'mpirun' asks for JAX's opt-in mpi4py detection (`cluster_detection_method="mpi4py"`), which
reads rank and size from the MPI library that `mpirun` started. Before initialising, checks
fail fast with a LaunchError naming the problem: an incomplete SLURM-style environment, a
process id outside the task count, a process not started by mpirun, mpirun starting another
number of processes than the launch expects, and (on process 0) a coordinator port that is
already taken. A group with fewer processes than the task count is reported when JAX's
initialisation timeout expires.
"""

import os
import socket
from dataclasses import dataclass

from shardlab.errors import LaunchError

COORDINATOR = "SHARDLAB_COORDINATOR"  # host:port of process 0's coordination service
NUM_PROCESSES = "SHARDLAB_NUM_PROCESSES"
PROCESS_ID = "SHARDLAB_PROCESS_ID"
LOCAL_DEVICES = "SHARDLAB_LOCAL_DEVICES"  # logical CPU devices per process (unset: the real ones)
LAUNCH = "SHARDLAB_LAUNCH"  # how the launcher started this process: one of LAUNCHES
LAUNCHES = ("explicit", "slurm", "mpirun")
# What JAX's SLURM detection (jax/_src/clusters/slurm_cluster.py) requires before it applies.
SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
# The rank an MPI launcher gives each process: MPICH's Hydra (PMI), Open MPI, any PMIx launcher.
MPI_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def launch_rank(env) -> str:
    """This process's id as its launcher gave it (before JAX knows it), or 'unknown'."""
    for name in (PROCESS_ID, "SLURM_PROCID", *MPI_RANK_VARIABLES):
        if env.get(name):
            return env[name]
    return "unknown"


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


def init_timeout(timeout: float) -> int:
    """Seconds `jax.distributed.initialize` waits for every process to connect."""
    return int(max(3 * timeout, 10))


def check_cluster_environment(env) -> None:
    """LaunchError unless `env` holds every variable JAX's SLURM detection reads, with a valid id."""
    missing = [name for name in SLURM_VARIABLES if name not in env]
    if missing:
        raise LaunchError(
            f"no coordinator given and the SLURM-style environment is incomplete: missing {missing} "
            f"(JAX's cluster detection needs all of {list(SLURM_VARIABLES)}). Set them, or pass the "
            "coordinator, process count and id explicitly."
        )
    count, rank = int(env["SLURM_NTASKS"]), int(env["SLURM_PROCID"])
    if not 0 <= rank < count:
        raise LaunchError(
            f"SLURM_PROCID={rank} is outside SLURM_NTASKS={count}: the task count is wrong for this "
            "launch; start exactly SLURM_NTASKS processes with ids 0..SLURM_NTASKS-1."
        )


def check_mpi_environment(env, expected: int | None) -> None:
    """LaunchError unless this process was started by an MPI launcher with the expected process count."""
    if not any(env.get(name) for name in MPI_RANK_VARIABLES):
        raise LaunchError(
            f"launched for mpirun, but none of {list(MPI_RANK_VARIABLES)} is set: this process was not started "
            "by an MPI launcher. Start the group with `mpirun -n P python -m shardlab.multi.program ...`."
        )
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise LaunchError(
            f"the mpirun launch needs mpi4py and an MPI library ({exc}); install the pinned mpich and "
            "mpi4py from requirements-cpu.txt."
        ) from None
    size = MPI.COMM_WORLD.Get_size()
    if expected is not None and size != expected:
        raise LaunchError(
            f"mpirun started {size} processes but this launch expects {expected} ({NUM_PROCESSES}): the task "
            f"count is wrong; run `mpirun -n {expected}`."
        )


def end_mpi_job(code: int) -> None:
    """Under mpirun, end every rank now (MPI_Abort) rather than leave peers waiting in initialisation."""
    import sys

    mpi = sys.modules.get("mpi4py.MPI")
    if os.environ.get(LAUNCH) == "mpirun" and mpi is not None and mpi.Is_initialized():
        mpi.COMM_WORLD.Abort(code)


def check_port_free(address: str) -> None:
    """LaunchError if the coordinator's port is already taken (process 0 is about to bind it).

    JAX's coordination service listens on every interface, so the port is tried on all of them.
    """
    host, _, port = address.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", int(port)))
        except OSError as exc:
            raise LaunchError(
                f"coordinator port {port} on {host} is already in use ({exc.strerror}); another job or an old "
                "coordinator holds it. Pick a free port (the launcher draws a fresh one for every attempt)."
            ) from None


def _detected(timeout: float, method: str | None) -> tuple:
    """What JAX's own cluster detection (`method`, None: automatic) finds: (address, count, id, local ids)."""
    from shardlab import compat

    return compat.jax_cluster_env().auto_detect_unset_distributed_params(
        None, None, None, None, method, init_timeout(timeout)
    )


def initialize(timeout: float, on_timeout=None) -> World:
    """Configure CPU devices and gloo, then `jax.distributed.initialize`, before any device query.

    JAX ends a process with a fatal (uncatchable) error when the group does not assemble within
    its initialisation timeout; two seconds before that, `on_timeout(LaunchError)` is called from
    a timer thread so the process can record a named error and exit first.
    """
    import threading

    import jax

    local = os.environ.get(LOCAL_DEVICES)
    if local:
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", int(local))
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    bounds = {
        "initialization_timeout": init_timeout(timeout),
        "heartbeat_timeout_seconds": heartbeat_seconds(timeout),
        "shutdown_timeout_seconds": int(max(timeout, 10)),
    }
    coordinator = os.environ.get(COORDINATOR)
    method = "mpi4py" if os.environ.get(LAUNCH) == "mpirun" else None  # JAX's opt-in MPI detection
    if coordinator:
        address, count, rank = coordinator, int(os.environ[NUM_PROCESSES]), int(os.environ[PROCESS_ID])
    elif method:
        expected = os.environ.get(NUM_PROCESSES)
        check_mpi_environment(os.environ, int(expected) if expected else None)
        address, count, rank, _ = _detected(timeout, method)
    else:
        check_cluster_environment(os.environ)
        address, count, rank, _ = _detected(timeout, None)
    if rank == 0:
        check_port_free(address)
    waited = max(bounds["initialization_timeout"] - 2, 1)
    late = LaunchError(
        f"process {rank} of {count}: the group did not assemble at {address} within {waited} s. Were all "
        f"{count} processes started? Check the task count (SLURM_NTASKS or the process count) and that "
        "every process was given the same coordinator."
    )
    timer = threading.Timer(waited, on_timeout, args=(late,)) if on_timeout else None
    if timer:
        timer.daemon = True
        timer.start()
    try:
        if coordinator:
            jax.distributed.initialize(address, count, rank, **bounds)
        else:  # JAX's cluster detection supplies address, count and id
            jax.distributed.initialize(cluster_detection_method=method, **bounds)
        if timer:
            timer.cancel()
    except Exception as exc:
        raise LaunchError(
            f"process {rank} of {count}: jax.distributed.initialize via {address} did not complete within "
            f"{bounds['initialization_timeout']} s ({type(exc).__name__}: {str(exc)[:160]}). Were all {count} "
            "processes started? Check the task count and that the coordinator is reachable."
        ) from None
    return World(jax.process_count(), jax.local_device_count(), jax.process_index())


def client():
    """The coordination service client (key-value store and barriers) of this process."""
    from orbax.checkpoint import multihost

    return multihost.get_jax_distributed_client()
