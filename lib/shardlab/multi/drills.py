"""The stage 5 drills that restart by hand, the series runner, and drills.json.

The drills here, each bounded in time and compared with an uninterrupted control:

1. `kill_during_save`: SIGKILL a controller inside a save, after Orbax finalised the step but
   before the manifest; the step is never accepted; the group restarts from the newest
   complete step and matches the control.
2. `kill_during_step`: SIGKILL a controller inside a step; the survivors stop with an error
   naming it; restart and compare.
3. `world_change`: restore a 2x2 checkpoint on 1x4, 4x1 and 1x2 under the migration contract.
4. `skipped_batch`: one controller skips a batch; everyone stops, naming it.

Every group here runs through `group_supervisor.supervise` with a budget of 0 (the restart is the
drill's own second launch), letting the survivors stop by themselves (`settle`), so their
named errors are the evidence. `run_all(out_dir)` runs them (after one uninterrupted 2x2
group, which also writes the checkpoint drill 3 restores) together with the supervised
scenarios of `scenarios` (every process killed, frozen, preempted; asynchronous saves killed
in each window; a crash loop; launch paths) and writes out_dir/drills.json: one row per drill
of one shape (`rows.row`), `reduced=True` being the set of stage5a_protocol (and stage5b_scaling's
`async_vs_sync`). The torture campaign (rig/torture/multi.py) runs `kill_during_save` with
randomised plans and judges each by its own rule (`restart_ok`, and the interrupted step accepted too once its
manifest was published).
"""

import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass

from shardlab.cli import add_run_arguments, seconds
from shardlab.core import files
from shardlab.core.config import BATCH_SIZE, SEED
from shardlab.errors import ContractMismatchError, UsageError
from shardlab.io import write_json
from shardlab.multi import control, group_supervisor, manifest, migration, rows
from shardlab.multi.wait_guard import EXIT_STOPPED, TIMEOUT

STEPS, SAVE_EVERY = 10, 3  # 23 rows in batches of 7: 10 steps cross two epoch boundaries
STOP_BOUND = 60.0  # seconds within which survivors must stop by themselves
WORLDS = ((1, 4), (4, 1), (1, 2))  # drill 3: restored by these (processes, devices per process)
NOTEBOOK_WORLDS = ((1, 4), (1, 2))  # the notebook's (make test's) reduced set: 4 processes on 2 cores is slow
COMPILATION_CACHE = ".compilation-cache"  # in a series' work folder: the JAX cache its later groups share


@dataclass
class Context:
    """Where a series of drills writes, its parameters and the single-process control."""

    out: str
    seed: int
    batch_size: int
    timeout: float
    reference: dict
    steps: int = STEPS  # every group of the series trains this many steps
    save_every: int = SAVE_EVERY
    shares_compiled: bool = False  # a series of `begin`: its groups share a compilation cache (`cache`)
    temporary: bool = False  # a work folder of `begin` inside out_dir, removed with the series

    @property
    def cache(self) -> str | None:
        """The compilation cache the series' groups share: a program one group compiled, a later one loads.

        The groups whose step times show compilation (the uninterrupted group, the save-cost pair) pass
        `cache=None` and compile everything themselves. `finish` and `discard` remove it with the series.
        None for a bare `context` (every group compiles alone; nothing is left in its folder).
        """
        return os.path.join(self.out, COMPILATION_CACHE) if self.shares_compiled else None

    def supervise(self, name: str, **kw) -> dict:
        """A supervised run under out/name (its checkpoints in out/name/shared) with this context's parameters."""
        kw.setdefault("save_every", self.save_every)
        kw.setdefault("cache", self.cache)
        kw.setdefault("shared", os.path.join(self.out, name, "shared"))
        return group_supervisor.supervise(
            os.path.join(self.out, name, "supervised"),
            kw.pop("shared"),
            steps=self.steps,
            seed=self.seed,
            batch_size=self.batch_size,
            timeout=self.timeout,
            **kw,
        )

    def launch(self, name: str, shared: str, processes: int = 2, local_devices: int = 2, **kw) -> dict:
        """One plain group (budget 0) whose survivors may stop by themselves: its attempt record."""
        result = self.supervise(
            name, shared=shared, processes=processes, local_devices=local_devices, budget=0, settle=STOP_BOUND, **kw
        )
        return {**result["attempts"][0], "world": result["world"], "processes": processes}


def context(out_dir, seed: int = SEED, batch_size: int = BATCH_SIZE, timeout: float = TIMEOUT) -> Context:
    """A fresh drill folder and the control run (computed here, in one process, four devices)."""
    out = os.path.abspath(os.fspath(out_dir))
    os.makedirs(out, exist_ok=True)
    return Context(out, seed, batch_size, float(timeout), control.run(seed, batch_size, STEPS))


def _killed(outcome: dict) -> dict | None:
    """The signal the supervisor sent in this attempt ({rank, time, after_exit, ...}), or None."""
    injected = outcome["event"].get("injected")
    return injected if injected and "after_exit" in injected else None


def _stops(outcome: dict, since: float) -> dict:
    """Seconds from `since` until each process that was not killed exited."""
    victim = (_killed(outcome) or {}).get("rank")
    return {pid: round(t - since, 2) for pid, t in outcome["exit_times"].items() if pid != victim}


def _stopped_naming(outcome: dict, pid: int, found: dict, kind: str, process: int) -> bool:
    """Process `pid` stopped itself with `kind` naming `process`.

    Its report must name the error. Its exit is a named stop, or — for a process other than 0 —
    JAX's abort (SIGABRT) after process 0, which hosts the coordination service, had already
    stopped: the named stop was written first, and the abort is JAX ending a client whose
    coordinator is gone (the same abort the coordinator drill shows), not a second failure.
    """
    named = found.get(pid, {}).get("type") == kind and f"[{process}]" in found[pid]["message"]
    code, times = outcome["exit_codes"][pid], outcome["exit_times"]
    if code == EXIT_STOPPED:
        return named
    after_coordinator = pid != 0 and 0 in times and pid in times and times[0] <= times[pid]
    return named and code == -signal.SIGABRT and after_coordinator and outcome["exit_codes"][0] == EXIT_STOPPED


def _named(outcome: dict, kind: str, process: int) -> bool:
    """Every process that was not killed stopped itself with `kind` naming `process`."""
    victim = (_killed(outcome) or {}).get("rank")
    others = [pid for pid in range(outcome["processes"]) if pid != victim]
    found = control.errors(outcome)
    return bool(others) and all(_stopped_naming(outcome, pid, found, kind, process) for pid in others)


def _completed(outcome: dict) -> bool:
    return outcome["event"]["kind"] == "complete"


def _kill_and_restart(ctx: Context, name: str, fault: dict) -> dict:
    """Kill at a fault point, read what is complete, restart the whole group, compare with the control."""
    began = time.time()
    shared = os.path.join(ctx.out, name, "shared")
    first = ctx.launch(f"{name}/interrupted", shared, faults=(fault,))
    killed = _killed(first)
    stops = _stops(first, killed["time"]) if killed else {}
    found = manifest.scan(shared)
    accepted = found["complete"][-1] if found["complete"] else None
    second = ctx.launch(f"{name}/restarted", shared, resume="latest")
    report = second["reports"].get(0) or {}
    resumed = control.compare(report, ctx.reference)
    restored = (
        control.state_matches(report.get("restored"), ctx.reference["states"][accepted])
        if accepted is not None
        else {"matches": False, "reason": "no complete step"}
    )
    detect = max(stops.values()) if stops else None
    return rows.row(
        "",
        False,
        [first["world"], second["world"]],
        compared=resumed,
        failures=[rows.failure(0, first, resumed_from=report.get("resumed_from"))],
        detect_s=detect,
        restarts=1,
        resumed_from=report.get("resumed_from"),
        victim=fault["rank"],
        fault={k: fault[k] for k in ("rank", "phase", "step")},
        kill_delay_s=fault.get("delay", 0.0),
        killed=killed is not None,
        kill_landed=bool(killed and not killed.get("after_exit")),  # False: the run had already finished
        survivor_errors=control.errors(first),
        survivors_named_victim=_named(first, "LostProcessError", fault["rank"]),
        survivor_exit_codes={p: c for p, c in first["exit_codes"].items() if p != fault["rank"]},
        stop_after_kill_s=stops,
        stopped_within_bound=bool(killed and stops and detect <= STOP_BOUND),
        complete_steps=found["complete"],
        ignored=found["ignored"],
        accepted_step=accepted,
        set_aside=report.get("set_aside", []),
        restored_equals_control=restored,
        resumed=resumed,
        restart_completed=_completed(second),
        restart_divergence=second["divergence"],
        final_weights=(report.get("final") or {}).get("weights"),
        wall_s=round(time.time() - began, 2),
    )


def restart_ok(result: dict) -> bool:
    """The kill landed, the survivors stopped within the bound, and the restart resumed from the accepted step and
    matched the control to the end."""
    return bool(
        result["killed"]
        and result["stopped_within_bound"]
        and result["resumed_from"] == result["accepted_step"]
        and result["restored_equals_control"]["matches"]
        and result["resumed"]["matches"]
        and result["restart_completed"]
        and result["restart_divergence"] is None
    )


def kill_during_save(ctx: Context, name: str, plan: dict) -> dict:
    """Drill 1: SIGKILL `plan["victim"]` at `plan["phase"]` of the save of `plan["save_step"]`; restart, compare.

    Passed: only the step before the interrupted one is accepted, and the survivors name the victim.
    """
    fault = {"rank": plan["victim"], "phase": plan["phase"], "step": plan["save_step"], "signal": "kill"}
    fault.update(hold=plan["hold"], delay=plan.get("delay", 0.0))
    result = _kill_and_restart(ctx, name, fault)
    step = plan["save_step"]
    result["interrupted_step"] = step
    result["interrupted_step_accepted"] = step in result["complete_steps"]
    result["passed"] = bool(
        restart_ok(result) and result["accepted_step"] == step - SAVE_EVERY and result["survivors_named_victim"]
    )
    return {**result, "drill": "kill_during_save"}


def kill_during_step(ctx: Context, victim: int = 1, step: int = 7) -> dict:
    """Drill 2: SIGKILL `victim` inside step `step` (after agreement, before its all-reduce)."""
    result = _kill_and_restart(ctx, "2-kill-step", {"rank": victim, "phase": "update", "step": step, "signal": "kill"})
    expected = (step // SAVE_EVERY) * SAVE_EVERY
    result["passed"] = bool(
        restart_ok(result) and result["survivors_named_victim"] and result["accepted_step"] == expected
    )
    return {**result, "drill": "kill_during_step"}


def uninterrupted(ctx: Context) -> dict:
    """The 2x2 group with no fault: same IDs, losses and weights as the single-process control."""
    shared = os.path.join(ctx.out, "0-uninterrupted", "shared")
    outcome = ctx.launch("0-uninterrupted/group", shared, cache=None)  # its step times show the compiling steps
    compared = {pid: control.compare(r, ctx.reference) for pid, r in outcome["reports"].items()}
    return {
        "world_sizes": [outcome["world"]],
        "completed": _completed(outcome),
        "divergence": outcome["divergence"],
        "against_control": compared,
        "complete_steps": manifest.scan(shared)["complete"],
        "step_times": {pid: r.get("step_times") for pid, r in outcome["reports"].items()},
        "save_seconds": {pid: r.get("save_seconds") for pid, r in outcome["reports"].items()},  # synchronous: the write
        "worlds": {pid: {"world": r.get("world"), "mesh": r.get("mesh")} for pid, r in outcome["reports"].items()},
        "final_weights": ((outcome["reports"].get(0) or {}).get("final") or {}).get("weights"),
        "passed": _completed(outcome)
        and outcome["divergence"] is None
        and all(c["matches"] for c in compared.values()),
        "shared": shared,
        "wall_s": round(time.time() - outcome["launched"], 2),
    }


def _default_contract(record: dict, wanted: dict) -> str:
    """What the default contract says of restoring `record` under `wanted`: 'accepts' or 'refuses: <field line>'."""
    try:
        migration.check(record["contract"], wanted)
        return "accepts"
    except ContractMismatchError as exc:
        lines = [line.strip() for line in str(exc).splitlines()]
        return "refuses: " + next((line for line in lines if migration.FIELD in line), lines[-1])


def _restore_on(ctx: Context, writer_shared: str, record: dict, from_step: int, world: tuple) -> dict:
    """One world of drill 3: restore `from_step` with `world` (processes, devices each) and train to the end."""
    import shardlab as sl

    processes, local_devices = world
    wanted = sl.contract(
        sl.teaching_fixture(), sl.Config(ctx.seed, ctx.batch_size, num_devices=processes * local_devices)
    )
    default = _default_contract(record, wanted)
    outcome = ctx.launch(
        f"3-world/{processes}x{local_devices}",
        writer_shared,
        processes,
        local_devices,
        resume=str(from_step),
        migrate=True,
        save_every=0,
    )
    report = outcome["reports"].get(0) or {}
    compared = control.compare(report, ctx.reference)
    restored = control.state_matches(report.get("restored"), ctx.reference["states"][from_step])
    ok = _completed(outcome) and outcome["divergence"] is None and restored["matches"] and compared["matches"]
    return {
        "world": outcome["world"],
        "devices": processes * local_devices,
        "default_contract": default,
        "migration": report.get("migration"),
        "completed": _completed(outcome),
        "divergence": outcome["divergence"],
        "restored_equals_control": restored,
        "resumed": compared,
        "final_weights": (report.get("final") or {}).get("weights"),
        "passed": bool(ok),
        "wall_s": round(time.time() - outcome["launched"], 2),
    }


def world_change(ctx: Context, writer_shared: str, from_step: int = SAVE_EVERY, worlds=WORLDS) -> dict:
    """Drill 3: restore `from_step` written by 2x2 on each of `worlds`, under the migration contract."""
    began, record = time.time(), manifest.read(writer_shared, from_step)
    runs = [_restore_on(ctx, writer_shared, record, from_step, world) for world in worlds]
    refuses = all(r["default_contract"].startswith("refuses") == (r["devices"] != 4) for r in runs)
    return rows.row(
        "world_change",
        refuses and all(r["passed"] for r in runs),
        ["2x2"] + [r["world"] for r in runs],
        compared=[r["resumed"] for r in runs],
        written_by=record["writer_world"],
        from_step=from_step,
        runs=runs,
        default_refuses_device_change=refuses,
        wall_s=round(time.time() - began, 2),
    )


def skipped_batch(ctx: Context, rank: int = 1, step: int = 2) -> dict:
    """Drill 4: `rank` consumes the batch of `step` without its update; every controller stops, naming it."""
    began = time.time()
    shared = os.path.join(ctx.out, "4-skip", "shared")
    outcome = ctx.launch("4-skip/group", shared, skip={"attempt": 0, "rank": rank, "step": step})
    skipped = ((outcome["reports"].get(rank) or {}).get("skipped")) or {}
    stops = _stops(outcome, skipped["time"]) if skipped else {}
    before = control.compare(outcome["reports"].get(0), ctx.reference, need_final=False)
    named = _named(outcome, "HangError", rank)
    within = bool(stops and max(stops.values()) <= STOP_BOUND)
    return rows.row(
        "skipped_batch",
        named and within and before["matches"],
        [outcome["world"]],
        compared=before,
        failures=[rows.failure(0, outcome, victim=rank, phase="skip", at_step=step, signal="skip")],
        detect_s=max(stops.values()) if stops else None,
        skipper=rank,
        skipped_step=step,
        errors=control.errors(outcome),
        all_named_skipper=named,
        stop_after_skip_s=stops,
        stopped_within_bound=within,
        before_stop=before,
        wall_s=round(time.time() - began, 2),
    )


def announce(text: str) -> None:
    """One short progress line (drills take seconds each; a reader sees which one runs)."""
    print(f"[drills] {text}", flush=True)


WORK_PREFIX = ".drills-work-"  # + pid + random: a drill series' work folder inside out_dir


def _remove_left_work(out_dir) -> None:
    """Remove work folders that an earlier series left in out_dir (a failed cell, a killed kernel).

    Only ours by name, and only when their process is gone or is this one (a kernel re-running
    the notebook after a failed cell): a series still running elsewhere keeps its folder.
    """
    files.remove_stale(out_dir, prefix=WORK_PREFIX, folders=True, own=True)


def begin(seed: int = SEED, batch_size: int = BATCH_SIZE, timeout: float = TIMEOUT, work=None, out_dir=None) -> Context:
    """A drill series in `work`, or in a work folder inside `out_dir` that `finish` removes.

    Nothing is written outside the folder given (`python -m shardlab drills` passes a staging
    folder of the output-folder policy, `shardlab.outdir`); UsageError if neither is given.
    """
    temporary = work is None
    if temporary and out_dir is None:
        raise UsageError("drills.begin needs a folder: work= to keep the series there, or out_dir= to work inside it")
    if temporary:
        os.makedirs(out_dir, exist_ok=True)
        _remove_left_work(out_dir)
        work = files.temporary_dir(out_dir, prefix=WORK_PREFIX)
    ctx = context(os.path.abspath(work), seed, batch_size, timeout)
    ctx.temporary, ctx.shares_compiled = temporary, True
    return ctx


def timed(name: str, fn, *args, verdict: bool = True, progress=None, **kw) -> dict:
    """Run one drill with a start and an end line (the verdict left out where a prediction waits).

    The lines go to `progress` (a callable taking one line; default: printed as `[drills] ...`).
    """
    line = progress or announce
    line(f"{name} ...")
    began = time.time()
    row = fn(*args, **kw)
    if row.get("wall_s") is None:
        row["wall_s"] = round(time.time() - began, 2)
    line(f"{name}: " + (f"passed={row['passed']} " if verdict else "done ") + f"in {time.time() - began:.1f} s")
    return row


def finish(ctx: Context, out_dir, found: list, extra: dict, keep: bool = False) -> dict:
    """Write out_dir/drills.json (no machine paths) from every row; remove a temporary work folder."""
    os.makedirs(out_dir, exist_ok=True)
    result = {
        "seed": ctx.seed,
        "batch_size": ctx.batch_size,
        "steps": STEPS,
        "save_every": SAVE_EVERY,
        "timeout_s": ctx.timeout,
        "stop_bound_s": STOP_BOUND,
        **extra,
        "drills": found,
        "table": [rows.table(r) for r in found],
        "all_passed": bool(all(r["passed"] for r in found) and extra.get("uninterrupted", {}).get("passed", True)),
    }
    text = json.dumps(result, default=str).replace(ctx.out, "drills" if keep else "<temporary drills folder>")
    result = json.loads(text)
    write_json(os.path.join(out_dir, "drills.json"), result)
    discard(ctx, keep)
    return result


def discard(ctx: Context, keep: bool = False) -> None:
    """Remove the series' compilation cache (compiled programs, never evidence) and, unless `keep`, a temporary
    work folder of `begin`; called alone, a series that only measures ends without a drills.json."""
    if ctx.cache:
        shutil.rmtree(ctx.cache, ignore_errors=True)
    if ctx.temporary and not keep:
        shutil.rmtree(ctx.out, ignore_errors=True)


def run_all(
    out_dir,
    seed: int = SEED,
    batch_size: int = BATCH_SIZE,
    timeout: float = TIMEOUT,
    keep: bool = False,
    reduced: bool = False,
) -> dict:
    """The uninterrupted group and every drill (`reduced`: the notebook's set); writes out_dir/drills.json.

    Checkpoints and per-process logs go to out_dir/drills when `keep`, else to a work folder
    inside out_dir removed afterwards (drills.json holds every number and error message).
    Nothing is written outside out_dir.
    """
    from shardlab.multi import scenarios

    began = time.time()
    ctx = begin(seed, batch_size, timeout, os.path.join(out_dir, "drills") if keep else None, out_dir=out_dir)
    try:
        base = timed("uninterrupted", uninterrupted, ctx)
        found = [timed("several_failures", scenarios.several_failures, ctx)]
        if not reduced:
            plan = {"save_step": 2 * SAVE_EVERY, "phase": "save-written", "hold": True, "victim": 1}
            found += [timed("kill_during_save", kill_during_save, ctx, "1-kill-save", plan)]
            found += [timed("kill_during_step", kill_during_step, ctx)]
        found += [
            timed("world_change", world_change, ctx, base["shared"], worlds=NOTEBOOK_WORLDS if reduced else WORLDS)
        ]
        found += [timed("skipped_batch", skipped_batch, ctx)]
        if not reduced:
            found += [timed("named_stop", scenarios.named_stop, ctx)]
            found += [timed(name, fn, ctx) for name, fn in scenarios.FULL]
        cost = timed("async_vs_sync", lambda c: {"passed": True, **scenarios.overhead(c, 1 if reduced else 3)}, ctx)
    except BaseException:
        discard(ctx)
        raise
    base.pop("shared")
    extra = {"uninterrupted": base, "async_vs_sync": cost, "reduced": reduced, "wall_s": round(time.time() - began, 2)}
    return finish(ctx, out_dir, found, extra, keep)


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="drills_out", help="folder for drills.json and every group's reports")
    add_run_arguments(parser)
    parser.add_argument("--timeout", type=seconds, default=TIMEOUT, help="bound of every wait, seconds")
    parser.add_argument("--keep", action="store_true", help="keep checkpoints and process logs in OUT/drills")
    parser.add_argument("--reduced", action="store_true", help="only the stage 5 notebook's set (as make test)")


def main(args) -> int:
    from shardlab import outdir
    from shardlab.errors import OutputFolderError
    from shardlab.multi import figure

    try:
        with outdir.writing(args.out, "drills") as staging:  # writes only inside OUT, replaces only its own files
            result = run_all(
                staging, args.seed, args.batch_size, args.timeout, args.keep, getattr(args, "reduced", False)
            )
            figure.draw(result, os.path.join(staging, "stage5_goodput.png"))
    except OutputFolderError as exc:
        print(f"[drills] {exc}", file=sys.stderr)
        return 1
    for row in result["table"]:
        detect = "-" if row["detect_s"] is None else f"{row['detect_s']:.2f}"
        dw = "-" if row["max_weight_diff"] is None else f"{row['max_weight_diff']:.1e}"
        print(
            f"[drills] {row['drill']:<27} passed={row['passed']!s:<5} detect_s={detect:>6} max|dw|={dw} "
            f"resumed_from={row['resumed_from']} lost={row['steps_lost']}"
        )
    failed = [row["drill"] for row in result["table"] if not row["passed"]]
    print(
        f"[drills] all passed: {result['all_passed']} in {result['wall_s']} s (failed: {failed or 'none'}); "
        f"{os.path.join(args.out, 'drills.json')}"
    )
    return 0 if result["all_passed"] else 1
