"""The stage 5 runbook: one row per failure class the drills cover, each proved by named drill rows.

Every row says what sees the failure (detector), which component acts on it (owner), what it does
(mitigation), when the group must stop (stop condition; the bounds are
`group_supervisor.detection_bounds`) and which rows of a drills.json prove it. docs/stage5.md shows
it as a table (tests/test_scaling_runbook.py renders it and checks the page), the stage5b_scaling
notebook as one entry per failure class (`entries`); `proof` sets it beside a drills.json (the one
stage5a_protocol wrote). The notebooks run the reduced drill set, `make drills` every row named
here.
"""

from shardlab.multi import group_supervisor, runtime, scenarios, wait_guard

ROWS = (
    {
        "class": "death",
        "failure": "death (a controller killed or crashed, process 0 included)",
        "detector": "supervisor: a non-zero exit code at its next poll (every 0.05 s); survivors' guards name a "
        "lost peer (LostProcessError) if they reach a bounded wait first",
        "owner": "supervisor",
        "mitigation": "SIGKILL every process group of the attempt, relaunch the whole group on a fresh coordinator "
        "port from the newest step whose manifest verifies; the steps after it are recomputed",
        "stop": "designed bound, its time not shown here: detected within {death_s} s (an exit is seen at the next "
        "poll, every {poll_s} s; the bound allows {death_polls} polls, for a loaded machine); a relaunch that fails "
        "again counts against the restart budget",
        "drills": ("several_failures", "kill_during_step", "p0_killed_mid_step", "mpirun_p1_killed_mid_step"),
    },
    {
        "class": "freeze",
        "failure": "freeze (alive but making no progress: SIGSTOP, a wedged interpreter)",
        "detector": "supervisor: the process's pulse file, rewritten every 0.5 s by its own thread, unchanged for 5 s",
        "owner": "supervisor",
        "mitigation": "SIGKILL the group (a stopped process cannot handle SIGTERM) and relaunch from the newest "
        "complete step",
        "stop": "detected within {freeze_s} s (5 s unchanged, plus a pulse and two polls), below the heartbeat "
        "timeout each controller passes to `jax.distributed.initialize` (`heartbeat_timeout_seconds`, {heartbeat_s} s)",
        "drills": ("p0_frozen", "p1_frozen", "mpirun_p0_frozen"),
    },
    {
        "class": "skipped batch",
        "failure": "skipped batch, so a missed all-reduce (the others would wait forever)",
        "detector": "every controller's guard: the per-step agreement is not complete within the bound; the pulses "
        "(all alive) and the published steps name the controller that skipped (HangError)",
        "owner": "the controllers stop themselves, named; the supervisor relaunches the group",
        "mitigation": "never continue the group; restart it whole from the newest complete step and fix the "
        "controller that skipped (no update of the skipped step ran anywhere)",
        "stop": "within {named_s} s: the bound ({timeout_s} s), the pulse check ({pulse_s} s), 2 s to report",
        "drills": ("skipped_batch", "named_stop"),
    },
    {
        "class": "preemption",
        "failure": "preemption (SIGTERM from the job manager)",
        "detector": "the controller's SIGTERM handler sets a flag that the next step's agreement carries to all",
        "owner": "the controllers agree on the step, save and publish it, exit 'preempted at step N'; the "
        "supervisor relaunches without counting a failure",
        "mitigation": "resume from the agreed step: no step is lost",
        "stop": "one step after the signal, every controller at the same step",
        "drills": ("several_failures", "p0_preempted", "p1_preempted", "mpirun_p1_preempted"),
    },
    {
        "class": "write failure",
        "failure": "background checkpoint write fails (asynchronous save, e.g. a full disk)",
        "detector": "the failed controller's store check at its next step or save raises AsyncSaveError",
        "owner": "that controller stops, named; the supervisor relaunches",
        "mitigation": "the step never gets a manifest, so 'latest' stays the previous complete step; check the "
        "storage before the next save window",
        "stop": "at the failed controller's next step, within {named_s} s",
        "drills": ("async_write_fails",),
    },
    {
        "class": "crash loop",
        "failure": "crash loop (the same failure in every attempt)",
        "detector": "supervisor: failures counted across attempts (preemptions excluded)",
        "owner": "supervisor",
        "mitigation": "stop relaunching and raise RestartBudgetError naming every attempt's cause; a person fixes "
        "the cause (code, data, host) before the next launch",
        "stop": "more failures than the restart budget ({budget} by default; {crash_loop_budget} in the crash-loop "
        "drill, which the stage 5 notebooks do not run)",
        "drills": ("crash_loop",),
    },
)


def rows(timeout: float) -> list[dict]:
    """The runbook with its stop conditions' bounds filled in for `timeout` (seconds of every guard's wait)."""
    bounds = {**group_supervisor.detection_bounds(timeout), "crash_loop_budget": scenarios.CRASH_LOOP_BUDGET}
    bounds.update(timeout_s=timeout, pulse_s=wait_guard.PULSE_WINDOW)  # the skipped batch's stop, in parts
    bounds["heartbeat_s"] = runtime.heartbeat_seconds(timeout)  # each controller's jax.distributed.initialize
    bounds.update(poll_s=group_supervisor.POLL, budget=group_supervisor.BUDGET)
    bounds["death_polls"] = round(bounds["death_s"] / group_supervisor.POLL)  # the death bound, in polls
    return [{**row, "stop": row["stop"].format(**bounds)} for row in ROWS]


def proof(drills_json: dict) -> list[dict]:
    """Per runbook row: each named drill's verdict in `drills_json` (True, False, or None: not in this report)."""
    passed = {row["drill"]: bool(row["passed"]) for row in drills_json.get("table", [])}
    return [{"class": row["class"], "drills": {d: passed.get(d) for d in row["drills"]}} for row in ROWS]


def entries(timeout: float, drills_json: dict | None = None, ran_in: str = "stage 5a", unrun: bool = True) -> str:
    """The runbook for a notebook: one narrow table row per failure class (failure, owner, stop condition, the
    drills of `drills_json` with their verdicts, under `ran_in`, the notebook that ran them, then by name the drills
    only `make drills` runs, unless `unrun` is False). A row none of whose drills ran shows its stop condition as a
    designed bound."""
    last = " not run here (`make drills` runs them) |" if unrun else ""
    table = [
        f"| failure | owner | stop condition | drills run in {ran_in} |{last}",
        "| --- | --- | --- | --- |" + (" --- |" if unrun else ""),
    ]
    verdicts = proof(drills_json) if drills_json else [{"drills": dict.fromkeys(row["drills"])} for row in ROWS]
    for row, proved in zip(rows(timeout), verdicts):
        ran = ", ".join(f"`{d}` ({'passed' if v else 'FAILED'})" for d, v in proved["drills"].items() if v is not None)
        left = ", ".join(f"`{d}`" for d, v in proved["drills"].items() if v is None)
        stop = row["stop"] if ran else f"designed bound, not observed in {ran_in}: {row['stop']}"
        table.append(
            f"| {row['class']} | {row['owner']} | {stop} | {ran or 'none'} |"
            + (f" {left or 'none'} |" if unrun else "")
        )
    return "\n".join(table)
