"""Run the stage checks and report them: in this interpreter (`run_checks`) or, from the CLI, in a fresh one.

`python -m shardlab check` starts `python -m shardlab.checker` as a child, so the checks
always run in an interpreter whose first JAX configuration is four CPU devices, however
the calling shell or kernel was set up.
"""

import contextlib
import dataclasses
import json
import time
from dataclasses import asdict

import jax

import shardlab.checker.compile_cache as compile_cache
import shardlab.checker.course_cells as course_cells
import shardlab.checker.diagnoses as diagnoses
import shardlab.checker.early as launching
import shardlab.checker.lanes as side_by_side
import shardlab.checker.provenance as provenance
import shardlab.checker.remote as remote
import shardlab.checker.reuse as reuse_verdicts
import shardlab.checker.seal as seal
import shardlab.checker.search as search
import shardlab.checker.stage1 as stage1
import shardlab.checker.stage2 as stage2
import shardlab.checker.stage3 as stage3
import shardlab.checker.stage4 as stage4
import shardlab.checker.wire as wire
from shardlab.checker.command import (
    REUSED,
    SEARCH_SEED,
    SHOWN,
    Result,
    describe,
    here_environment,
    marked_causes,
    marked_rules,
    stages_for,
)
from shardlab.checker.common import VERDICTS, CheckFailed, Context, Fresh, plain, raised_where
from shardlab.checker.guard import MEMORY_BYTES, Guard, Overrun
from shardlab.core.config import NUM_DEVICES
from shardlab.core.devices import make_mesh
from shardlab.core.fixtures import teaching_fixture
from shardlab.errors import CourseCodeError
from shardlab.learner import implementation
from shardlab.learner.implementation import API

STAGES = {module.STAGE: module for module in (stage1, stage2, stage3, stage4)}


def checks_of(stage: int) -> tuple:
    """The checks of `stage`: its module's, then those covering what the notebooks assert (course_cells)."""
    return STAGES[stage].CHECKS + course_cells.CHECKS.get(stage, ())


def run_one(check, stage: int, ctx: Context) -> Result:
    """Run one check; any failure becomes a Result with expected, observed and a diagnosis."""
    start = time.perf_counter()
    try:
        expected, observed = check(ctx)
        passed, diagnosis = True, ""
    except CheckFailed as failed:
        passed, expected, observed, diagnosis = False, failed.expected, failed.observed, failed.diagnosis
    except Overrun as overrun:
        passed, expected, observed = False, "a call that returns within the bounds", str(overrun)
        diagnosis = str(overrun)
    except NotImplementedError as exc:
        passed, expected, observed = False, "an implementation", f"NotImplementedError: {exc}"
        diagnosis = str(exc) or f"not implemented yet (raised at {raised_where(exc)})"
    except Exception as exc:
        passed, expected, observed = False, "no exception", wire.learner_error(exc, SHOWN)
        where = raised_where(exc)
        diagnosis = f"the implementation raised {type(exc).__name__} at {where}" + diagnoses.explain(exc, where)
        if seal.reached(exc):  # graded, the file called the course's own code (checker/seal.py)
            diagnosis = f"{seal.COURSE_CODE}{seal.reached(exc)} (at {where})"
    named = marked_causes(diagnosis)
    diagnosis, broken = marked_rules(diagnosis)
    return Result(
        check.__name__,
        stage,
        passed,
        plain(expected),
        plain(observed),
        diagnosis,
        round(time.perf_counter() - start, 3),
        tuple(broken),
        tuple(named),
    )


def _load_failure(stage: int, error: dict) -> Result:
    """The verdict of a file that could not be loaded, from what its interpreter said of the error."""
    cause = str(error.get("cause", ""))
    diagnosis = f"the file could not be loaded ({error.get('where')})"
    diagnosis = str(error.get("text", "")) if error.get("known") else diagnosis
    if cause.startswith(f"{CourseCodeError.__name__}: ") and seal.PATTERN.match(cause.partition(": ")[2]):
        diagnosis = f"{seal.COURSE_CODE}{cause.partition(': ')[2]} (at {error.get('where')})"  # graded, on loading
    return Result(
        "implementation_loads",
        stage,
        False,
        "a module defining " + ", ".join(implementation.API),
        cause[:SHOWN],
        diagnosis,
        0.0,
    )


def run_checks(
    spec: str = "reference",
    stage="all",
    only: bool = False,
    skip=(),
    progress=None,
    guard: Guard | None = None,
    search_seed: int = SEARCH_SEED,
    thorough: bool = False,
    search_cases: int = 0,
    reuse: bool = False,
    sandboxed: bool = False,
    memory_bytes: int = MEMORY_BYTES,
    early: launching.Early | None = None,
) -> list[Result]:
    """Check the implementation `spec` ('reference' or a .py path) from this interpreter.

    JAX must already see four CPU devices. The file is never imported here: its functions run in
    another interpreter (checker/remote.py, sandboxed if `sandboxed`), and every verdict is reached
    here from what they return. `only=True` runs just `stage`, not the ones before it; checks named
    in `skip` are left out; `progress(result)` is called after each check. Every call into the
    implementation runs under `guard`'s bounds (a fresh default Guard if None). With `reuse`, a check
    that passed before is not run again when nothing it depends on changed (shardlab.checker.reuse);
    its result says so. `early` holds scratch folders and a first worker started before this
    interpreter imported JAX (checker/early.py); its worker must be the one this run would start. A run of
    more than one stage runs the search of the later stages in a second lane, beside the rest (checker/lanes.py).
    """
    chosen = [int(stage)] if only else stages_for(stage)
    guard = guard or Guard()
    if len(jax.devices()) != 4:
        return [
            Result(
                "four_devices",
                chosen[0],
                False,
                4,
                len(jax.devices()),
                "only "
                f"{len(jax.devices())} device(s) visible -> restart the interpreter and set the device count "
                "before JAX initialises (python -m shardlab check does this for you)",
                0.0,
            )
        ]
    guard.note(event="check", name="implementation_loads", stage=chosen[0])
    results, kept, warming, lanes = [], None, compile_cache.Warming(()), []
    searching = {"search_seed": search_seed, "thorough": thorough, "search_cases": search_cases}
    planned = [(n, c) for n in chosen for c in checks_of(n) if c.__name__ not in skip]
    board = side_by_side.Board([c.__name__ for _, c in planned], progress)
    with launching.scratch(early) as folders, contextlib.ExitStack() as more:
        # the second lane: the search of every stage after the first (the first's sampler walks stay in the first
        # lane, which has half the search's work without them), never a check that shares the run's new interpreter;
        # then the enumerated checks of lanes.AFTER_THE_SEARCH
        searched = {c.__name__ for n in chosen[1:] for c in search.checks_for(n)} - reuse_verdicts.EVERY_FUNCTION
        positions = side_by_side.split(board.planned, searched)
        # each lane its own scratch folders and worker: the first lane's are those made early (or now)
        lanes = [_Lane(spec, guard, memory_bytes, sandboxed, folders, positions[0], 0)]
        try:
            # while the worker starts and loads the file, a core is free: the warming starts now, on every row count
            # the search may draw, and leaves those a kept pass answers once the file's functions are known
            # (a sandboxed worker has a cache of its own, which this interpreter never sees)
            warming = compile_cache.warm(_sizes(chosen, skip, None, searching) if not sandboxed else ())
            hello = lanes[0].impl.worker.start(early.launched if early is not None else None)
            if "error" in hello:
                failed = _load_failure(chosen[0], hello["error"])
                if progress:
                    progress(failed)
                return [failed]
            if spec != "reference":  # read from the source here: nothing the file does can hide it
                guard.note(event="implementation", course_functions=provenance.course_functions(spec))
            kept = reuse_verdicts.Verdicts(searching, hello.get("digests", {}), API) if reuse else None
            warming.leave(set(warming.sizes) - set(_sizes(chosen, skip, kept, searching)))
            for number, group in enumerate(positions[1:], start=1):  # its worker starts at its first call
                lanes.append(
                    _Lane(
                        spec, guard, memory_bytes, sandboxed, more.enter_context(launching.scratch(None)), group, number
                    )
                )
            for lane in lanes:
                lane.begin(
                    Context(lane.tracker, spec, teaching_fixture(), make_mesh(NUM_DEVICES), lane.workdir, **searching),
                    warming,
                    board,
                )
            side_by_side.run(lanes, lambda lane: lane.run(planned, board, skip, kept, guard))
            results = [r for r in board.results if r is not None]
        finally:
            warming.close()
            for lane in lanes:
                lane.close()
            reached = set().union(*(lane.tracker.reached for lane in lanes))
            implementation.note_reached(reached)  # a course run recording what each notebook reaches
    if kept:
        kept.save()
    return results


class _Lane:
    """One lane of a run (checker/lanes.py): its checks, scratch folders, worker, new interpreter and context."""

    def __init__(self, spec, guard: Guard, memory_bytes: int, sandboxed: bool, folders, positions, number: int):
        self.workdir, self.other = folders
        self.positions, self.number, self.started, self.ctx, self.seen = set(positions), number, None, None, None
        note = guard.note if not number else (lambda **event: guard.note(**event, lane=number))

        def worker(fresh: bool = False) -> remote.Worker:
            box, writable = launching.box_for(spec, self.workdir, self.other, sandboxed)
            return remote.Worker(spec, guard.seconds, memory_bytes, box, writable, note, guard.poisoned, fresh)

        self.impl = remote.RemoteImplementation(worker())
        self.tracker = reuse_verdicts.Tracker(self.impl, API)
        self.fresh = Fresh(lambda: worker(fresh=True))

    def begin(self, ctx: Context, warming, board: side_by_side.Board) -> None:
        """Give the lane its context: its own folders, worker, new interpreter and view of the run's verdicts."""
        ctx.other_fs, ctx.warming, ctx.fresh = self.other, warming, self.fresh.get
        ctx.cache[VERDICTS] = self.seen = board.seen()
        self.ctx = ctx

    def run(self, planned: list, board: side_by_side.Board, skip, kept, guard: Guard) -> None:
        """Run the lane's checks of `planned` in order, each verdict posted on `board`."""
        for index, (number, check) in enumerate(planned):
            if index not in self.positions or board.stopped:
                continue
            if number != self.started:  # the new interpreter's start overlaps the stage's first checks
                self.started = number
                mine = {c.__name__ for i, (n, c) in enumerate(planned) if n == number and i in self.positions}
                self.fresh.ahead(_needs_fresh(number, set(skip) | (_names(number) - mine), kept))
            self.seen.at = index
            guard.note(event="check", name=check.__name__, stage=number, lane=self.number)
            board.post(index, _run_or_reuse(check, number, self.ctx, self.tracker, kept))

    def close(self) -> None:
        self.fresh.close()
        self.impl.close()


def _sizes(chosen, skip, kept, searching: dict) -> list[int]:
    """The row counts the run's randomised checks will draw (those a kept pass does not answer), to warm the cache;
    not the teaching fixture's 23, which the enumerated checks give the worker first."""
    left = set(skip) | {c.__name__ for n in chosen for c in checks_of(n) if kept and kept.reusable(c.__name__, API)}
    first = teaching_fixture().features.shape[0]
    return [n for n in search.row_counts(set(chosen), **searching, skip=left) if n != first]


def _names(stage: int) -> set:
    return {c.__name__ for c in checks_of(stage)}


def _needs_fresh(stage: int, skip, kept) -> bool:
    """Whether a check of `stage` will load the file in a new interpreter (one not reused from an earlier pass)."""
    names = {c.__name__ for c in checks_of(stage)} & reuse_verdicts.EVERY_FUNCTION - set(skip)
    return any(not (kept and kept.reusable(name, API)) for name in names)


def _run_or_reuse(check, stage: int, ctx: Context, tracker, kept) -> Result:
    """The kept verdict of `check` if nothing it depends on changed, else a new one (kept if it passes)."""
    if check.__name__ in reuse_verdicts.EVERY_FUNCTION:  # it loads the file in another interpreter
        tracker.reached |= set(API)
    earlier = kept.reusable(check.__name__, tracker.reached) if kept else None
    fields = {f.name for f in dataclasses.fields(Result)}
    if earlier is not None and set(earlier["result"]) == fields:
        tracker.reached |= set(earlier["depends"])
        return Result(**{**earlier["result"], "seconds": 0.0, "diagnosis": REUSED})
    result = run_one(check, stage, ctx)
    if kept:
        kept.keep(check.__name__, asdict(result), tracker.reached)
    return result


def child_main(args, early: launching.Early | None = None) -> int:
    """Body of the child interpreter: run the checks under a Guard, every event on the progress file."""
    guard = Guard(args.progress, args.call_seconds, json.loads(args.poison))
    guard.note(event="start", environment=here_environment())

    def progress(result):
        guard.note(event="result", result=asdict(result))
        if not args.progress:
            print(describe(result), flush=True)

    results = run_checks(
        args.implementation,
        args.stage,
        only=args.only,
        skip=json.loads(args.skip),
        progress=progress,
        guard=guard,
        search_seed=args.seed,
        thorough=args.thorough,
        reuse=args.reuse and not args.sandbox,  # a sandboxed run keeps nothing between runs
        sandboxed=args.sandbox,
        memory_bytes=args.memory_bytes,
        early=early,
    )
    guard.note(event="done")
    return 0 if results and all(r.passed for r in results) else 1
