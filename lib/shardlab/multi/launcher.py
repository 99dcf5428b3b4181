"""How a group of controller processes starts on loopback, is signalled and killed, and what it wrote.

Every process runs `shardlab.multi.program` with the coordinator on 127.0.0.1 and its id in
its environment, one of runtime.LAUNCHES. Each process is started by `shardlab.process_group`
and leads its own process group, so the group supervisor (the only caller that runs a group) kills
every group whole at teardown.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys

from shardlab import process_group
from shardlab.core import files
from shardlab.errors import LaunchError
from shardlab.multi import program, runtime
from shardlab.verify.step_fingerprint import first_divergence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# JAX's persistent compilation cache, as jax.config reads it from the environment when a controller starts.
CACHE_VARIABLES = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # the controller's programs compile in well under a second
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}


def environment(
    port: int, processes: int, process_id: int, local_devices: int, launch: str = "explicit", cache: str | None = None
) -> dict:
    """A controller's environment for one of runtime.LAUNCHES, always on loopback.

    `cache`: a folder for JAX's persistent compilation cache that the groups of one drill series
    share (process 0 writes an entry once it compiled a program, later groups load it instead of
    compiling again); None: every process compiles. A cache folder in the caller's own environment
    is never inherited, so a group compiles or not as its caller decides.

    'explicit' names the coordinator, the count and this id. 'slurm' sets only what a SLURM step
    would (job id, node list, task count, task id, local id), plus JAX_COORDINATOR_PORT, JAX's own
    override of the port it derives from the job id; JAX's cluster detection does the rest. It
    exercises that detection code, not a scheduler. 'mpirun' is the one environment `mpirun`
    hands every rank (it assigns the ranks): the expected count and JAX_COORDINATOR_PORT, which
    JAX's mpi4py detection also honours (otherwise it derives a port from the host name).
    """
    if launch not in runtime.LAUNCHES:
        raise LaunchError(f"launch must be one of {list(runtime.LAUNCHES)}, not {launch!r}")
    drop = ("SHARDLAB_", "SLURM_", "JAX_COORDINATOR", "PMI_", "OMPI_", "PMIX_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    for name in ("MPLBACKEND", "JAX_COMPILATION_CACHE_DIR", *CACHE_VARIABLES):
        env.pop(name, None)
    if cache is not None:
        env.update({"JAX_COMPILATION_CACHE_DIR": os.fspath(cache), **CACHE_VARIABLES})
    env.update({runtime.LOCAL_DEVICES: str(local_devices), runtime.LAUNCH: launch})
    env.update({"JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"})
    if launch == "explicit":
        env.update(
            {
                runtime.COORDINATOR: f"127.0.0.1:{port}",
                runtime.NUM_PROCESSES: str(processes),
                runtime.PROCESS_ID: str(process_id),
            }
        )
    elif launch == "slurm":
        env.update(
            {
                "SLURM_JOB_ID": str(40000 + port),
                "SLURM_STEP_NODELIST": "127.0.0.1",
                "SLURM_NTASKS": str(processes),
                "SLURM_PROCID": str(process_id),
                "SLURM_LOCALID": str(process_id),
                "SLURM_STEP_NUM_NODES": "1",
                "JAX_COORDINATOR_PORT": str(port),
            }
        )
    else:
        env.update({runtime.NUM_PROCESSES: str(processes), "JAX_COORDINATOR_PORT": str(port)})
    return env


def mpiexec() -> str:
    """The MPI launcher beside this Python (the pinned `mpich` wheel installs it into the venv), else on PATH."""
    found = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if not found:
        raise LaunchError(
            "the mpirun launch path needs an MPI runtime: no mpiexec beside this Python or on PATH. Install "
            "the pinned mpich and mpi4py from requirements-cpu.txt (make venv does)."
        )
    return found


PROGRAM = ("-m", "shardlab.multi.program")
MPI_LOG = "mpirun.log"
TEXT_BYTES = 64 << 20  # a report, progress file, pulse, marker or log larger than this is refused, not read
CLEANED_UP = 250  # code given to a rank mpirun ended because another rank failed first (see MpiRank)


class MpiRank:
    """One rank of a group that a single `mpirun` started, seen the way a Popen is (poll, wait, pid).

    mpirun gives every rank a session of its own and exits when any rank fails, naming only the
    first failed rank (its OS pid, and its exit code or signal) in its output; the other ranks'
    codes are not visible. So a rank's code is the failure mpirun names if the OS pid is this
    rank's (read from its 'ready' progress event), EXIT_PREEMPTED for all when the group was
    preempted, and CLEANED_UP for the ranks mpirun ended. `pid` is mpirun's: killing its group
    makes mpirun's proxy end every rank.
    """

    def __init__(self, group: subprocess.Popen, rank: int, out: str):
        self.group, self.rank, self.out, self.returncode, self._os_pid = group, rank, out, None, None

    @property
    def pid(self) -> int:
        return self.group.pid

    def os_pid(self) -> int | None:
        """This rank's own process id, once it has reported ready (then remembered)."""
        if self._os_pid is None:
            self._os_pid = next((e.get("os_pid") for e in progress(self.out, self.rank) if e["event"] == "ready"), None)
        return self._os_pid

    def poll(self) -> int | None:
        code = self.group.poll()
        if code is None:
            return None
        if self.returncode is None:
            self.returncode = self._code(code)
        return self.returncode

    def wait(self) -> int:
        self.group.wait()
        return self.poll()

    def _code(self, code: int) -> int:
        if code in (0, program.EXIT_PREEMPTED):
            return code
        log = read_text(os.path.join(self.out, MPI_LOG)) or ""
        named = re.search(r"PID (\d+) RUNNING AT", log)
        if not named or int(named.group(1)) != self.os_pid():
            return CLEANED_UP
        signalled = re.search(r"\(signal (\d+)\)", log)
        return -int(signalled.group(1)) if signalled else code


def read_text(path: str) -> str | None:
    """A file a controller writes (report, progress, pulse, marker, log), or None if it is not there (yet).

    Read through `core.files.read_bounded`: one larger than TEXT_BYTES, or one that is not a regular
    file, is a BoundedReadError (a ValueError) rather than a whole log held in memory.
    """
    try:
        return files.read_bounded(path, TEXT_BYTES).decode("utf-8")
    except OSError:
        return None


def report(out: str, pid) -> dict | None:
    """Process `pid`'s report, or None while it has written none (or a torn one)."""
    try:
        return json.loads(read_text(program.file_of(out, "report", pid)) or "null")
    except ValueError:
        return None


def progress(out: str, pid: int) -> list[dict]:
    """The events process `pid` appended during an attempt (a torn last line is dropped)."""
    events = []
    for line in (read_text(program.file_of(out, "progress", pid)) or "").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            break
    return events


def start(
    out: str, args: list, processes: int, local_devices: int, launch: str, port: int, cache: str | None = None
) -> tuple[dict, list]:
    """Start one group running the controller program with `args`; return ({id: process}, open logs).

    `cache`: the compilation cache folder the group's processes share (see `environment`), or None.

    Every process leads its own process group (killed as a whole at teardown). Under 'mpirun' one
    mpiexec starts every rank, and each id maps to an MpiRank view of that one launcher.
    """
    if launch == "mpirun":
        command = [mpiexec(), "-n", str(processes), sys.executable, *PROGRAM, *args]
        log = open(os.path.join(out, MPI_LOG), "w")
        group = _popen(command, environment(port, processes, 0, local_devices, launch, cache), log)
        return {pid: MpiRank(group, pid, out) for pid in range(processes)}, [log]
    procs, logs = {}, []
    for pid in range(processes):
        logs.append(open(os.path.join(out, f"process_{pid}.log"), "w"))
        env = environment(port, processes, pid, local_devices, launch, cache)
        procs[pid] = _popen([sys.executable, *PROGRAM, *args], env, logs[-1])
    return procs, logs


def _popen(command: list, env: dict, log) -> subprocess.Popen:
    return process_group.spawn(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def signal_process(proc, sig: int, os_pid: int | None = None) -> None:
    """Send `sig` to one controller: its whole process group (SIGTERM to the process itself, as a
    scheduler would), or, under mpirun, the rank's own process `os_pid`."""
    if isinstance(proc, MpiRank):
        if os_pid:
            os.kill(os_pid, sig)
    elif sig == signal.SIGTERM:
        os.kill(proc.pid, sig)
    else:
        process_group.signal(proc, sig)


def kill(procs) -> None:
    """SIGKILL every controller in `procs` with its process group and reap it (under mpirun: the one
    mpirun group, then each rank still running, which runs in a session of its own)."""
    ranks = [proc.os_pid() for proc in procs if isinstance(proc, MpiRank) and proc.poll() is None]
    process_group.kill(*{proc.group if isinstance(proc, MpiRank) else proc for proc in procs})
    process_group.signal_pids(filter(None, ranks), signal.SIGKILL)


def divergence(reports: dict) -> dict | None:
    """The first step and process whose fingerprint log disagrees with process 0's, or None."""
    logs = {pid: r["log"] for pid, r in reports.items() if r}
    if 0 not in logs:
        return None
    found = []
    for pid in sorted(logs):
        if pid != 0:
            where = first_divergence(logs[0], logs[pid])
            if where:
                found.append({**where, "process": pid})
    return min(found, key=lambda d: (d["step"] is None, d["step"] or 0)) if found else None
