"""Run the stage checks and report them: in this interpreter (`run_checks`) or, from the CLI, in a fresh one.

`python -m shardlab check` starts `python -m shardlab.checker` as a child, so the checks
always run in an interpreter whose first JAX configuration is four CPU devices, however
the calling shell or kernel was set up.
"""

import dataclasses
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import jax

import shardlab.checker.course_cells as course_cells
import shardlab.checker.provenance as provenance
import shardlab.checker.remote as remote
import shardlab.checker.reuse as reuse_verdicts
import shardlab.checker.sandbox as sandbox
import shardlab.checker.stage1 as stage1
import shardlab.checker.stage2 as stage2
import shardlab.checker.stage3 as stage3
import shardlab.checker.stage4 as stage4
import shardlab.checker.supervise as supervise
from shardlab.checker.common import CheckFailed, Context, other_file_system, plain, raised_where
from shardlab.checker.guard import CALL_SECONDS, MEMORY_BYTES, Guard, Overrun
from shardlab.checker.search import THOROUGH
from shardlab.checker.supervise import LOG, REPORT
from shardlab.cli import seconds, seed
from shardlab.core.config import NUM_DEVICES
from shardlab.core.devices import make_mesh
from shardlab.core.files import sha256_file
from shardlab.core.fixtures import teaching_fixture
from shardlab.errors import ImplementationError
from shardlab.learner import implementation, rules
from shardlab.learner.implementation import API

STAGES = {module.STAGE: module for module in (stage1, stage2, stage3, stage4)}
SHOWN = 400  # characters of expected/observed values printed per line
# the diagnosis of a pass kept from an earlier run (a pass has no diagnosis of its own): the line says so
REUSED = "reused: nothing it depends on changed since it passed (--fresh checks it again)"
SEARCH_SEED = 2026  # the default seed: the same file gets the same verdict; --seed N explores further


@dataclass
class Result:
    """One check's outcome, as written to the JSON report."""

    name: str
    stage: int
    passed: bool
    expected: object
    observed: object
    diagnosis: str
    seconds: float
    rules: tuple = ()  # the rules the diagnosed mistake breaks (empty: the check's own)


# A diagnosis marks each rule the mistake it names breaks as `{rule:ID}`; the marks leave the text and become
# the failure's rules, so a failure prints the rules of the mistake, not every rule its check enforces.
RULE_MARK = re.compile(r"\s*\{" + re.escape(rules.MARKER) + r"([a-z0-9-]+)\}")


def marked_rules(diagnosis: str) -> tuple[str, list[str]]:
    """(the diagnosis without its rule marks, the rule ids it marks, in order, each once)."""
    found = [rule for rule in dict.fromkeys(RULE_MARK.findall(diagnosis)) if rule in rules.BY_ID]
    return RULE_MARK.sub("", diagnosis), found


def stages_for(stage) -> list[int]:
    """Stages are cumulative: '3' runs 1, 2 and 3; 'all' runs every stage."""
    last = max(STAGES) if str(stage) == "all" else int(stage)
    if last not in STAGES:
        raise ValueError(f"stage must be one of {sorted(STAGES)} or 'all', got {stage!r}")
    return [s for s in sorted(STAGES) if s <= last]


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
        passed, expected, observed = False, "no exception", f"{type(exc).__name__}: {exc}"[:SHOWN]
        diagnosis = f"the implementation raised {type(exc).__name__} at {raised_where(exc)}"
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
    )


def _load_failure(stage: int, error: dict) -> Result:
    """The verdict of a file that could not be loaded, from what its interpreter said of the error."""
    return Result(
        "implementation_loads",
        stage,
        False,
        "a module defining " + ", ".join(implementation.API),
        str(error.get("cause", ""))[:SHOWN],
        str(error.get("text", "")) if error.get("known") else f"the file could not be loaded ({error.get('where')})",
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
) -> list[Result]:
    """Check the implementation `spec` ('reference' or a .py path) from this interpreter.

    JAX must already see four CPU devices. The file is never imported here: its functions run in
    another interpreter (checker/remote.py, sandboxed if `sandboxed`), and every verdict is reached
    here from what they return. `only=True` runs just `stage`, not the ones before it; checks named
    in `skip` are left out; `progress(result)` is called after each check. Every call into the
    implementation runs under `guard`'s bounds (a fresh default Guard if None). With `reuse`, a check
    that passed before is not run again when nothing it depends on changed (shardlab.checker.reuse);
    its result says so.
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
    results, kept = [], None
    searching = {"search_seed": search_seed, "thorough": thorough, "search_cases": search_cases}
    with tempfile.TemporaryDirectory(prefix="shardlab-check-") as workdir, other_file_system(workdir) as other:

        def worker() -> remote.Worker:
            readable = [os.path.dirname(spec)] if spec != "reference" else []
            writable = [workdir] + [other] * bool(other)
            box = sandbox.Sandbox(readable=readable, writable=writable) if sandboxed else None
            return remote.Worker(spec, guard.seconds, memory_bytes, box, writable, guard.note, guard.poisoned)

        impl = remote.RemoteImplementation(worker())
        try:
            hello = impl.worker.start()
            if "error" in hello:
                failed = _load_failure(chosen[0], hello["error"])
                if progress:
                    progress(failed)
                return [failed]
            if spec != "reference":  # read from the source here: nothing the file does can hide it
                guard.note(event="implementation", course_functions=provenance.course_functions(spec))
            kept = reuse_verdicts.Verdicts(searching, hello.get("digests", {}), API) if reuse else None
            tracker = reuse_verdicts.Tracker(impl, API)
            ctx = Context(tracker, spec, teaching_fixture(), make_mesh(NUM_DEVICES), workdir, **searching)
            ctx.other_fs = other
            ctx.fresh = lambda: remote.RemoteImplementation(worker())
            for number in chosen:
                for check in (c for c in checks_of(number) if c.__name__ not in skip):
                    guard.note(event="check", name=check.__name__, stage=number)
                    results.append(_run_or_reuse(check, number, ctx, tracker, kept))
                    if progress:
                        progress(results[-1])
        finally:
            impl.close()
    if kept:
        kept.save()
    return results


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


def report(spec: str, results: list, environment: dict | None = None) -> dict:
    """The machine-readable report: every check (Results or their dicts), plus per-stage counts."""
    results = [r if isinstance(r, Result) else Result(**r) for r in results]
    stages = sorted({r.stage for r in results})
    return {
        "implementation": spec,
        "implementation_sha256": sha256_file(spec) if spec not in ("", "reference") and os.path.isfile(spec) else None,
        "passed": all(r.passed for r in results),
        "stages": {
            str(s): {
                "passed": sum(r.passed for r in results if r.stage == s),
                "checks": sum(r.stage == s for r in results),
            }
            for s in stages
        },
        "checks": [asdict(r) for r in results],
        "environment": environment or here_environment(),
    }


def course_note(course: dict) -> str:
    """The line saying which functions of the file are the course's own code (their checks judge the course)."""
    named = ", ".join(f"{name} ({where})" for name, where in sorted(course.items()))
    return f"not the file's own code: {named}; the checks of these judge the course's functions, not yours"


def here_environment() -> dict:
    return {"jax": jax.__version__, "devices": len(jax.devices()), "platform": jax.default_backend()}


def describe(result) -> str:
    """One line for a pass; for a failure, also expected, observed and the diagnosis."""
    result = result if isinstance(result, Result) else Result(**result)
    line = f"{'PASS' if result.passed else 'FAIL'}  stage {result.stage}  {result.name}  ({result.seconds:.2f} s)"
    if result.passed:
        return f"{line}  {result.diagnosis}" if result.diagnosis == REUSED else line
    shown = {k: json.dumps(getattr(result, k))[:SHOWN] for k in ("expected", "observed")}
    return (
        f"{line}\n      expected:  {shown['expected']}\n      observed:  {shown['observed']}\n"
        f"      diagnosis: {result.diagnosis}" + rules_line(result)
    )


def failure_rules(result) -> tuple[list[str], str]:
    """(rule ids, whose): the rules of the diagnosed mistake, or the check's own when no diagnosis names any."""
    if result.rules:
        return list(result.rules), "broken by the mistake diagnosed"
    return [rule.id for rule in rules.for_check(result.name)], "enforced by this check"


def rules_line(result) -> str:
    """The failure's rules line (empty when there are none)."""
    ids, whose = failure_rules(result)
    if not ids:
        return ""
    named = ", ".join(f"{rules.MARKER}{rule}" for rule in ids)
    return f"\n      rules:     {named} ({whose}; stated in the starter, taught in the notebook)"


def summary(results: list[Result]) -> str:
    """Per-stage counts and the first failure to fix."""
    results = [r if isinstance(r, Result) else Result(**r) for r in results]
    lines = [
        f"stage {s}: {c['passed']} of {c['checks']} checks passed" for s, c in report("", results, {})["stages"].items()
    ]
    failed = [r for r in results if not r.passed]
    if not results:
        lines.append("no check ran: the checking interpreter reported no verdict")
    else:
        lines.append(
            f"first failure to fix: {failed[0].name} (stage {failed[0].stage})" if failed else "all checks passed"
        )
    return "\n".join(lines)


def child_main(args) -> int:
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
    )
    guard.note(event="done")
    return 0 if results and all(r.passed for r in results) else 1


def add_arguments(parser) -> None:
    parser.add_argument("--implementation", default="reference", help="'reference' or a learner's .py file")
    parser.add_argument(
        "--stage",
        default="all",
        choices=[*map(str, sorted(STAGES)), "all"],
        help="last stage to check; earlier stages are always included (default: all)",
    )
    parser.add_argument("--output", default=None, help=f"folder for the JSON report ({REPORT}) and {LOG}")
    parser.add_argument("--only", action="store_true", help="check just --stage, not the stages before it")
    parser.add_argument(
        "--seed", type=seed, default=SEARCH_SEED, help=f"seed of the randomised checks (default {SEARCH_SEED})"
    )
    parser.add_argument("--thorough", action="store_true", help=f"a {THOROUGH}x longer randomised search")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="run every check again (by default a check that passed is reused while nothing it depends on changed)",
    )
    add_supervisor_arguments(parser)


def add_supervisor_arguments(parser) -> None:
    """What `python -m shardlab check` adds to the child's arguments: where and how long the children run."""
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="run each checking interpreter in a bubblewrap sandbox (no network, read-only files, own PIDs)",
    )
    parser.add_argument(
        "--total-seconds", type=seconds, default=supervise.Bounds.total_seconds, help="bound of the whole check run"
    )


def add_child_arguments(parser) -> None:
    """What the supervising parent tells a checking interpreter (not for people)."""
    add_arguments(parser)
    parser.add_argument("--progress", default=None, help="JSON-lines file for events (the supervisor reads it)")
    parser.add_argument("--call-seconds", type=seconds, default=CALL_SECONDS)
    parser.add_argument("--memory-bytes", type=int, default=MEMORY_BYTES, help="growth one call may add")
    parser.add_argument("--skip", default="[]", help="JSON list of checks already done")
    parser.add_argument("--poison", default="{}", help="JSON {function: verdict} of functions not to call again")
    parser.add_argument("--reuse", action="store_true", help="reuse kept passes (the command line asks for it)")


def main(args) -> int:
    """`python -m shardlab check`: the checks in supervised fresh interpreters with four CPU devices."""
    spec = args.implementation
    if spec != "reference":
        try:
            spec = implementation.check_path(spec)
        except ImplementationError as exc:
            print(f"[shardlab check] {exc}", file=sys.stderr)
            return 2
    if args.output:
        from shardlab import outdir
        from shardlab.errors import OutputFolderError

        try:
            outdir.claim(args.output, "check")  # refuse a bad folder before any check runs
        except OutputFolderError as exc:
            print(f"[shardlab check] {exc}", file=sys.stderr)
            return 2
    if getattr(args, "sandbox", False):
        import shardlab.checker.sandbox as sandbox

        if why := sandbox.unavailable():
            print(f"[shardlab check] --sandbox: {why}", file=sys.stderr)
            return 2
    only = getattr(args, "only", False)
    chosen = [int(args.stage)] if only else stages_for(args.stage)
    seed, thorough = getattr(args, "seed", SEARCH_SEED), getattr(args, "thorough", False)
    print(
        f"[shardlab check] implementation {spec}, stage(s) {chosen}, search seed {seed}"
        f"{' (thorough)' if thorough else ''} (reproduce with --seed {seed})",
        flush=True,
    )
    shown = getattr(args, "echo", None) or (lambda result: print(describe(result), flush=True))
    found, excerpt = checked(spec, args, shown)
    print(summary(found["checks"]), flush=True)
    if course := found.get("environment", {}).get("course_functions"):
        print(f"[shardlab check] {course_note(course)}", flush=True)
    if excerpt:
        print(excerpt, flush=True)
    if args.output:
        print(f"report: {os.path.join(os.path.abspath(args.output), REPORT)}", flush=True)
    return 0 if found["checks"] and found["passed"] else 1


def checked(spec: str, args, echo) -> tuple[dict, str]:
    """(report, learner-output excerpt): supervised children, the report (and log) kept in --output if given."""
    bounds = getattr(args, "bounds", None) or supervise.Bounds(
        total_seconds=getattr(args, "total_seconds", supervise.Bounds.total_seconds),
        sandboxed=getattr(args, "sandbox", False),
    )
    extra = ("--seed", str(getattr(args, "seed", SEARCH_SEED))) + ("--thorough",) * bool(getattr(args, "thorough", 0))
    extra += ("--reuse",) * (not getattr(args, "fresh", False))  # check_here (notebooks) never reuses
    if not args.output:
        results, environment, excerpt = supervise.temporary_run(
            spec, args.stage, getattr(args, "only", False), echo, bounds, extra
        )
        return report(spec, results, environment), excerpt
    from shardlab import outdir

    with outdir.writing(args.output, "check") as staging:
        results, environment = supervise.run(
            spec, args.stage, getattr(args, "only", False), str(staging), echo, bounds, extra
        )
        found = report(spec, results, environment)
        (staging / REPORT).write_text(json.dumps(found, indent=1), encoding="utf-8")
        excerpt = supervise.learner_output(str(staging / LOG), keep=True)
    return found, excerpt.replace(str(staging), os.path.abspath(args.output))
