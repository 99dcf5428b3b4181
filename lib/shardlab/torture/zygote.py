"""A long-lived process that forks one saver per kill trial and SIGKILLs it (`python -m shardlab.torture.zygote`).

It imports the checkpoint module once (with JAX, but never starts a JAX backend), then
reads one JSON request per line on stdin and answers one JSON line on stdout. For each
request it forks a saver that reports every fault-injection phase of `checkpoint.save`
(and every write to the temporary file, flushed so a kill leaves a genuinely partial
file) on a pipe. The zygote SIGKILLs the saver either when it reports the requested
event (`stop_at`) or after a delay (`delay`, with the saver pausing `pause` seconds at
each event so the write spans long enough for a random moment to land anywhere in it).
"""

import json
import os
import signal
import sys
import time

from shardlab.core import checkpoint
from shardlab.core.schema import host_copy

STOPPED = "!stopped"
STOP_WAIT = 60.0  # seconds a stopped saver waits for its SIGKILL before exiting by itself (never an orphan)


class _ReportingFile:
    """File wrapper: after each write, flush to the OS and report `write:<n>`."""

    def __init__(self, handle, emit):
        self._handle, self._emit, self._count = handle, emit, 0

    def write(self, data):
        written = self._handle.write(data)
        self._handle.flush()
        self._count += 1
        self._emit(f"write:{self._count}")
        return written

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)


def decode_state(fields: dict) -> dict:
    """Numpy state from the JSON lists a request carries."""
    return host_copy(fields)


def _saver(request: dict, state: dict, events_fd: int) -> None:
    """Child body: save with every event reported; never returns."""
    stop_at, pause = request.get("stop_at"), float(request.get("pause") or 0.0)

    def emit(name):
        os.write(events_fd, f"{name}\n".encode())
        if name == stop_at:
            os.write(events_fd, f"{STOPPED}\n".encode())
            time.sleep(STOP_WAIT)  # the SIGKILL arrives here; if the zygote died first, give up
            os._exit(4)
        if pause:
            time.sleep(pause)

    real_fdopen = os.fdopen
    checkpoint._phase = emit
    os.fdopen = lambda *args, **kwargs: _ReportingFile(real_fdopen(*args, **kwargs), emit)
    code = 0
    try:
        emit("start")
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
        if request.get("stop_at"):
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
