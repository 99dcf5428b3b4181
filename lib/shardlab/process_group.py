"""Child processes that each lead a process group: killed whole, none outliving the command that started it.

`spawn` starts a command in a session of its own, so it leads a new process group, and remembers
it; `signal` sends one signal to a child's whole group (the one place a group is signalled);
`kill` sends SIGKILL to the whole group of every process it is given, and only then reaps
each one, so a group's survivors cannot react to a peer's death before their own kill; `until`
waits for a child while a caller's test of its bounds says go on, then kills its group (the one
bounded wait of the checker's interpreters and `grade`'s checks); `stop_all` kills every child
still remembered (the caller was interrupted). What is killed is the group, not
the pid: whatever a child started in its group (mpiexec's proxies, a learner's stray children)
ends with it. Stage 5's controller groups start, are stopped and end here.
"""

import os
import signal as signals
import subprocess
import time

LIVE: set = set()  # children started here and not yet reaped by `kill`


def spawn(argv: list, **popen) -> subprocess.Popen:
    """Start `argv` in its own session and process group (`popen`: Popen's other arguments); `kill` ends it."""
    process = subprocess.Popen(argv, start_new_session=True, **popen)
    LIVE.add(process)
    return process


def signal(process: subprocess.Popen, number: int) -> bool:
    """Send signal `number` to the process group `process` leads; False if that group has ended already."""
    try:
        os.killpg(process.pid, number)
    except (ProcessLookupError, PermissionError):  # no process of the group is left
        return False
    return True


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


def stop_all() -> None:
    """Kill every child still running: none outlives the command that started it."""
    kill(*LIVE)
