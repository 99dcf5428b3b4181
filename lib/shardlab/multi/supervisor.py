"""The supervisor: owns a group of controllers and restarts the whole group when any one fails.

An attempt is one group, launched with a coordinator port no earlier attempt used. Every
POLL seconds the supervisor looks at each process:

- death: a non-zero exit (a signal, a crash, JAX's own abort, or a named stop, whose report
  says what stopped it) is seen at the next poll (stated bound: DEATH_S);
- freeze: a process whose pulse file has not changed for FREEZE_S seconds is frozen (SIGSTOP,
  a wedged interpreter); a process that never pulses within the start-up bound never started;
- preemption: every process exiting with EXIT_PREEMPTED after an agreed save is not a failure.

On a failure it writes attempt-K/failure.json naming the process and the cause, kills every
process group of the attempt (survivors blocked in a CPU collective never cancel themselves),
and relaunches with `--resume latest` when a complete checkpoint exists. More failures than
`budget` end the run with a RestartBudgetError: a crash loop, not bad luck.
"""

import json
import os
import signal
import time

from shardlab.errors import LaunchError, RestartBudgetError
from shardlab.multi import launcher, manifest, program
from shardlab.multi.guard import EXIT_STOPPED, PULSE, PULSE_WINDOW

POLL = 0.05  # seconds between looks at the group
FREEZE_S = 5.0  # a pulse older than this (10 missed pulses) is a frozen process
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
    for proc in procs.values():
        if proc.poll() is None:
            launcher.kill(proc)
    for proc in procs.values():
        proc.wait()
    for log in logs:
        log.close()
    return round(time.time() - began, 3)


def _inject(fault: dict, procs: dict, out: str) -> dict | None:
    """If the victim reached its fault point, signal it (a 'die' fault killed itself); return the event."""
    victim = fault["rank"]
    text = launcher.read_text(program.marker_path(out, victim))
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


def _watch(procs: dict, out: str, fault: dict | None, timeout: float, limit: float) -> dict:
    """Poll the group until it completes, is preempted, or one process fails; return what happened."""
    start = time.time()
    pulses = {pid: (None, start) for pid in procs}
    injected = None
    while time.time() - start < limit:
        now = time.time()
        if fault and injected is None:
            injected = _inject(fault, procs, out)
        codes = {pid: proc.poll() for pid, proc in procs.items()}
        failed = {pid: c for pid, c in codes.items() if c not in (None, 0, program.EXIT_PREEMPTED)}
        if failed:
            pid = min(failed, key=lambda q: (_rank(failed[q]), q))
            cause = _cause(failed[pid], launcher.report(out, pid))
            found = {"kind": "failed", "process": pid, "cause": cause, "exit_code": failed[pid], "time": now}
            return {**found, "injected": injected}
        if all(c is not None for c in codes.values()):
            preempted = [pid for pid, c in codes.items() if c == program.EXIT_PREEMPTED]
            if not preempted:
                return {"kind": "complete", "time": now}
            if len(preempted) == len(procs):
                step = (launcher.report(out, 0) or {}).get("preempted_at")
                return {"kind": "preempted", "step": step, "time": now, "cause": f"preempted at step {step}"}
            return {
                "kind": "failed",
                "process": min(set(procs) - set(preempted)),
                "time": now,
                "cause": "exited 0 while the others were preempted: the group did not agree",
                "exit_code": 0,
            }
        for pid, code in codes.items():
            if code is not None:
                continue
            content = launcher.read_text(program.pulse_path(out, pid))
            seen, since = pulses[pid]
            if content != seen:
                pulses[pid] = (content, now)
            elif content is not None and now - since > FREEZE_S:
                cause = f"frozen (no pulse for {now - since:.1f} s; last position {content.partition('|')[2]!r})"
                return {
                    "kind": "failed",
                    "process": pid,
                    "cause": cause,
                    "exit_code": None,
                    "time": now,
                    "injected": injected,
                }
            elif content is None and now - start > launcher_start_bound(timeout):
                return {"kind": "failed", "process": pid, "cause": "never started (no pulse)", "time": now}
        time.sleep(POLL)
    return {"kind": "failed", "process": None, "cause": f"attempt exceeded its {limit:g} s limit", "time": time.time()}


def _write(path: str, value: dict) -> None:
    with open(f"{path}.tmp", "w") as handle:
        json.dump(value, handle, indent=1, sort_keys=True, default=str)
    os.replace(f"{path}.tmp", path)


def fault_arg(fault: dict) -> str:
    """The program's --pause for a supervisor fault: 'die' kills itself, 'fail' fails its next background
    write, 'term' waits for the signal, others hold."""
    mode = fault["signal"] if fault["signal"] in ("die", "term", "fail") else "hold"
    return f"{fault['rank']}:{fault['phase']}:{fault['step']}:{mode}"


def supervise(
    out,
    shared,
    processes: int = 2,
    local_devices: int = 2,
    *,
    steps: int = 10,
    save_every: int = 3,
    seed: int = 17,
    batch_size: int = 7,
    timeout: float = 10.0,
    faults: tuple = (),
    budget: int = 3,
    async_save: bool = False,
    keep: int = 0,
    launch: str = "explicit",
    skip: dict | None = None,
) -> dict:
    """Run the group to completion through failures; return (and write out/supervisor.json) every attempt.

    `faults[k]` is injected into attempt k: {rank, phase, step, signal: kill|stop|term|die|fail, delay}.
    `skip` ({attempt, rank, step}) makes one controller skip a batch in that attempt (a named stop).
    """
    out, shared = os.path.abspath(os.fspath(out)), os.path.abspath(os.fspath(shared))
    os.makedirs(out, exist_ok=False)
    attempts, ports, failures, error = [], set(), 0, None
    began = time.time()
    limit = 90 + 6 * timeout
    for k in range(budget + len(faults) + 3):
        port = launcher.free_port()
        while port in ports:
            port = launcher.free_port()
        ports.add(port)
        complete = manifest.scan(shared)["complete"]  # what "latest" can mean for this attempt
        resume = "latest" if complete else "none"
        fault = faults[k] if k < len(faults) else None
        folder = os.path.join(out, f"attempt-{k}")
        os.makedirs(folder)
        args = [
            *("--shared", shared, "--out", folder, "--steps", str(steps), "--save-every", str(save_every)),
            *("--seed", str(seed), "--batch-size", str(batch_size), "--resume", resume, "--timeout", str(timeout)),
            *(["--async-save"] if async_save else []),
            *(["--keep", str(keep)] if keep else []),
            *(["--pause", fault_arg(fault)] if fault else []),
            *(["--skip", f"{skip['rank']}:{skip['step']}"] if skip and skip["attempt"] == k else []),
        ]
        launched = time.time()
        procs, logs = launcher.start(folder, args, processes, local_devices, launch, port)
        try:
            event = _watch(procs, folder, fault, timeout, limit)
        finally:
            teardown = _teardown(procs, logs)
        marker = launcher.read_text(program.marker_path(folder, fault["rank"])) if fault else None
        injected = event.get("injected") or (json.loads(marker) if marker else None)  # signal time, else marker's
        skipped = [e["t"] for q in procs for e in launcher.progress(folder, q) if e["event"] == "skipped"]
        record = {
            "attempt": k,
            "port": port,
            "resume": resume,
            "complete_before": complete,
            "launched": launched,
            "fault": fault,
            "fault_time": injected["time"] if injected else (skipped[0] if skipped else None),
            "event": event,
            "teardown_s": teardown,
            "exit_codes": {pid: proc.returncode for pid, proc in procs.items()},
            "reports": {pid: launcher.report(folder, pid) for pid in procs},
            "progress": {pid: launcher.progress(folder, pid) for pid in procs},
            "out": folder,
        }
        if event["kind"] == "failed":
            since = record["fault_time"]
            record["detect_s"] = round(event["time"] - since, 3) if since else None
            _write(os.path.join(folder, "failure.json"), {k2: record[k2] for k2 in ("attempt", "event", "detect_s")})
        attempts.append(record)
        if event["kind"] == "complete":
            break
        if event["kind"] == "failed":
            failures += 1
            if failures > budget:
                error = RestartBudgetError(
                    f"{failures} failures in {len(attempts)} attempts exceed the restart budget of {budget}; the "
                    f"last: process {event['process']} {event['cause']}. This is a crash loop: fix the cause "
                    "before restarting again."
                )
                break
    else:
        error = LaunchError(f"no attempt completed in {len(attempts)} attempts")
    result = {
        "processes": processes,
        "local_devices": local_devices,
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
    _write(os.path.join(out, "supervisor.json"), result)
    return result
