"""Run `python -m shardlab check` on one implementation within a time and output bound, its children sandboxed.

The bound is enforced here, whatever the child does: a check still running at `timeout` seconds
(plus the grace its supervisor needs to write the report), or printing more than `cap` bytes, is
killed with its whole process group (started by `shardlab.checker.sandbox`, waited for and killed
by `shardlab.process_group.until`, as the checker's own interpreters are). The checker's supervisor
runs shardlab's code only; each interpreter that imports the submission runs under it in a
bubblewrap sandbox when `sandboxed`. Output is read as it
comes, so a child that floods its pipe neither blocks nor fills memory. The verdict comes only from
the report the supervisor writes outside the sandbox; the printed output is kept to be read, never parsed.
"""

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import shardlab.checker.sandbox as sandbox
import shardlab.checker.seal as seal
from shardlab import process_group
from shardlab.checker.watch import REPORT
from shardlab.core import files

TIMEOUT_S = 300.0  # seconds one submission's whole check may take
OUTPUT_CAP = 1_000_000  # bytes of stdout + stderr kept; more than this stops the child
REPORT_GRACE = 30.0  # seconds past the bound the supervisor has to stop its child and write the report
REPORT_BYTES = 20_000_000  # a larger report is not read


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


def read_report(path) -> dict:
    """The JSON value in the check report at `path`: a regular file (no link followed) of at most REPORT_BYTES.

    OSError if it cannot be opened (a link among them), BoundedReadError (a ValueError) if it is not a
    regular file or is larger, ValueError or RecursionError if it is not JSON. Whether it is a report is
    `is_report`'s question.
    """
    return json.loads(files.read_bounded(path, REPORT_BYTES))


def is_report(found) -> bool:
    """True for what a check report holds: an object with a list of checks."""
    return isinstance(found, dict) and isinstance(found.get("checks"), list)


def _report(path: Path) -> dict | None:
    """The report the supervisor left at `path`, or None (none, unreadable, or not a report)."""
    try:
        found = read_report(path)
    except (ValueError, RecursionError, OSError):
        return None
    return found if is_report(found) else None


def check(
    spec: str,
    folder: Path,
    timeout: float = TIMEOUT_S,
    cap: int = OUTPUT_CAP,
    stage: int | None = None,
    sandboxed: bool = False,
    graded: bool = False,
):
    """Check `spec` (a .py path or 'reference') at every stage (or only `stage`); never much longer than `timeout`.

    `graded`: the course's own seven functions are sealed in the file's interpreter (checker/seal.py).

    `folder` (created, and left for the caller to remove) receives the report and serves as the
    supervisor's working and temporary folder, so even a killed run leaves nothing outside it.
    """
    scratch = folder / "tmp"
    scratch.mkdir(parents=True)
    command = [sys.executable, "-B", "-m", "shardlab", "check", "--implementation", spec]
    command += ["--output", str(folder / "report"), "--total-seconds", f"{timeout:g}"]
    command += ["--stage", "all"] if stage is None else ["--stage", str(stage), "--only"]
    command += ["--sandbox"] * sandboxed
    environment = {k: v for k, v in os.environ.items() if k != seal.SEAL_ENV} | ({seal.SEAL_ENV: "1"} if graded else {})
    kept, over = bytearray(), threading.Event()
    start = time.perf_counter()
    process = sandbox.spawn(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=scratch,
        env={**environment, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1", "TMPDIR": str(scratch)},
    )
    reader = threading.Thread(target=_drain, args=(process.stdout, kept, cap, over), daemon=True)
    reader.start()

    def stop() -> str | None:
        if over.is_set():
            return "output"
        return "timeout" if time.perf_counter() - start > timeout + REPORT_GRACE else None

    stopped = process_group.until(process, stop, 0.05, over.wait)  # also kills what the child left in its group
    reader.join(timeout=5)
    stopped = stopped or ("output" if over.is_set() else None)
    report = None if stopped else _report(folder / "report" / REPORT)
    return Outcome(
        None if stopped else process.returncode,
        kept.decode("utf-8", errors="replace"),
        report,
        stopped,
        round(time.perf_counter() - start, 2),
    )
