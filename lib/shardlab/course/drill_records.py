"""What stage 5a keeps of each drill for its results (the plain fields of its row, kept out of the lesson cells),
and the one table it shows of Drill 1's interruptions."""

import signal

import numpy as np

FAILURE_KEYS = ("process", "phase", "at_step", "kind", "cause", "detect_s", "resumed_from", "steps_lost", "exit_codes")
ATTEMPT_KEYS = ("saved", "published")  # steps the failed attempt saved, and those it saw published


def failures(several: dict) -> tuple[dict, ...]:
    """One dict per failure of the supervised run, in order (the asynchronous kill, process 0's, the preemption)."""
    rows = several["failures"]
    return tuple({**{k: f[k] for k in FAILURE_KEYS}, **{k: f.get(k, []) for k in ATTEMPT_KEYS}} for f in rows)


def supervised(several: dict) -> dict:
    """The supervised run as one continuous path: relaunches, ports, resume points, the control comparison, goodput."""
    keys = ("passed", "restarts", "fresh_port_every_attempt", "resumed_from", "steps_lost", "ids_equal")
    return {
        **{k: several[k] for k in keys},
        "ports": len({f["port"] for f in several["failures"]}) + 1,
        "max_weight_diff": several["max_weight_diff"],
        "max_loss_diff": several["against_control"].get("max_loss_diff"),  # None when the path has a step missing
        "goodput": several["goodput"],
    }


def world(drill: dict) -> dict:
    """The world-size drill: each world's contract verdict and its comparison with the control."""
    keys = ("passed", "world_sizes", "max_weight_diff", "ids_equal", "default_refuses_device_change")
    return {
        **{k: drill[k] for k in keys},
        "runs": {
            r["world"]: {
                "default_contract": r["default_contract"],
                "passed": r["passed"],
                **{k: r["resumed"][k] for k in ("max_weight_diff", "max_loss_diff", "ids_equal", "steps")},
            }
            for r in drill["runs"]
        },
    }


def skipped(drill: dict, timeout_s: float, pulse_window_s: float) -> dict:
    """The skipped-batch drill: when the controllers stopped, whom they named, and each one's error."""
    return {
        **{k: drill[k] for k in ("passed", "detect_s", "skipper", "all_named_skipper")},
        "errors": {pid: f"{e['type']}: {e['message']}" for pid, e in drill["errors"].items()},
        "timeout_s": timeout_s,
        "pulse_window_s": pulse_window_s,
    }


def uninterrupted(base: dict, leave_out=()) -> dict:
    """The group with no fault against the single-process control (`leave_out`: the steps that compiled)."""
    against = base["against_control"][0]
    return {
        "passed": base["passed"],
        "world_sizes": base["world_sizes"],
        **{k: against[k] for k in ("ids_equal", "max_loss_diff", "max_weight_diff")},
        "processes_agree": base["divergence"] is None,
        "complete_steps": base["complete_steps"],
        **save_and_step(base, leave_out),
    }


def save_and_step(base: dict, leave_out=()) -> dict:
    """The group's median step and median save (synchronous: the whole write) over every process, in ms; the
    steps numbered in `leave_out` (those that compiled) are not steps' samples."""
    phases = ("data_s", "agreement_s", "compute_s")
    steps = [
        sum(r[k] for k in phases)
        for records in base["step_times"].values()
        for r in records
        if r["step"] not in leave_out
    ]
    saves = [s for found in base["save_seconds"].values() for s in found or ()]
    return {
        "median_step_ms": 1e3 * float(np.median(steps)),
        "median_save_ms": 1e3 * float(np.median(saves)),
        "saves": len(saves),
        "min_save_ms": 1e3 * float(min(saves)),
        "max_save_ms": 1e3 * float(max(saves)),
        "steps_left_out": sorted(leave_out),
    }


def compiling_steps(seed: int, batch_size: int, steps: int, devices: int) -> list[int]:
    """The steps (numbered from 1) whose batch, padded to a multiple of `devices`, has a shape no earlier step had:
    the steps whose update compiles, as the sampler draws them from the teaching fixture."""
    from shardlab.core.batch import padded_length
    from shardlab.core.fixtures import teaching_fixture
    from shardlab.core.sampler import advance, initial_sampler

    sampler, seen, found = initial_sampler(seed, len(teaching_fixture().targets)), set(), []
    for n in range(1, steps + 1):
        sampler, ids = advance(sampler, batch_size)
        shape = padded_length(len(ids), devices)
        if shape not in seen:
            found.append(n)
        seen.add(shape)
    return found


def require_passed(record: dict, drill: dict) -> None:
    """Stop the notebook with the drill's stop time and each process's error when `record` did not pass."""
    keys = ("all_named_skipper", "stop_after_skip_s", "stopped_within_bound")
    if not record["passed"]:
        raise AssertionError(f"{ {k: drill.get(k) for k in keys} }, exit codes and errors: {drill.get('errors')}")


def summary(result: dict, figure: str) -> dict:
    """The drill report's verdicts, bounds and where its files are."""
    return {
        **{k: result[k] for k in ("all_passed", "timeout_s", "stop_bound_s")},
        "drills_json": "drills.json",
        "figure": figure,
        "rows": {r["drill"]: r["passed"] for r in result["table"]},
    }


# a survivor's exit code (a negative signal number, as subprocess reports it) and what sent it
ENDED_BY = {-signal.SIGKILL: "the supervisor's SIGKILL", -signal.SIGABRT: "JAX's abort (SIGABRT)"}


def interruptions(async_kill: dict, p0_kill: dict, preempt: dict, scheduled: list[int]) -> list[dict]:
    """Drill 1's three interruptions as one table's rows (what, where, what the resume found, so where it resumed,
    what it recomputed, why, what each attempt published), every cell read from the records `failures` returns;
    `scheduled`: the steps the regular saves fall on."""
    survivor = {int(pid): code for pid, code in p0_kill["exit_codes"].items() if int(pid) != p0_kill["process"]}
    ended = "; ".join(f"process {p} ended by {ENDED_BY.get(code, f'exit code {code}')}" for p, code in survivor.items())
    earlier = [n for n in preempt["published"] if n < preempt["resumed_from"]]
    # one save is pending at a time: the newest of `earlier` was published at that agreement, any older before it,
    # so a death before that agreement would have found the newest of those, or where the attempt resumed
    before = max(earlier[:-1], default=p0_kill["resumed_from"])
    kept = (
        "one of the regular saves"
        if preempt["resumed_from"] in scheduled
        else f"no regular save: a death before that agreement would go back to step {before}"
        + (f", step {earlier[-1]} not yet published" if earlier else "")
    )
    pending = f"step {earlier[-1]} here" if earlier else "none here"
    why = {
        "a": "a save is published only once an agreement's flags all say `D`",
        "b": _unpublished(p0_kill, scheduled),
        "c": f"`P` reached all at the next agreement: each published any save still pending ({pending}), then saved "
        f"step {preempt['resumed_from']}, the last step completed before that agreement, and stopped. "
        f"Step {preempt['resumed_from']} is {kept}",
    }
    what = {
        "a": f"process {async_kill['process']} {async_kill['cause']}",
        "b": f"process {p0_kill['process']} {p0_kill['cause']}; {ended}",
        "c": f"SIGTERM: {preempt['cause']}",
    }
    return [
        {
            "": f"({name})",
            "interruption": what[name],
            "after step": f"{row['at_step']}, in `{row['phase']}`",
            "the resume found": found(row),
            "steps recomputed": row["steps_lost"],
            "why": why[name],
            "the attempt published": ", ".join(map(str, row["published"])) or "no step",
        }
        for name, row in zip("abc", (async_kill, p0_kill, preempt))
    ]


def _bare(row: dict) -> list[int]:
    """The steps a failed attempt began to save after its resume point and never published."""
    return [n for n in row["saved"] if n > row["resumed_from"] and n not in row["published"]]


def _unpublished(row: dict, scheduled=()) -> str:
    """Why a failed attempt's saves after its resume point have no manifest, as far as its record tells; with none,
    why the resume lies where it does (`scheduled`: the steps the regular saves fall on)."""
    if not _bare(row):
        later = [n for n in scheduled if n > row["resumed_from"]]
        upcoming = f" (step {later[0]})" if later else ""
        return (
            f"step {row['resumed_from']} was the newest save published and none had begun since: the kill came "
            f"before the next regular save{upcoming}"
        )
    steps = ", ".join(map(str, _bare(row)))
    if row["phase"] == "update":  # the kill came after that step's agreement, and after any publishing it started
        return f"the same rule: no agreement after the step {steps} save found `D` in every controller's flags"
    return f"the same rule: the kill came before step {steps} was published"


def found(row: dict) -> str:
    """What a relaunch found in the shared folder: the newest manifest, and the attempt's writes that have none."""
    bare = _bare(row)
    newest = f"newest manifest: step {row['resumed_from']}" if row["resumed_from"] else "no manifest"
    return newest + (f"; a write of step {', '.join(map(str, bare))} begun, never published" if bare else "")
