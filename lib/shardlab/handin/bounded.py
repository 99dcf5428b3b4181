"""Run `python -m shardlab check` on one implementation in its own process group, within a time and output bound.

The bound is enforced here, whatever the child does: a child (and every process it started)
still running at `timeout` seconds, or printing more than `cap` bytes, is killed as a group.
Output is read as it comes, so a child that floods its pipe neither blocks nor fills memory.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from shardlab.checker.supervise import REPORT

LIVE: set = set()  # the process groups started here and not yet reaped (`stop_all` ends them)
TIMEOUT_S = 300.0  # seconds one submission's whole check may take
OUTPUT_CAP = 1_000_000  # bytes of stdout + stderr kept; more than this stops the child


@dataclass
class Outcome:
    """What a bounded check run left: exit code (None if killed), its output (capped), the report, why it stopped."""

    returncode: int | None
    output: str
    report: dict | None
    stopped: str | None  # None, "timeout" or "output"
    seconds: float


def _drain(stream, kept: bytearray, cap: int, over: threading.Event) -> None:
    """Read `stream` to its end, keeping at most `cap` bytes in `kept`; set `over` once the cap is passed."""
    while chunk := stream.read1(65536):
        room = cap - len(kept)
        if room > 0:
            kept += chunk[:room]
        if len(chunk) > room:
            over.set()


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_all() -> None:
    """Kill every check still running (the caller was interrupted): none outlives the command."""
    for process in list(LIVE):
        _kill_group(process)


def check(spec: str, folder: Path, timeout: float = TIMEOUT_S, cap: int = OUTPUT_CAP, stage: int | None = None):
    """Check `spec` (a .py path or 'reference') at every stage (or only `stage`); never longer than `timeout`.

    `folder` (created, and left for the caller to remove) receives the report and serves as the
    child's working and temporary folder, so even a killed child leaves nothing outside it.
    """
    scratch = folder / "tmp"
    scratch.mkdir(parents=True)
    command = [sys.executable, "-m", "shardlab", "check", "--implementation", spec, "--output", str(folder / "report")]
    command += ["--stage", "all"] if stage is None else ["--stage", str(stage), "--only"]
    kept, over = bytearray(), threading.Event()
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=scratch,  # a file the submission writes lands in the scratch folder too
        start_new_session=True,  # its own process group: the checker's grandchild dies with it
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1", "TMPDIR": str(scratch)},
    )
    LIVE.add(process)
    reader = threading.Thread(target=_drain, args=(process.stdout, kept, cap, over), daemon=True)
    reader.start()
    stopped = None
    while process.poll() is None:
        if over.is_set():
            stopped = "output"
        elif time.perf_counter() - start > timeout:
            stopped = "timeout"
        if stopped:
            _kill_group(process)
            break
        over.wait(0.05)
    process.wait()
    _kill_group(process)  # anything the child left behind in its group
    LIVE.discard(process)
    reader.join(timeout=5)
    stopped = stopped or ("output" if over.is_set() else None)
    path = folder / "report" / REPORT
    report = None
    if stopped is None and path.is_file():
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            report = None
    return Outcome(
        None if stopped else process.returncode,
        kept.decode("utf-8", errors="replace"),
        report,
        stopped,
        round(time.perf_counter() - start, 2),
    )
