"""Start P controller processes on loopback, supervise them within a bound, gather their reports.

    python -m shardlab multi --processes 2 --local-devices 2 --out DIR

Every process runs `shardlab.multi.program` with the coordinator on 127.0.0.1 and its id in
the environment. Each process leads its own process group, and every group the launcher
started is killed in `finally`, so no controller outlives a launch.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

from shardlab.errors import LaunchError
from shardlab.lessons.fingerprint import first_divergence
from shardlab.multi import program, runtime


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def environment(port: int, processes: int, process_id: int, local_devices: int, launch: str = "explicit") -> dict:
    """A controller's environment for one of runtime.LAUNCHES, always on loopback.

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
    env.pop("MPLBACKEND", None)
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
    """A file a controller writes (report, progress, pulse, marker, log), or None if it is not there (yet)."""
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def report(out: str, pid) -> dict | None:
    """Process `pid`'s report, or None while it has written none (or a torn one)."""
    try:
        return json.loads(read_text(program.report_path(out, pid)) or "null")
    except ValueError:
        return None


def progress(out: str, pid: int) -> list[dict]:
    """The events process `pid` appended during an attempt (a torn last line is dropped)."""
    events = []
    for line in (read_text(program.progress_path(out, pid)) or "").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            break
    return events


def start(out: str, args: list, processes: int, local_devices: int, launch: str, port: int) -> tuple[dict, list]:
    """Start one group running the controller program with `args`; return ({id: process}, open logs).

    Every process leads its own process group (killed as a whole at teardown). Under 'mpirun' one
    mpiexec starts every rank, and each id maps to an MpiRank view of that one launcher.
    """
    if launch == "mpirun":
        command = [mpiexec(), "-n", str(processes), sys.executable, *PROGRAM, *args]
        log = open(os.path.join(out, MPI_LOG), "w")
        group = _popen(command, environment(port, processes, 0, local_devices, launch), log)
        return {pid: MpiRank(group, pid, out) for pid in range(processes)}, [log]
    procs, logs = {}, []
    for pid in range(processes):
        logs.append(open(os.path.join(out, f"process_{pid}.log"), "w"))
        env = environment(port, processes, pid, local_devices, launch)
        procs[pid] = _popen([sys.executable, *PROGRAM, *args], env, logs[-1])
    return procs, logs


def _popen(command: list, env: dict, log) -> subprocess.Popen:
    return subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )


def signal_process(proc, sig: int, os_pid: int | None = None) -> None:
    """Send `sig` to one controller: its whole process group (SIGTERM to the process itself, as a
    scheduler would), or, under mpirun, the rank's own process `os_pid`."""
    if isinstance(proc, MpiRank):
        if os_pid:
            os.kill(os_pid, sig)
    elif sig == signal.SIGTERM:
        os.kill(proc.pid, sig)
    else:
        os.killpg(proc.pid, sig)


def kill(proc) -> None:
    """SIGKILL one controller's process group (under mpirun: mpirun's, and the rank itself)."""
    rank = proc.os_pid() if isinstance(proc, MpiRank) else None
    for send, pid in ((os.killpg, proc.pid), (os.kill, rank)):
        try:
            if pid:
                send(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


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


def launch(
    out,
    shared,
    processes: int = 2,
    local_devices: int = 2,
    *,
    steps: int = 10,
    save_every: int = 3,
    seed: int = 17,
    batch_size: int = 7,
    resume: str = "none",
    migrate: bool = False,
    pause: str | None = None,
    kill_delay: float | None = None,
    skip: str | None = None,
    timeout: float = 20.0,
    limit: float | None = None,
) -> dict:
    """Run one group to its end (or to `limit` seconds); return exit codes, times and reports.

    `pause='RANK:PHASE:STEP[:mark]'` stops that rank at a fault point; with `kill_delay` set, the
    launcher SIGKILLs it that many seconds after it reaches the point.
    """
    out, shared = os.path.abspath(os.fspath(out)), os.path.abspath(os.fspath(shared))
    os.makedirs(out, exist_ok=False)
    limit = float(limit or 90 + 6 * timeout)
    args = [
        *("--shared", shared, "--out", out, "--steps", str(steps), "--save-every", str(save_every)),
        *("--seed", str(seed), "--batch-size", str(batch_size), "--resume", str(resume), "--timeout", str(timeout)),
        *(["--migrate"] if migrate else []),
        *(["--pause", pause] if pause else []),
        *(["--skip", skip] if skip else []),
    ]
    victim = program.parse_fault(pause)["rank"] if pause and kill_delay is not None else None
    port, procs, logs, exits, killed = free_port(), {}, [], {}, None
    began = time.time()
    try:
        procs, logs = start(out, args, processes, local_devices, "explicit", port)
        while len(exits) < processes and time.time() - began < limit:
            for pid, proc in procs.items():
                if pid not in exits and proc.poll() is not None:
                    exits[pid] = time.time()
            if victim is not None and killed is None and os.path.exists(program.marker_path(out, victim)):
                time.sleep(kill_delay)
                already = procs[victim].poll() is not None  # a late kill may find the run finished
                if not already:
                    kill(procs[victim])
                killed = {"process": victim, "time": time.time(), "fault": program.parse_fault(pause)}
                killed["after_exit"] = already
            time.sleep(0.05)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                kill(proc)
            proc.wait()
        for log in logs:
            log.close()
    reports = {pid: report(out, pid) for pid in range(processes)}
    return {
        "world": runtime.World(processes, local_devices, 0).label,
        "processes": processes,
        "local_devices": local_devices,
        "exit_codes": {pid: proc.returncode for pid, proc in procs.items()},
        "exit_times": exits,
        "first_exit": min(exits, key=exits.get) if exits else None,
        "timed_out": len(exits) < processes,
        "killed": killed,
        "wall_s": round(time.time() - began, 2),
        "reports": reports,
        "divergence": divergence(reports),
        "out": out,
    }


def add_arguments(parser) -> None:
    parser.add_argument("--processes", type=int, default=2, help="controller processes (default 2)")
    parser.add_argument("--local-devices", type=int, default=2, help="logical CPU devices per process (default 2)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=3)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--batch-size", type=int, default=7)
    parser.add_argument("--resume", default="none", help="'none', 'latest' or a step")
    parser.add_argument("--migrate", action="store_true", help="allow a device-count change on resume")
    parser.add_argument("--timeout", type=float, default=20.0, help="bound of every wait, seconds")
    parser.add_argument("--out", default="multi_out", help="folder for reports (a new run subfolder each time)")
    parser.add_argument("--shared", default=None, help="checkpoint folder (default OUT/shared)")


def main(args) -> int:
    from shardlab.multi import control

    shared = args.shared or os.path.join(args.out, "shared")
    run_out = os.path.join(args.out, f"run-{time.strftime('%Y%m%dT%H%M%S')}")
    outcome = launch(
        run_out,
        shared,
        args.processes,
        args.local_devices,
        steps=args.steps,
        save_every=args.save_every,
        seed=args.seed,
        batch_size=args.batch_size,
        resume=args.resume,
        migrate=args.migrate,
        timeout=args.timeout,
    )
    reference = control.run(args.seed, args.batch_size, args.steps)
    summary = {
        "world": outcome["world"],
        "exit_codes": outcome["exit_codes"],
        "wall_s": outcome["wall_s"],
        "divergence": outcome["divergence"],
        "against_single_process": control.compare(outcome["reports"].get(0), reference),
        "errors": control.errors(outcome),
    }
    print(json.dumps(summary, indent=1, sort_keys=True))
    ok = all(code == 0 for code in outcome["exit_codes"].values()) and summary["against_single_process"]["matches"]
    return 0 if ok else 1
