"""The supervisor: owns a group of controllers and restarts the whole group when any one fails.

`supervise` is the only way a group of controllers runs here: a plain launch is
`supervise(budget=0)`, and `python -m shardlab supervise` is its command line (`multi.supervise`).
An attempt is one group, launched with a coordinator port no earlier attempt used. Every
POLL seconds the supervisor looks at each process:

- death: a non-zero exit (a signal, a crash, JAX's own abort, or a named stop, whose report
  says what stopped it) is seen at the next poll (stated bound: DEATH_S);
- freeze: a process whose pulse file has not changed for FREEZE_S seconds is frozen (SIGSTOP,
  a wedged interpreter); a process that never pulses within the start-up bound never started;
- preemption: every process exiting with EXIT_PREEMPTED after an agreed save is not a failure.

On a failure it writes attempt-K/failure.json naming the process and the cause, kills every
process group of the attempt (survivors blocked in a CPU collective never cancel themselves),
and relaunches with `--resume latest` when a complete checkpoint exists (with `settle`, it
first lets the other processes stop by themselves, so their own named errors are kept). More
failures than `budget` end the run with a RestartBudgetError: a crash loop, not bad luck; a
launch the environment cannot start (a LaunchError) ends it at once, since a restart would
meet the same environment.
"""

import json
import os
import signal
import time

from shardlab.core.config import BATCH_SIZE, SEED
from shardlab.errors import LaunchError, RestartBudgetError
from shardlab.io import write_json
from shardlab.multi import launcher, manifest, program, runtime
from shardlab.multi.wait_guard import EXIT_STOPPED, PULSE, PULSE_WINDOW, TIMEOUT

POLL = 0.05  # seconds between looks at the group
BUDGET = 3  # restarts allowed by default, here and in the `supervise` command
MISSED_PULSES = 10  # pulses a process may miss before it counts as frozen: several, not one late one
FREEZE_S = MISSED_PULSES * PULSE  # seconds: a pulse older than this is a frozen process
DEATH_S = 0.5  # an exit is seen at the next poll; 10 polls allow for a loaded machine (2 cores, many processes)
SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "term": signal.SIGTERM}


def detection_bounds(timeout: float) -> dict:
    """The stated bounds, seconds: a death within DEATH_S, a freeze within FREEZE_S plus a pulse and two polls."""
    return {
        "death_s": DEATH_S,
        "freeze_s": round(FREEZE_S + PULSE + 2 * POLL, 3),
        "named_s": round(timeout + PULSE_WINDOW + 2.0, 1),  # a guard's bound, its pulse check, its report
        "start_s": round(launcher_start_bound(timeout), 1),
    }


def launcher_start_bound(timeout: float) -> float:
    """How long a process may take to send its first pulse (JAX's initialisation timeout plus import time)."""
    from shardlab.multi.runtime import init_timeout

    return init_timeout(timeout) + 30.0


def _cause(code: int, report: dict | None) -> str:
    """A named cause for a non-zero exit code."""
    if code < 0:
        name = signal.Signals(-code).name
        if -code == signal.SIGABRT:
            return f"aborted ({name}; JAX's fatal error after losing a peer or the coordinator)"
        return f"killed ({name})"
    if code == launcher.CLEANED_UP:
        return "ended by mpirun after another rank failed"
    if code == EXIT_STOPPED and report and report.get("error"):
        return f"named stop: {report['error']['type']}: {report['error']['message'][:200]}"
    return f"crashed (exit code {code})"


def _rank(code: int) -> int:
    """Which of several exits seen in one poll is the primary failure: signals, crashes, aborts, named stops."""
    if code < 0 and -code != signal.SIGABRT:
        return 0
    if code not in (EXIT_STOPPED, -signal.SIGABRT, launcher.CLEANED_UP):
        return 1
    return {-signal.SIGABRT: 2, EXIT_STOPPED: 3}.get(code, 4)


def _teardown(procs: dict, logs: list) -> float:
    """SIGKILL every process group of the attempt and reap it; return the seconds it took."""
    began = time.time()
    launcher.kill(list(procs.values()))
    for proc in procs.values():
        proc.wait()
    for log in logs:
        log.close()
    return round(time.time() - began, 3)


def _inject(fault: dict, procs: dict, out: str) -> dict | None:
    """If the victim reached its fault point, signal it (a 'die' fault killed itself); return the event."""
    victim = fault["rank"]
    text = launcher.read_text(program.file_of(out, "fault", victim))
    if not text:
        return None
    mark = json.loads(text)
    if fault["signal"] in ("die", "fail"):
        return {**fault, "time": mark["time"], "marker": mark}
    time.sleep(fault.get("delay", 0.0))
    proc = procs[victim]
    if proc.poll() is None:
        launcher.signal_process(proc, SIGNALS[fault["signal"]], mark.get("os_pid"))
    return {**fault, "time": time.time(), "marker": mark, "after_exit": proc.returncode is not None}


def _failed(codes: dict, out: str, now: float) -> dict | None:
    """The primary failure among the exits seen in one poll, or None."""
    failed = {pid: c for pid, c in codes.items() if c not in (None, 0, program.EXIT_PREEMPTED)}
    if not failed:
        return None
    pid = min(failed, key=lambda q: (_rank(failed[q]), q))
    report = launcher.report(out, pid)
    found = {"kind": "failed", "process": pid, "cause": _cause(failed[pid], report), "exit_code": failed[pid]}
    if failed[pid] == EXIT_STOPPED and report and report.get("error"):
        found["error_type"] = report["error"]["type"]
    return {**found, "time": now}


def _ended(codes: dict, out: str, now: float) -> dict:
    """Every process exited 0 or preempted: complete, preempted together, or a group that did not agree."""
    preempted = [pid for pid, c in codes.items() if c == program.EXIT_PREEMPTED]
    if not preempted:
        return {"kind": "complete", "time": now}
    if len(preempted) == len(codes):
        step = (launcher.report(out, 0) or {}).get("preempted_at")
        return {"kind": "preempted", "step": step, "time": now, "cause": f"preempted at step {step}"}
    cause = "exited 0 while the others were preempted: the group did not agree"
    return {"kind": "failed", "process": min(set(codes) - set(preempted)), "time": now, "cause": cause, "exit_code": 0}


def _unresponsive(codes: dict, pulses: dict, out: str, now: float, start: float, timeout: float) -> dict | None:
    """A running process whose pulse stopped changing (frozen) or never began (never started), or None."""
    for pid, code in codes.items():
        if code is not None:
            continue
        content = launcher.read_text(program.file_of(out, "pulse", pid))
        seen, since = pulses[pid]
        if content != seen:
            pulses[pid] = (content, now)
        elif content is not None and now - since > FREEZE_S:
            cause = f"frozen (no pulse for {now - since:.1f} s; last position {content.partition('|')[2]!r})"
            return {"kind": "failed", "process": pid, "cause": cause, "exit_code": None, "time": now}
        elif content is None and now - start > launcher_start_bound(timeout):
            return {"kind": "failed", "process": pid, "cause": "never started (no pulse)", "time": now}
    return None


def _poll(procs: dict, exits: dict) -> dict:
    """Every process's exit code (None while it runs); the first time each exit was seen goes into `exits`."""
    codes, now = {pid: proc.poll() for pid, proc in procs.items()}, time.time()
    for pid, code in codes.items():
        if code is not None:
            exits.setdefault(pid, now)
    return codes


def _watch(procs: dict, out: str, fault: dict | None, timeout: float, limit: float, exits: dict) -> dict:
    """Poll the group until it completes, is preempted, or one process fails; return what happened."""
    start = time.time()
    pulses = {pid: (None, start) for pid in procs}
    injected = None
    while time.time() - start < limit:
        now = time.time()
        if fault and injected is None:
            injected = _inject(fault, procs, out)
        codes = _poll(procs, exits)
        event = _failed(codes, out, now)
        if event is None and all(c is not None for c in codes.values()):
            return _ended(codes, out, now)
        event = event or _unresponsive(codes, pulses, out, now, start, timeout)
        if event:
            return {**event, "injected": injected}
        time.sleep(POLL)
    return {"kind": "failed", "process": None, "cause": f"attempt exceeded its {limit:g} s limit", "time": time.time()}


def _settle(procs: dict, exits: dict, seconds: float) -> None:
    """Let the processes still running end by themselves for up to `seconds` (their exit times go into `exits`)."""
    deadline = time.time() + seconds
    while time.time() < deadline and any(c is None for c in _poll(procs, exits).values()):
        time.sleep(POLL)


def fault_arg(fault: dict) -> str:
    """The program's --pause for a supervisor fault: 'die' kills itself, 'fail' fails its next background
    write, 'term' waits for the signal; others hold (or, with hold=False, go on until the signal lands)."""
    mode = fault["signal"] if fault["signal"] in ("die", "term", "fail") else "hold"
    mode = mode if fault.get("hold", True) else "mark"
    return f"{fault['rank']}:{fault['phase']}:{fault['step']}:{mode}"


def _fresh_port(used: set) -> int:
    port = launcher.free_port()
    while port in used:
        port = launcher.free_port()
    used.add(port)
    return port


def _run_attempt(job: dict, k: int, fault: dict | None, resume: str, port: int, settle: float) -> dict:
    """Launch attempt k, watch it, tear it down; return its record (written to failure.json if it failed)."""
    complete = manifest.scan(job["shared"])["complete"]  # what "latest" can mean for this attempt
    folder = os.path.join(job["out"], f"attempt-{k}")
    os.makedirs(folder)
    skip = job["skip"] if job["skip"] and job["skip"]["attempt"] == k else None
    args = program.argv(
        **job["options"],
        shared=job["shared"],
        out=folder,
        resume=resume,
        pause=fault_arg(fault) if fault else None,
        skip=f"{skip['rank']}:{skip['step']}" if skip else None,
    )
    launched, exits = time.time(), {}
    where = (job["processes"], job["local_devices"], job["launch"], port, job["cache"])
    procs, logs = launcher.start(folder, args, *where)
    try:
        if job["on_start"]:
            job["on_start"](k, port, resume, procs)
        event = _watch(procs, folder, fault, job["options"]["timeout"], job["limit"], exits)
        if settle and event["kind"] == "failed":
            _settle(procs, exits, settle)
    finally:
        teardown = _teardown(procs, logs)
    return _record(
        k,
        folder,
        procs,
        fault,
        event,
        exits,
        launched=launched,
        teardown=teardown,
        port=port,
        resume=resume,
        complete=complete,
    )


def _record(k, folder, procs, fault, event, exits, **seen) -> dict:
    """What one attempt did: its fault and when it landed, the verdict, exits, reports and progress events."""
    marker = launcher.read_text(program.file_of(folder, "fault", fault["rank"])) if fault else None
    injected = event.get("injected") or (json.loads(marker) if marker else None)  # signal time, else marker's
    progress = {pid: launcher.progress(folder, pid) for pid in procs}
    skipped = [e["t"] for events in progress.values() for e in events if e["event"] == "skipped"]
    reports = {pid: launcher.report(folder, pid) for pid in procs}
    record = {
        "attempt": k,
        "port": seen["port"],
        "resume": seen["resume"],
        "complete_before": seen["complete"],
        "launched": seen["launched"],
        "fault": fault,
        "fault_time": injected["time"] if injected else (skipped[0] if skipped else None),
        "event": event,
        "teardown_s": seen["teardown"],
        "exit_codes": {pid: proc.returncode for pid, proc in procs.items()},
        "exit_times": exits,
        "reports": reports,
        "divergence": launcher.divergence(reports),
        "progress": progress,
        "out": folder,
    }
    if event["kind"] == "failed":
        since = record["fault_time"]
        record["detect_s"] = round(event["time"] - since, 3) if since else None
        write_json(os.path.join(folder, "failure.json"), {key: record[key] for key in ("attempt", "event", "detect_s")})
    return record


def _budget_error(failures: int, attempts: list, budget: int) -> Exception | None:
    """Why the run ends after its newest attempt (None: restart it)."""
    event = attempts[-1]["event"]
    if event.get("error_type") == "LaunchError":
        return LaunchError(f"process {event['process']} could not join the group: {event['cause']}")
    if failures > budget:
        return RestartBudgetError(
            f"{failures} failures in {len(attempts)} attempts exceed the restart budget of {budget}; the "
            f"last: process {event['process']} {event['cause']}. This is a crash loop: fix the cause "
            "before restarting again."
        )
    return None


def _attempts(job: dict, faults: tuple, budget: int, resume: str | None, settle: float, on_attempt) -> tuple:
    """Attempts until one completes, the budget is spent or the launch cannot work: (attempts, failures, error)."""
    attempts, ports, failures = [], set(), 0
    for k in range(budget + len(faults) + 3):
        first = resume if k == 0 and resume is not None else None
        start_from = first or ("latest" if manifest.scan(job["shared"])["complete"] else "none")
        fault = faults[k] if k < len(faults) else None
        attempts.append(_run_attempt(job, k, fault, start_from, _fresh_port(ports), settle))
        if on_attempt:
            on_attempt(attempts[-1])
        kind = attempts[-1]["event"]["kind"]
        failures += kind == "failed"
        error = _budget_error(failures, attempts, budget) if kind == "failed" else None
        if kind == "complete" or error:
            return attempts, failures, error
    return attempts, failures, LaunchError(f"no attempt completed in {len(attempts)} attempts")


def supervise(
    out,
    shared,
    processes: int = 2,
    local_devices: int = 2,
    *,
    steps: int = 10,
    save_every: int = 3,
    seed: int = SEED,
    batch_size: int = BATCH_SIZE,
    timeout: float = TIMEOUT,
    faults: tuple = (),
    budget: int = BUDGET,
    async_save: bool = False,
    keep: int = 0,
    launch: str = "explicit",
    skip: dict | None = None,
    resume: str | None = None,
    migrate: bool = False,
    settle: float = 0.0,
    on_start=None,
    on_attempt=None,
    cache: str | None = None,
) -> dict:
    """Run the group to completion through failures; return (and write out/supervisor.json) every attempt.

    `faults[k]` is injected into attempt k: {rank, phase, step, signal: kill|stop|term|die|fail, delay, hold}.
    `skip` ({attempt, rank, step}) makes one controller skip a batch in that attempt (a named stop).
    `resume` is the first attempt's (default: 'latest' if a complete step exists, else 'none'); every
    relaunch resumes from the newest complete step. `settle`: seconds the other processes may take to
    stop by themselves after a failure, before the teardown. `on_start(k, port, resume, procs)` and
    `on_attempt(record)` are called as each attempt starts and ends (the command line prints them).
    `cache`: a JAX compilation cache folder every attempt's processes share (launcher.environment); None:
    each process compiles its programs itself.
    """
    out, shared = os.path.abspath(os.fspath(out)), os.path.abspath(os.fspath(shared))
    os.makedirs(out, exist_ok=False)
    options = dict(steps=steps, save_every=save_every, seed=seed, batch_size=batch_size, timeout=timeout,
                   async_save=async_save, keep=keep, migrate=migrate)  # fmt: skip
    job = dict(out=out, shared=shared, processes=processes, local_devices=local_devices, launch=launch, skip=skip,
               on_start=on_start, options=options, limit=90 + 6 * timeout, cache=cache)  # fmt: skip
    began = time.time()
    attempts, failures, error = _attempts(job, faults, budget, resume, settle, on_attempt)
    result = {
        "processes": processes,
        "local_devices": local_devices,
        "world": runtime.World(processes, local_devices, 0).label,
        "launch": launch,
        "budget": budget,
        "failures": failures,
        "restarts": len(attempts) - 1,
        "ports": [a["port"] for a in attempts],
        "attempts": attempts,
        "completed": attempts[-1]["event"]["kind"] == "complete",
        "error": {"type": type(error).__name__, "message": str(error)} if error else None,
        "bounds": detection_bounds(timeout),
        "wall_s": round(time.time() - began, 2),
    }
    write_json(os.path.join(out, "supervisor.json"), result)
    return result
