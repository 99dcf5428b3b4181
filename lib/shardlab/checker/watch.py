"""Run the checking interpreter under watch: it never hangs the caller, and the report is always written.

The child (`python -m shardlab.checker`) writes every event to a progress file: which check starts,
which learner function it calls, each result. Its console (everything a learner's code prints, from
Python or from C) goes to a log file, never straight to the screen. This parent

- prints each result as it arrives,
- stops the child when one call grows it by more than the memory bound, when a call is still open
  well after its time bound (a loop SIGALRM could not break), or when the log passes the output bound,
- notices a child that ended without finishing (os._exit, a segfault, a kill),
- names the function in progress in a failed result for that check, and starts a new child that
  skips the checks already done and refuses to call that function again,
- writes the report from the results it received, whatever happened to the children.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import shardlab.checker.guard as guard
import shardlab.checker.sandbox as sandbox
from shardlab import process_group

REPORT = "check_report.json"  # the JSON report of a run (in the command line's --output folder)
LOG = "check_output.log"  # everything the implementation printed, beside the report
GRACE = 10.0  # seconds past the time bound before the parent stops a call SIGALRM did not end
POLL = 0.05  # seconds between looks at the child
RESTARTS = 8  # at most one per learner function, plus slack
SHOWN_LINES = 20  # lines of the learner's console output echoed at the end
TOTAL_BOUND = "the whole check run passed"  # how a verdict of the whole-run bound starts
# a verdict of a time bound: the function's name, then a call's bound (guard.loop_verdict) or the whole run's
TIMED_OUT = re.compile(f"`[^`\n]{{1,200}}` ({re.escape(guard.TIME_BOUND)}|{re.escape(TOTAL_BOUND)}) ")


@dataclass
class Bounds:
    """The bounds one run applies (the defaults are the course's; tests shrink them to stay quick)."""

    call_seconds: float = guard.CALL_SECONDS
    memory_bytes: int = guard.MEMORY_BYTES
    output_bytes: int = guard.OUTPUT_BYTES
    total_seconds: float = 1800.0
    sandboxed: bool = False  # each checking interpreter in its own bubblewrap sandbox (checker/sandbox.py)


class Watch:
    """What the parent has read from one run's progress file so far."""

    def __init__(self, path: str):
        self.path, self.offset = path, 0
        self.results, self.environment, self.done = [], None, False
        self.check, self.open_call, self.course = None, None, {}
        self.lanes = {}  # lane -> (its check, its open call): two lanes run side by side (checker/lanes.py)
        self.reached = {}  # stage -> the first course code a call of one of its checks reached (checker/seal.py)
        self.pid = None  # the checking interpreter's own pid as it sees it (from its "start" event)
        self.parent = os.getppid()  # whoever started this supervisor: if it dies, the check stops

    def read(self, echo) -> None:
        with open(self.path, encoding="utf-8") as handle:
            handle.seek(self.offset)
            text = handle.read()
        complete = text[: text.rfind("\n") + 1]
        self.offset += len(complete.encode("utf-8"))
        for line in complete.splitlines():
            try:
                event = json.loads(line)
                kind = event.pop("event")
            except (ValueError, TypeError, AttributeError, KeyError, RecursionError):
                continue  # not one of the checker's events
            if not isinstance(kind, str):
                continue
            if kind in ("call", "return", "check"):
                self._lane(kind, event)
            elif kind == "result" and _shaped(event.get("result")):
                self.results.append(event["result"])
                self._finished(event["result"]["name"])
                echo(event["result"])
            else:
                self._note(kind, event)

    def _lane(self, kind: str, event: dict) -> None:
        """Follow each lane's check and open call; `check` and `open_call` are those of the call open longest."""
        lane = event.get("lane", 0) if isinstance(event.get("lane", 0), int) else 0
        check, call = self.lanes.get(lane, (None, None))
        if kind == "check":
            check, call = event, None
        elif event.get("pid") == self.pid:
            call = event if kind == "call" else None
        self.lanes[lane] = check, call
        calls = [(c.get("at", 0), n) for n, (_, c) in self.lanes.items() if isinstance(c, dict)]
        if calls:
            self.check, self.open_call = self.lanes[min(calls)[1]]
        else:
            self.check, self.open_call = check, None

    def _finished(self, name: str) -> None:
        """A result came: between its check and the next, no check of its lane is in progress."""
        self.lanes = {n: (None if c and c.get("name") == name else c, call) for n, (c, call) in self.lanes.items()}
        self.check = None if self.check and self.check.get("name") == name else self.check

    def _note(self, kind: str, event: dict) -> None:
        if kind == "implementation" and _named(event.get("course_functions")):
            self.course = event["course_functions"]
        elif kind == "course_code" and isinstance(event.get("message"), str):
            lane = event.get("lane", 0) if isinstance(event.get("lane", 0), int) else 0
            check = self.lanes.get(lane, (None, None))[0] or self.check
            if isinstance(check, dict):
                self.reached.setdefault(str(check.get("stage")), event["message"][:600])
        elif kind == "start" and self.pid is None:
            self.environment, self.pid = event["environment"], event.get("pid")
        elif kind == "done":
            self.done = True


# the fields of checker.cli.Result (a test keeps the two equal): typed ones, then any-valued ones, then optional ones
RESULT_FIELDS = {"name": str, "stage": int, "passed": bool, "diagnosis": str, "seconds": (int, float)}
RESULT_VALUES = ("expected", "observed")
# optional fields of cli.Result: the rules the diagnosed mistake breaks, the ids of the mistakes diagnosed
RESULT_OPTIONAL: dict = {"rules": (list, tuple), "causes": (list, tuple)}


def _named(found) -> bool:
    return isinstance(found, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in found.items())


def _shaped(result) -> bool:
    """True for a result event with the report's fields (and no others), each of the report's type."""
    if not isinstance(result, dict):
        return False
    required = {*RESULT_FIELDS, *RESULT_VALUES}
    typed = {**RESULT_FIELDS, **{k: v for k, v in RESULT_OPTIONAL.items() if k in result}}
    return required <= set(result) <= required | set(RESULT_OPTIONAL) and all(
        isinstance(result[k], kind) for k, kind in typed.items()
    )


def _watch(command: list, watch: Watch, log_path: str, bounds: Bounds, echo, deadline: float) -> str | None:
    """Run one child to its end; None if it finished, else the verdict for the call in progress."""
    with open(log_path, "ab") as log:
        start = log.tell()
        process = sandbox.spawn(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )

    def stop() -> str | None:
        """The verdict that ends the child now, or None; raises if whoever started this supervisor died."""
        if os.getppid() != watch.parent:  # the caller died (grade killed): nothing it started may go on
            raise SystemExit(f"[shardlab check] the caller (process {watch.parent}) ended; the check was stopped")
        watch.read(echo)
        call, now = watch.open_call, time.time()
        written = os.path.getsize(log_path) - start
        if call and guard.resident_bytes(process.pid) - call["rss"] > bounds.memory_bytes:
            return guard.memory_verdict(bounds.memory_bytes)
        if call and now - call["at"] > bounds.call_seconds + GRACE:
            return guard.loop_verdict(call["function"], bounds.call_seconds)
        if written > bounds.output_bytes or os.path.getsize(watch.path) > 64 * bounds.output_bytes:
            return (
                f"wrote more than {guard.gigabytes(bounds.output_bytes)} to the console -> printing in a loop? "
                "(the run was stopped; the output so far is in the log)"
            )
        if now > deadline:
            return f"{TOTAL_BOUND} {bounds.total_seconds:g} s and was stopped"
        return None

    # the child and anything it left running in its group (or its sandbox) end here, whatever stopped it
    verdict = process_group.until(process, stop, POLL)
    process_group.release(log_path)  # no survivor of this child writes into the next one's output bound
    watch.read(echo)  # what it wrote last
    if watch.done:
        return None
    return verdict or guard.ended_verdict(process.returncode, "the checking interpreter")


def timed_out(diagnosis) -> bool:
    """Whether a failed check's diagnosis is a time bound's verdict (one call's or the whole run's): the code was
    still running when its time was up, which says how fast the machine was as much as what the code does."""
    return bool(TIMED_OUT.match(str(diagnosis)))


def _failed_result(watch: Watch, verdict: str, stage: int) -> dict:
    call = watch.open_call
    function = call["function"] if call else "the implementation"
    text = verdict if verdict.startswith("`") else f"`{function}` {verdict}"
    check = watch.check or {"name": "checking_interpreter", "stage": stage}
    return {
        "name": check["name"],
        "stage": check["stage"],
        "passed": False,
        "expected": "a call that returns within the bounds",
        "observed": text,
        "diagnosis": text,
        "seconds": 0.0,
    }, function


def run(
    spec: str, stage, only: bool, folder: str, echo, bounds: Bounds | None = None, extra: tuple = (), skip=()
) -> tuple[list, dict | None]:
    """Check `spec` in child interpreters under `bounds`, writing the log in `folder`; (results, environment).

    `extra` are further child arguments (the search seed, --thorough); checks named in `skip` are left out.
    """
    bounds = bounds or Bounds()
    progress = os.path.join(folder, "progress.jsonl")
    log_path = os.path.join(folder, LOG)
    open(progress, "a").close()
    watch, poisoned, left_out = Watch(progress), {}, list(skip)
    skip = list(left_out)
    deadline = time.time() + bounds.total_seconds
    first = int(stage) if only else 1  # the stage a failure before any check is reported under
    for _ in range(RESTARTS):
        command = [sys.executable, "-B", "-m", "shardlab.checker", "--implementation", spec, "--stage", str(stage)]
        command += ["--progress", progress, "--call-seconds", str(bounds.call_seconds), *extra]
        command += ["--memory-bytes", str(bounds.memory_bytes)]
        command += ["--only"] * bool(only) + ["--skip", json.dumps(skip), "--poison", json.dumps(poisoned)]
        command += ["--sandbox"] * bounds.sandboxed  # where the implementation's interpreter runs
        watch.done, watch.check, watch.open_call, watch.pid, watch.lanes = False, None, None, None, {}
        verdict = _watch(command, watch, log_path, bounds, echo, deadline)
        if verdict is None:
            break
        result, function = _failed_result(watch, verdict, first)
        watch.results.append(result)
        echo(result)
        poisoned[function] = result["diagnosis"]
        skip = left_out + [r["name"] for r in watch.results]
        if time.time() > deadline:
            break
    os.remove(progress)
    if watch.environment is not None and watch.course:
        watch.environment = {**watch.environment, "course_functions": watch.course}
    if watch.environment is not None and watch.reached:
        watch.environment = {**watch.environment, "course_code": watch.reached}
    return watch.results, watch.environment


def learner_output(log_path: str, keep: bool) -> str:
    """The first lines the learner's code printed, and where the rest is (empty if it printed nothing)."""
    if not os.path.exists(log_path) or not os.path.getsize(log_path):
        return ""
    with open(log_path, "rb") as handle:
        head = handle.read(64 * 1024).decode("utf-8", "replace").splitlines()[:SHOWN_LINES]
    size = os.path.getsize(log_path)
    where = f"all of it in {log_path}" if keep else "run with --output FOLDER to keep all of it"
    body = "\n".join(f"    | {line[:200]}" for line in head)
    return f"[shardlab check] the implementation printed {size} bytes (first {len(head)} lines; {where}):\n{body}"


def temporary_run(
    spec: str, stage, only: bool, echo, bounds: Bounds | None = None, extra: tuple = ()
) -> tuple[dict, str]:
    """`run` in a temporary folder: (results, environment, the learner-output excerpt)."""
    with tempfile.TemporaryDirectory(prefix="shardlab-check-") as folder:
        results, environment = run(spec, stage, only, folder, echo, bounds, extra)
        return results, environment, learner_output(os.path.join(folder, LOG), keep=False)
