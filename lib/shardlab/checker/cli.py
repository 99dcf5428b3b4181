"""Run the stage checks and report them: in this interpreter (`run_checks`) or, from the CLI, in a fresh one.

`python -m shardlab check` starts `python -m shardlab.checker` as a child, so the checks
always run in an interpreter whose first JAX configuration is four CPU devices, however
the calling shell or kernel was set up.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import jax

from shardlab.checker import course_cells, stage1, stage2, stage3, stage4
from shardlab.checker.common import CheckFailed, Context, plain, raised_where
from shardlab.checker.here import CHILD_TIMEOUT, REPORT
from shardlab.core.config import NUM_DEVICES
from shardlab.core.devices import make_mesh
from shardlab.core.fixtures import teaching_fixture
from shardlab.errors import ImplementationError
from shardlab.learner import implementation

STAGES = {module.STAGE: module for module in (stage1, stage2, stage3, stage4)}
SHOWN = 400  # characters of expected/observed values printed per line


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
    except NotImplementedError as exc:
        passed, expected, observed = False, "an implementation", f"NotImplementedError: {exc}"
        diagnosis = str(exc) or f"not implemented yet (raised at {raised_where(exc)})"
    except Exception as exc:
        passed, expected, observed = False, "no exception", f"{type(exc).__name__}: {exc}"[:SHOWN]
        diagnosis = f"the implementation raised {type(exc).__name__} at {raised_where(exc)}"
    return Result(
        check.__name__,
        stage,
        passed,
        plain(expected),
        plain(observed),
        diagnosis,
        round(time.perf_counter() - start, 3),
    )


def run_checks(spec: str = "reference", stage="all", only: bool = False, skip=(), progress=None) -> list[Result]:
    """Check the implementation `spec` ('reference' or a .py path) in this interpreter.

    JAX must already see four CPU devices. `only=True` runs just `stage`, not the ones
    before it; checks named in `skip` are left out; `progress(result)` is called after each check.
    """
    chosen = [int(stage)] if only else stages_for(stage)
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
    try:
        impl = implementation.load(spec)
    except Exception as exc:
        cause = exc.__cause__ or exc
        failed = Result(
            "implementation_loads",
            chosen[0],
            False,
            "a module defining " + ", ".join(implementation.API),
            f"{type(cause).__name__}: {cause}"[:SHOWN],
            str(exc) if isinstance(exc, ImplementationError) else f"the file could not be loaded ({raised_where(exc)})",
            0.0,
        )
        if progress:
            progress(failed)
        return [failed]
    results = []
    with tempfile.TemporaryDirectory(prefix="shardlab-check-") as workdir:
        ctx = Context(impl, spec, teaching_fixture(), make_mesh(NUM_DEVICES), workdir)
        for number in chosen:
            for check in (c for c in checks_of(number) if c.__name__ not in skip):
                results.append(run_one(check, number, ctx))
                if progress:
                    progress(results[-1])
    return results


def report(spec: str, results: list[Result]) -> dict:
    """The machine-readable report: every check, plus per-stage counts."""
    stages = sorted({r.stage for r in results})
    return {
        "implementation": spec,
        "passed": all(r.passed for r in results),
        "stages": {
            str(s): {
                "passed": sum(r.passed for r in results if r.stage == s),
                "checks": sum(r.stage == s for r in results),
            }
            for s in stages
        },
        "checks": [asdict(r) for r in results],
        "environment": {"jax": jax.__version__, "devices": len(jax.devices()), "platform": jax.default_backend()},
    }


def write_report(folder: str, content: dict) -> str:
    """Write `content` as folder/check_report.json (the output-folder policy of `shardlab.outdir`); return the path."""
    from shardlab import outdir

    return str(outdir.write_text(folder, "check", REPORT, json.dumps(content, indent=1)))


def describe(result: Result) -> str:
    """One line for a pass; for a failure, also expected, observed and the diagnosis."""
    line = f"{'PASS' if result.passed else 'FAIL'}  stage {result.stage}  {result.name}  ({result.seconds:.2f} s)"
    if result.passed:
        return line
    shown = {k: json.dumps(getattr(result, k))[:SHOWN] for k in ("expected", "observed")}
    return (
        f"{line}\n      expected:  {shown['expected']}\n      observed:  {shown['observed']}\n"
        f"      diagnosis: {result.diagnosis}"
    )


def summary(results: list[Result]) -> str:
    """Per-stage counts and the first failure to fix."""
    lines = [
        f"stage {s}: {c['passed']} of {c['checks']} checks passed" for s, c in report("", results)["stages"].items()
    ]
    failed = [r for r in results if not r.passed]
    lines.append(f"first failure to fix: {failed[0].name} (stage {failed[0].stage})" if failed else "all checks passed")
    return "\n".join(lines)


def child_main(args) -> int:
    """Body of the child interpreter: run, print as it goes, write the report, exit 0 only if all passed."""
    chosen = [int(args.stage)] if args.only else stages_for(args.stage)
    print(f"[shardlab check] implementation {args.implementation}, stage(s) {chosen}", flush=True)
    results = run_checks(
        args.implementation, args.stage, only=args.only, progress=lambda r: print(describe(r), flush=True)
    )
    print(summary(results), flush=True)
    if args.output:
        print(f"report: {write_report(args.output, report(args.implementation, results))}", flush=True)
    return 0 if results and all(r.passed for r in results) else 1


def add_arguments(parser) -> None:
    parser.add_argument("--implementation", default="reference", help="'reference' or a learner's .py file")
    parser.add_argument(
        "--stage",
        default="all",
        choices=[*map(str, sorted(STAGES)), "all"],
        help="last stage to check; earlier stages are always included (default: all)",
    )
    parser.add_argument("--output", default=None, help=f"folder for the JSON report ({REPORT})")
    parser.add_argument("--only", action="store_true", help="check just --stage, not the stages before it")


def main(args) -> int:
    """`python -m shardlab check`: the checks in a fresh interpreter with four CPU devices."""
    spec = args.implementation
    if spec != "reference":
        try:
            spec = implementation.check_path(spec)
        except ImplementationError as exc:
            print(f"[shardlab check] {exc}", file=sys.stderr)
            return 2
    command = [sys.executable, "-m", "shardlab.checker", "--implementation", spec, "--stage", str(args.stage)]
    if args.output:
        from shardlab import outdir
        from shardlab.errors import OutputFolderError

        try:
            outdir.claim(args.output, "check")  # refuse a bad folder before any check runs
        except OutputFolderError as exc:
            print(f"[shardlab check] {exc}", file=sys.stderr)
            return 2
        command += ["--output", os.path.abspath(args.output)]
    if getattr(args, "only", False):
        command.append("--only")
    try:
        return subprocess.run(command, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=CHILD_TIMEOUT).returncode
    except subprocess.TimeoutExpired:
        print(
            f"[shardlab check] the checks did not finish within {CHILD_TIMEOUT} s and were stopped; does the "
            "implementation loop forever?",
            file=sys.stderr,
        )
        return 1
