"""Supervised stage 5 scenarios: each a whole run through failures, one row of drills.json.

A scenario hands the supervisor a list of faults (one per attempt) and checks, against the
uninterrupted single-process control:

- every failure was detected within its stated bound and named the right process and cause;
- every relaunch resumed from the newest step whose manifest had been published ("latest"
  never points at anything else) and loses exactly the steps after it;
- the steps that survive form one continuous path 1..N equal to the control (IDs exact,
  weights within float32 tolerance);
- a preemption saves the agreed step, every process exits with "preempted at step N", and
  the relaunch loses no step.

`FULL` is what `make drills` runs beyond the drills of `drills`; stage5a_protocol (and so
`make test`) runs `several_failures` alone of these, stage5b_scaling runs `overhead`. Every row is `rows.row`'s shape.
"""

import os
import socket
import subprocess
import sys
import time

from shardlab import process_group
from shardlab.core.batch import padded_length
from shardlab.multi import group_supervisor, launcher, ledger, manifest, program, rows, runtime

CRASH_LOOP_BUDGET = 2  # restarts the crash-loop drill allows: the failure after them ends the run
SAVE_WINDOWS = ("save-begin", "save-staged", "save-written", "publish")  # a kill there: the step never counts


def _steps_seen(attempt: dict, event: str) -> list[int]:
    """Steps any process of the attempt reported with `event`: "published" (its manifest seen published) or
    "saved" (saved; for an asynchronous save, handed to the background write)."""
    return sorted({e["step"] for log in attempt["progress"].values() for e in log if e["event"] == event})


def _checks(k: int, attempts: list, lost: list, want: dict, bound, published: int) -> dict:
    """Attempt k's failure against what the scenario expects of it (`want`: cause, process, bound)."""
    event, fault = attempts[k]["event"], attempts[k]["fault"] or {}
    on_disk = attempts[k + 1]["complete_before"]  # verified complete steps when attempt k+1 started
    newest = on_disk[-1] if on_disk else 0
    detect, kind = attempts[k].get("detect_s"), event["kind"]
    named = want.get("process", fault.get("rank"))
    return {
        "named_process": kind == "preempted" or named is None or event.get("process") == named,
        "named_cause": want.get("cause", "") in event.get("cause", ""),
        "detected_within_bound": kind == "preempted" or (None not in (detect, bound) and detect <= bound),
        "resumed_from_newest_complete": ledger.resumed_from(attempts[k + 1]) == newest and newest >= published,
        "interrupted_save_not_accepted": fault.get("phase") not in SAVE_WINDOWS or fault["step"] not in on_disk,
        "no_step_lost": kind != "preempted" or lost[k] == 0,
    }


def _row(name: str, result: dict, ctx, expect: list[dict], bounds: dict) -> dict:
    """One drills.json row: per failure the process, phase, cause, detection and resume; the path; goodput."""
    attempts = result["attempts"]
    compared = ledger.against_control(result, ctx.reference, ctx.steps)
    lost = ledger.wasted_steps(result)
    failures, published = [], 0  # newest step any process saw published so far
    for k, attempt in enumerate(attempts[:-1]):
        published = max([published, *_steps_seen(attempt, "published")])
        want = expect[k] if k < len(expect) else {}
        stopped = (attempt["fault"] or {}).get("signal") == "stop"
        bound = bounds["freeze_s"] if stopped else bounds.get(want.get("bound", "death_s"))
        checks = _checks(k, attempts, lost, want, bound, published)
        resumed = ledger.resumed_from(attempts[k + 1])
        failures.append(
            rows.failure(
                k,
                attempt,
                bound_s=bound,
                resumed_from=resumed,
                steps_lost=lost[k],
                checks=checks,
                saved=_steps_seen(attempt, "saved"),
                published=_steps_seen(attempt, "published"),
            )
        )
    ok = result["completed"] and result["error"] is None and all(all(f["checks"].values()) for f in failures)
    fresh = len(set(result["ports"])) == len(result["ports"])
    return rows.row(
        name,
        ok and fresh and compared["matches"],
        [result["world"]],
        compared=compared,
        launch=result["launch"],
        failures=failures,
        restarts=result["restarts"],
        resumed_from=[f["resumed_from"] for f in failures],
        steps_lost=sum(lost),
        detect_s=max((f["detect_s"] for f in failures if f["detect_s"] is not None), default=None),
        fresh_port_every_attempt=fresh,
        against_control=compared,
        goodput=ledger.goodput(result),
        error=result["error"],
        wall_s=result["wall_s"],
    )


def run(ctx, name: str, faults: tuple, expect: list[dict], **kw) -> dict:
    """Supervise one scenario under ctx.out/name and return its row."""
    result = ctx.supervise(name, faults=faults, **kw)
    return _row(name, result, ctx, expect, group_supervisor.detection_bounds(ctx.timeout))


def kill(rank, phase, step, signal="kill", **extra):
    """A fault for one attempt."""
    return {"rank": rank, "phase": phase, "step": step, "signal": signal, **extra}


def several_failures(ctx) -> dict:
    """Process 1 dies writing an async save, process 0 is killed mid-step, then SIGTERM preempts process 1."""
    faults = (
        kill(1, "save-staged", 6, "die"),  # inside the background write of step 6
        kill(0, "update", 8),  # process 0, the coordinator, after step 8 (inside step 9)
        kill(1, "update", 7, "term"),  # preemption between the saves at 6 and 9: the group agrees on step 8, saves it
    )
    expect = [{"cause": "killed (SIGKILL)"}, {"cause": "killed (SIGKILL)"}, {"cause": "preempted at step 8"}]
    return run(ctx, "several_failures", faults, expect, async_save=True, keep=2)


def launch_paths(ctx) -> dict:
    """The same program launched every way of runtime.LAUNCHES: identical indices, mesh, IDs and loss hash."""
    paths = {}
    for launch in runtime.LAUNCHES:
        outcome = ctx.supervise(f"launch-{launch}", save_every=0, launch=launch, budget=0)
        reports = outcome["attempts"][-1]["reports"]
        paths[launch] = {
            "completed": outcome["completed"],
            "process_ids": sorted(r["process_id"] for r in reports.values() if r),
            "launched_by": sorted({r.get("launched_by") for r in reports.values() if r}),
            "mesh": (reports.get(0) or {}).get("mesh"),
            "ids": [e["ids"] for e in ledger.path(outcome)],
            "loss_hash": _loss_hash(ledger.path(outcome)),
            "against_control": ledger.against_control(outcome, ctx.reference, ctx.steps),
        }
    keys = ("process_ids", "mesh", "ids", "loss_hash")
    same = all(paths["explicit"][k] == found[k] for found in paths.values() for k in keys)
    return rows.row(
        "launch_paths",
        same and all(v["completed"] and v["against_control"]["matches"] for v in paths.values()),
        ["2x2"],
        compared=[v["against_control"] for v in paths.values()],
        paths={k: {**v, "ids": len(v["ids"])} for k, v in paths.items()},
        identical=same,
    )


def _loss_hash(steps: list[dict]) -> str:
    import hashlib

    return hashlib.sha256(",".join(f"{e['loss']:.6e}" for e in steps).encode()).hexdigest()[:16]


def launch_negatives(ctx) -> dict:
    """A missing variable, a wrong task count, a port in use, too few processes: each named, fast.

    Each on the SLURM-style or explicit path and again under mpirun (not started by mpirun,
    `mpirun -n 3` for a launch of 2, the coordinator port taken).
    """
    cases = {}
    env = launcher.environment(launcher.free_port(), 2, 0, 2, "slurm")
    cases["missing_variable"] = _one(ctx, {k: v for k, v in env.items() if k != "SLURM_PROCID"}, "SLURM_PROCID")
    cases["wrong_task_count"] = _one(ctx, {**env, "SLURM_PROCID": "2"}, "outside SLURM_NTASKS=2")
    mpi = launcher.environment(launcher.free_port(), 2, 0, 2, "mpirun")
    cases["mpirun_missing_launcher"] = _one(ctx, mpi, "not started by an MPI launcher")
    cases["mpirun_wrong_task_count"] = _one(ctx, mpi, "mpirun started 3 processes", ranks=3)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        cases["port_in_use"] = _one(ctx, launcher.environment(port, 2, 0, 2, "explicit"), f"port {port}")
        taken = launcher.environment(port, 2, 0, 2, "mpirun")
        cases["mpirun_port_in_use"] = _one(ctx, taken, f"port {port}", ranks=2)
    cases["too_few_processes"] = _one(ctx, env, "did not assemble")
    bound = runtime.init_timeout(ctx.timeout) + 30
    passed = all(c["named"] and c["exit_code"] == 3 and c["wall_s"] <= bound for c in cases.values())
    return rows.row(
        "launch_negatives",
        passed,
        ["2x2"],
        cases=cases,
        bound_s=bound,
        detect_s=max(c["wall_s"] for c in cases.values()),
    )


def _one(ctx, env: dict, expected: str, ranks: int | None = None) -> dict:
    """Start one controller with `env` (or `ranks` of them under mpirun); it must stop with a LaunchError
    whose message contains `expected`, fast."""
    folder = os.path.join(ctx.out, "launch-negatives", f"case-{time.time_ns()}")
    os.makedirs(folder)
    began = time.time()
    args = program.argv(shared=os.path.join(folder, "shared"), out=folder, timeout=ctx.timeout)
    command = [sys.executable, *launcher.PROGRAM, *args]
    quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc = process_group.spawn([launcher.mpiexec(), "-n", str(ranks), *command] if ranks else command, env=env, **quiet)
    deadline = time.monotonic() + runtime.init_timeout(ctx.timeout) + 60
    # the one bounded wait: past the deadline, or once it ends, its whole group (mpiexec's proxies too) is killed
    process_group.until(proc, lambda: "timeout" if time.monotonic() > deadline else None, group_supervisor.POLL)
    ids = range(ranks) if ranks else [runtime.launch_rank(env)]  # under mpirun the first rank to stop ends all
    report = next((r for r in (launcher.report(folder, q) for q in ids) if r and r.get("error")), {})
    error = report.get("error") or {}
    return {
        "exit_code": proc.returncode,
        "error": f"{error.get('type')}: {error.get('message', '')[:240]}",
        "named": error.get("type") == "LaunchError" and expected in error.get("message", ""),
        "wall_s": round(time.time() - began, 2),
    }


OVERHEAD_WORLD = (2, 2)  # the saving comparison's groups: processes, devices each (batches pad to their product)


def warm_steps(steps: list[dict], devices: int) -> list[float]:
    """The seconds of every step whose padded batch shape an earlier step already had: the steps that compile
    (the first of each shape) are left out, so a sample is a step, never a compilation."""
    shapes, warm = set(), []
    for event in steps:
        shape = padded_length(len(event["ids"]), devices)
        if shape in shapes:
            warm.append(event["s"])
        shapes.add(shape)
    return warm


def overhead(ctx, pairs: int = 1) -> dict:
    """Synchronous against asynchronous saving, alternated: median step time, blocking save time and publishing time.

    A synchronous save publishes inside `save`, after the step; an asynchronous one is published at a later step,
    inside it: `step_s` leaves publishing out in both (agreement and update only), `publish_s` times it apart."""
    samples = {m: {"step_s": [], "save_block_s": [], "publish_s": []} for m in ("sync", "async")}
    for i in range(pairs):
        for mode in ("sync", "async") if i % 2 == 0 else ("async", "sync"):
            name = f"overhead-{mode}-{i}"  # each group compiles itself, at every step of a new batch shape
            processes, local = OVERHEAD_WORLD
            result = ctx.supervise(
                name,
                processes=processes,
                local_devices=local,
                save_every=1,
                async_save=mode == "async",
                budget=0,
                cache=None,
            )
            events = ledger.events(result["attempts"][-1])
            steps = [{**e, "s": e["s"] - e.get("publish_s", 0.0)} for e in events if e["event"] == "step"]
            samples[mode]["step_s"] += warm_steps(steps, processes * local)
            samples[mode]["save_block_s"] += [e["block_s"] for e in events if e["event"] == "saved"]
            samples[mode]["publish_s"] += [e["publish_s"] for e in events if e["event"] == "published"]
    import numpy as np

    med = {m: {k: float(np.median(v)) for k, v in s.items()} for m, s in samples.items()}
    return {
        "pairs": pairs,
        "save_every": 1,
        "samples": samples,
        "median": med,
        "blocking_save_ratio_async_over_sync": round(med["async"]["save_block_s"] / med["sync"]["save_block_s"], 3),
        "step_ratio_async_over_sync": round(med["async"]["step_s"] / med["sync"]["step_s"], 3),
        "note": "8 float32 weights: the write itself is tiny, so this measures Orbax's fixed costs on one disk",
    }


def write_fails(ctx) -> dict:
    """Process 1's background write of step 6 fails (ENOSPC inside Orbax's writer thread): the error is
    raised at that process's next wait as a named AsyncSaveError, step 6 never counts, the group restarts."""
    fault = kill(1, "save-begin", 6, "fail")
    expect = [{"cause": "named stop: AsyncSaveError", "bound": "named_s"}]
    return run(ctx, "async_write_fails", (fault,), expect, async_save=True)


def named_stop(ctx) -> dict:
    """Process 1 skips a batch: the group stops itself with a HangError naming it; the supervisor restarts."""
    return run(
        ctx,
        "named_stop",
        (),
        [{"process": None, "cause": "named stop: HangError: process(es) [1] skipped step 2", "bound": "named_s"}],
        skip={"attempt": 0, "rank": 1, "step": 2},
    )


def crash_loop(ctx) -> dict:
    """Process 1 dies at step 2 in every attempt: the restart budget (CRASH_LOOP_BUDGET) ends it, RestartBudgetError."""
    failures = CRASH_LOOP_BUDGET + 1
    result = ctx.supervise("crash_loop", faults=(kill(1, "update", 1, "die"),) * failures, budget=CRASH_LOOP_BUDGET)
    error = result["error"] or {}
    return rows.row(
        "crash_loop",
        error.get("type") == "RestartBudgetError" and result["failures"] == failures and not result["completed"],
        [result["world"]],
        failures=[rows.failure(a["attempt"], a) for a in result["attempts"]],
        restarts=result["restarts"],
        error=error,
        wall_s=result["wall_s"],
    )


def cleanup_killed(ctx) -> dict:
    """Process 0 dies while retention removes an old step (keep 1, asynchronous saves): the newest complete step
    survives the restarted run and is the one step kept."""
    row = run(ctx, "cleanup_killed", (kill(0, "cleanup", 3, "die"),), [{"cause": "killed"}], async_save=True, keep=1)
    shared = os.path.join(ctx.out, "cleanup_killed", "shared")
    root, complete = os.path.join(shared, manifest.ORBAX), manifest.scan(shared)["complete"]
    entries = sorted(os.listdir(root)) if os.path.isdir(root) else []
    newest_kept = bool(complete) and complete[-1] == ctx.steps - ctx.steps % ctx.save_every
    row["shared_after"] = {"complete": complete, "orbax_entries": entries}
    row["newest_complete_survived"] = newest_kept
    row["passed"] = bool(row["passed"] and newest_kept and len(complete) <= 1)
    return row


def _one_fault(name: str, fault: dict, cause: str, **kw) -> tuple:
    """(name, drill(ctx) -> row) of a scenario with one fault, whose failure must name `cause`."""
    return name, lambda ctx: run(ctx, name, (fault,), [{"cause": cause}], **kw)


MPI = {"launch": "mpirun"}  # the same supervision with one mpirun starting the group
FULL = (  # (name, drill(ctx) -> row): `make drills`' supervised set beyond the notebook's
    _one_fault("p0_killed_mid_step", kill(0, "update", 7), "killed (SIGKILL)"),
    _one_fault("p0_frozen", kill(0, "update", 5, "stop"), "frozen"),
    _one_fault("p1_frozen", kill(1, "update", 5, "stop"), "frozen"),
    _one_fault("p0_preempted", kill(0, "update", 4, "term"), "preempted at step 5"),
    _one_fault("p1_preempted", kill(1, "update", 7, "term"), "preempted at step 8"),
    _one_fault("async_kill_staging", kill(1, "save-begin", 6, "die"), "killed", async_save=True),
    _one_fault("async_kill_writing", kill(1, "save-staged", 6, "die"), "killed", async_save=True),
    _one_fault("async_kill_before_manifest", kill(0, "publish", 6, "die"), "killed", async_save=True),
    ("async_write_fails", write_fails),
    ("cleanup_killed", cleanup_killed),
    ("crash_loop", crash_loop),
    _one_fault("mpirun_p1_killed_mid_step", kill(1, "update", 7), "killed", **MPI),
    _one_fault("mpirun_p0_frozen", kill(0, "update", 5, "stop"), "frozen", **MPI),
    _one_fault("mpirun_p1_preempted", kill(1, "update", 7, "term"), "preempted", **MPI),
    ("launch_paths", launch_paths),
    ("launch_negatives", launch_negatives),
)
