"""Child processes that each lead a process group: killed whole, none outliving the command that started it.

`spawn` starts a command in a session of its own, so it leads a new process group, and remembers
it (unless told not to: a server its owner ends). Every child is started by one thread that lasts as long as
this process (`_launcher`): a child that asks to die with its parent (bwrap's `--die-with-parent`, the
checker's worker and fork server, PR_SET_PDEATHSIG) is killed by Linux when the *thread* that started it ends,
so a child started by a short-lived thread (a background launch, a lane of checks) would die, or not, by
how quickly that thread ended on a busy machine; `signal` sends one signal to a child's whole group
(the one place a group is signalled); `signal_pids` sends one to each of a list of single processes
not started here (a tree read from /proc, whose members may lead groups of their own; an mpirun rank, a
survivor that leads a group of its own);
`kill` sends SIGKILL to the whole group of every process it is given, and only then reaps
each one, so a group's survivors cannot react to a peer's death before their own kill; `until`
waits for a child while a caller's test of its bounds says go on, then kills its group (the one
bounded wait of the checker's interpreters and `grade`'s checks); `run` is `subprocess.run` with a timeout
that kills the whole group (a command the course or its rig runs to completion); `stop_all` kills every child
still remembered (the caller was interrupted). What is killed is the group, not
the pid: whatever a child started in its group (mpiexec's proxies, a learner's stray children)
ends with it. Stage 5's controller groups start, are stopped and end here.
"""

import os
import queue
import signal as signals
import subprocess
import threading
import time
from concurrent.futures import Future

LIVE: set = set()  # children started here and not yet reaped by `kill`
_LAUNCHER: list = []  # the request queue of this process's launching thread, once it runs
_LAUNCHER_LOCK = threading.Lock()


def _launching(requests: queue.SimpleQueue) -> None:
    """Body of the launching thread: start each requested child, remember it, and hand it (or the error) back."""
    while True:
        answer, argv, remembered, popen = requests.get()
        try:
            process = subprocess.Popen(argv, start_new_session=True, **popen)
        except BaseException as exc:  # handed to the caller, who raises it; this thread goes on
            answer.set_exception(exc)
            continue
        if remembered:
            LIVE.add(process)  # before the caller sees it: an interrupted caller's stop_all still ends it
        answer.set_result(process)


def _launcher() -> queue.SimpleQueue:
    """The request queue of this process's launching thread, started at the first request (daemon: it ends only
    with the process, and with it every child that asked to die with its parent)."""
    with _LAUNCHER_LOCK:
        if not _LAUNCHER:
            requests = queue.SimpleQueue()
            threading.Thread(target=_launching, args=(requests,), name="shardlab-launcher", daemon=True).start()
            _LAUNCHER.append(requests)
        return _LAUNCHER[0]


def _forget_launcher() -> None:
    """In a child made by os.fork: the launching thread was not copied (nor a lock another thread held); the
    child's first spawn starts its own."""
    global _LAUNCHER_LOCK
    _LAUNCHER_LOCK = threading.Lock()
    _LAUNCHER.clear()


os.register_at_fork(after_in_child=_forget_launcher)


def spawn(argv: list, remembered: bool = True, **popen) -> subprocess.Popen:
    """Start `argv` in its own session and process group (`popen`: Popen's other arguments); `kill` ends it.

    The launching thread starts it (see above), whichever thread asks. `remembered=False` leaves it out of
    what `stop_all` ends: a server that outlives one command's children and that its owner kills itself.
    """
    answer = Future()
    _launcher().put((answer, argv, remembered, popen))
    return answer.result()


def signal(process: subprocess.Popen, number: int) -> bool:
    """Send signal `number` to the process group `process` leads; False if that group has ended already."""
    try:
        os.killpg(process.pid, number)
    except (ProcessLookupError, PermissionError):  # no process of the group is left
        return False
    return True


def signal_pids(pids, number: int) -> None:
    """Send signal `number` to each process of `pids` alone, not to its group; one that has ended, or is not ours, is
    passed over."""
    for pid in pids:
        try:
            os.kill(pid, number)
        except OSError:
            pass


def kill(*processes: subprocess.Popen) -> None:
    """SIGKILL the process group of every one of `processes`, then reap each of them."""
    for process in processes:
        signal(process, signals.SIGKILL)
    for process in processes:
        process.wait()
        LIVE.discard(process)


def until(process: subprocess.Popen, stop, poll: float, pause=time.sleep) -> str | None:
    """Wait for `process` to end, asking `stop()` every `poll` seconds for a reason to end it first.

    Returns that reason, or None if the process ended by itself. Either way, and also when `stop`
    raises, the whole group `process` leads is killed and reaped before this returns: nothing it
    started outlives the wait. `pause(seconds)` sleeps between looks (an Event's `wait` wakes early).
    """
    try:
        while process.poll() is None:
            reason = stop()
            if reason is not None:
                return reason
            pause(poll)
        return None
    finally:
        kill(process)


def run(argv: list, timeout: float, **popen) -> subprocess.CompletedProcess:
    """`argv` run to its end in a group of its own, as `subprocess.run(argv, timeout=timeout, **popen)` would run it.

    Its output is collected as `popen` asks (capture_output, stdout, stderr, text, ...). Past `timeout`
    seconds, or when the caller is interrupted, its whole group is killed, not only the child, and the
    exception raised (subprocess.TimeoutExpired, with the output read so far); a child that ended by
    itself has its group killed too, so nothing it started outlives the call.
    """
    if popen.pop("capture_output", False):
        popen["stdout"] = popen["stderr"] = subprocess.PIPE
    process = spawn(argv, **popen)
    try:
        out, err = process.communicate(timeout=timeout)
    except BaseException as exc:
        kill(process)
        left = process.communicate()  # what the group wrote before it was killed; the pipes are closed
        if isinstance(exc, subprocess.TimeoutExpired):
            exc.stdout, exc.stderr = left
        raise
    kill(process)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def stop_all() -> None:
    """Kill every child still running: none outlives the command that started it."""
    kill(*LIVE)


def writers(path: str) -> list[int]:
    """The pids of the other processes that have `path` open for writing (read from /proc; those out of reach left out).

    A reader (a learner's `tail -f` of a log) is not one of them.
    """
    target, found = os.path.realpath(path), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            for fd in os.listdir(f"/proc/{name}/fd"):
                if os.readlink(f"/proc/{name}/fd/{fd}") == target and _writes(f"/proc/{name}/fdinfo/{fd}"):
                    found.append(int(name))
                    break
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


def _writes(fdinfo: str) -> bool:
    """Whether the descriptor /proc/PID/fdinfo/FD describes was opened for writing (O_WRONLY or O_RDWR)."""
    with open(fdinfo) as handle:
        flags = next(line for line in handle if line.startswith("flags:"))
    return int(flags.split()[1], 8) & 3 != os.O_RDONLY


def release(path: str, seconds: float = 10.0, poll: float = 0.01) -> None:
    """SIGKILL every other process still writing to `path` and wait, at most `seconds`, until none does.

    A group's kill reaches only the group: a descendant that leads a group of its own (the checker's
    fork-server workers) dies a moment later, when the death of its parent reaches it. Until then it
    can still write to the file it shares with the group that was killed, and a file whose size
    bounds the next run must not grow from the last one's survivors.
    """
    deadline = time.monotonic() + seconds
    while (left := writers(path)) and time.monotonic() < deadline:
        signal_pids(left, signals.SIGKILL)
        time.sleep(poll)
