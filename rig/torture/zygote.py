"""A long-lived process that forks one saver per kill trial and SIGKILLs it (`python -m rig.torture.zygote`).

It imports the checkpoint module once (with JAX, but never starts a JAX backend), then
reads one JSON request per line on stdin and answers one JSON line on stdout. For each
request it forks a saver that reports every file operation of `checkpoint.save` on a
pipe, through the checker's harness (`shardlab.checker.interrupt.instrument`, no hook
inside the checkpoint code). The zygote SIGKILLs the saver either when it reports the
requested event (`stop_at`, its number) or after a delay (`delay`, with the saver pausing
`pause` seconds at each event so the write spans long enough for a random moment to land
anywhere in it).
"""

import json
import os
import signal
import sys
import time

from shardlab.checker import interrupt
from shardlab.core import checkpoint
from shardlab.core.schema import host_copy

STOPPED = "!stopped"
STOP_WAIT = 60.0  # seconds a stopped saver waits for its SIGKILL before exiting by itself (never an orphan)


def decode_state(fields: dict) -> dict:
    """Numpy state from the JSON lists a request carries."""
    return host_copy(fields)


def _saver(request: dict, state: dict, events_fd: int) -> None:
    """Child body: save with every file operation reported (interrupt.instrument); never returns.

    Each operation is reported before it runs, after the bytes of earlier writes were flushed to
    the OS, so a kill there leaves a genuinely partial file. `stop_at` is the number of the
    event (counting 'start' as 0) at which the saver stops and waits for its SIGKILL.
    """
    stop_at, pause, count = request.get("stop_at"), float(request.get("pause") or 0.0), [0]

    def emit(name):
        os.write(events_fd, f"{name}\n".encode())
        if stop_at is not None and count[0] == stop_at:
            os.write(events_fd, f"{STOPPED}\n".encode())
            time.sleep(STOP_WAIT)  # the SIGKILL arrives here; if the zygote died first, give up
            os._exit(4)
        count[0] += 1
        if pause:
            time.sleep(pause)

    def hook(operation, target, data, handle):
        if handle is not None:
            handle.flush()
        emit(interrupt.label(operation, target))

    code = 0
    try:
        emit("start")
        interrupt.instrument(hook)
        checkpoint.save(request["path"], state, request["contract"])
        emit("returned")
    except BaseException as exc:  # report, then leave without running the zygote's code
        os.write(events_fd, f"!error:{type(exc).__name__}\n".encode())
        code = 3
    os._exit(code)


def _read_events(stream, until: str | None) -> list[str]:
    events = []
    for raw in iter(stream.readline, b""):
        events.append(raw.decode().rstrip("\n"))
        if events[-1] == until:
            break
    return events


def trial(request: dict) -> dict:
    """Fork a saver, kill it as requested, reap it; return the events it reported and how it ended."""
    state = decode_state(request["state"])
    read_fd, write_fd = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _saver(request, state, write_fd)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as stream:
        if request.get("stop_at") is not None:
            events = _read_events(stream, STOPPED)
            if events and events[-1] == STOPPED:
                os.kill(pid, signal.SIGKILL)
        else:
            events = []
            if request.get("delay") is not None:
                time.sleep(float(request["delay"]))
                os.kill(pid, signal.SIGKILL)  # the child is at least a zombie until reaped, so this never misses
        _, status = os.waitpid(pid, 0)
        events += _read_events(stream, None)
    return {
        "events": [e for e in events if e != STOPPED],
        "killed": os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL,
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "seconds": time.perf_counter() - started,
    }


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:
    """Answer one JSON line per request line until stdin closes."""
    for line in stdin:
        if line.strip():
            stdout.write(json.dumps(trial(json.loads(line))) + "\n")
            stdout.flush()


if __name__ == "__main__":
    serve()
