"""`python -m shardlab check` as its supervising process sees it: arguments, results, lines and the report.

This module imports no JAX and no check: the supervisor only starts the checking interpreter
(`python -m shardlab.checker`, checker/cli.py), reads its events and prints them, so it starts in a
fraction of the time the checking interpreter needs. checker/cli.py re-exports everything here.
"""

import json
import os
import re
import sys
from dataclasses import asdict, dataclass

import shardlab.checker.causes as causes
import shardlab.checker.watch as watch
from shardlab.checker.guard import CALL_SECONDS, MEMORY_BYTES, NOT_AGAIN
from shardlab.checker.watch import LOG, REPORT
from shardlab.cli import seconds, seed
from shardlab.core.files import sha256_file
from shardlab.errors import ImplementationError
from shardlab.learner import implementation, rules

STAGE_NUMBERS = (1, 2, 3, 4)  # checker/cli.py's STAGES has exactly these keys (a test keeps them equal)
THOROUGH = 8  # --thorough multiplies every property's number of cases by this


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
    causes: tuple = ()  # the ids of the mistakes the diagnosis names (checker/causes.py), most likely first


# A diagnosis marks each rule the mistake it names breaks as `{rule:ID}`; the marks leave the text and become
# the failure's rules, so a failure prints the rules of the mistake, not every rule its check enforces.
RULE_MARK = re.compile(r"\s*\{" + re.escape(rules.MARKER) + r"([a-z0-9-]+)\}")
# It marks each mistake it names as `{cause:ID}` (checker/causes.py) the same way: the marks become its causes.
CAUSE_MARK = re.compile(r"\s*\{" + re.escape(causes.MARKER) + r"([a-z0-9-]+)\}")


def marked_rules(diagnosis: str) -> tuple[str, list[str]]:
    """(the diagnosis without its rule and cause marks, the rule ids it marks, in order, each once)."""
    found = [rule for rule in dict.fromkeys(RULE_MARK.findall(diagnosis)) if rule in rules.BY_ID]
    return CAUSE_MARK.sub("", RULE_MARK.sub("", diagnosis)), found


def marked_causes(diagnosis: str) -> list[str]:
    """The cause ids a diagnosis marks that checker/causes.py holds, in order, each once."""
    return [cause for cause in dict.fromkeys(CAUSE_MARK.findall(diagnosis)) if cause in causes.CAUSES]


def stages_for(stage) -> list[int]:
    """Stages are cumulative: '3' runs 1, 2 and 3; 'all' runs every stage."""
    last = max(STAGE_NUMBERS) if str(stage) == "all" else int(stage)
    if last not in STAGE_NUMBERS:
        raise ValueError(f"stage must be one of {list(STAGE_NUMBERS)} or 'all', got {stage!r}")
    return [s for s in STAGE_NUMBERS if s <= last]


def report(spec: str, results: list, environment: dict | None = None) -> dict:
    """The machine-readable report: every check (Results or their dicts), plus per-stage counts.

    `environment` is the checking interpreter's as it reported it; only None asks this interpreter's (imports JAX).
    """
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
        "environment": environment if environment is not None else here_environment(),
    }


def course_note(course: dict) -> str:
    """The line saying which functions of the file are the course's own code (their checks judge the course)."""
    named = ", ".join(f"{name} ({where})" for name, where in sorted(course.items()))
    return f"not the file's own code: {named}; the checks of these judge the course's functions, not yours"


def here_environment() -> dict:
    import jax  # only the checking interpreter asks (the supervisor's report carries the child's)

    return {"jax": jax.__version__, "devices": len(jax.devices()), "platform": jax.default_backend()}


def describe(result) -> str:
    """One line for a pass; for a failure, also expected, observed and the diagnosis."""
    result = result if isinstance(result, Result) else Result(**result)
    line = f"{'PASS' if result.passed else 'FAIL'}  stage {result.stage}  {result.name}  ({result.seconds:.2f} s)"
    if result.passed:
        return f"{line}  {result.diagnosis}" if result.diagnosis == REUSED else line
    shown = {k: clipped(json.dumps(getattr(result, k))) for k in ("expected", "observed")}
    return (
        f"{line}\n      expected:  {shown['expected']}\n      observed:  {shown['observed']}\n"
        f"      diagnosis: {result.diagnosis}" + rules_line(result)
    )


class Echo:
    """Prints each result as it arrives. A failure whose diagnosis says a stopped function was not called again,
    word for word as an earlier failure's, is held back: the held ones are printed at `close` as one line per
    diagnosis with their count and names (the report keeps every check's diagnosis whole)."""

    def __init__(self, write=print):
        self.write, self.held = write, {}  # diagnosis -> (the check that showed it first, the later ones)

    def __call__(self, result) -> None:
        result = result if isinstance(result, Result) else Result(**result)
        if not result.passed and NOT_AGAIN in result.diagnosis:
            if result.diagnosis in self.held:
                self.held[result.diagnosis][1].append(result)
                return
            self.held[result.diagnosis] = (result.name, [])
        self.write(describe(result), flush=True)

    def close(self) -> None:
        for first, repeats in self.held.values():
            if repeats:
                names = ", ".join(f"{r.name} (stage {r.stage})" for r in repeats)
                self.write(
                    f"FAIL  {len(repeats)} more check(s) with {first}'s diagnosis ({NOT_AGAIN}): {names}", flush=True
                )
        self.held = {}


def clipped(text: str) -> str:
    """`text` whole if it fits SHOWN characters, else cut after its last complete item (never mid-value), with
    how many characters were left out (the report's JSON holds them all)."""
    if len(text) <= SHOWN:
        return text
    cut = text.rfind(", ", 0, SHOWN)
    cut = cut if cut > 0 else SHOWN
    return f"{text[:cut]}, ... ({len(text) - cut} more characters in the report's JSON)"


def failure_rules(result) -> tuple[list[str], str]:
    """(rule ids, whose): the rules of the diagnosed mistake, or the check's own when no diagnosis names any."""
    if result.rules:
        return list(result.rules), "broken by the mistake diagnosed"
    enforced = [rule.id for rule in rules.for_check(result.name)]
    if len(enforced) > 1:  # nothing in the evidence says which of them broke: the line must not suggest one
        return enforced, "enforced by this check; the diagnosis does not say which of them broke"
    return enforced, "enforced by this check"


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


def add_arguments(parser) -> None:
    parser.add_argument("--implementation", default="reference", help="'reference' or a learner's .py file")
    parser.add_argument(
        "--stage",
        default="all",
        choices=[*map(str, STAGE_NUMBERS), "all"],
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
        "--total-seconds", type=seconds, default=watch.Bounds.total_seconds, help="bound of the whole check run"
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
    shown = getattr(args, "echo", None) or Echo()
    found, excerpt = checked(spec, args, shown)
    getattr(shown, "close", lambda: None)()
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
    bounds = getattr(args, "bounds", None) or watch.Bounds(
        total_seconds=getattr(args, "total_seconds", watch.Bounds.total_seconds),
        sandboxed=getattr(args, "sandbox", False),
    )
    extra = ("--seed", str(getattr(args, "seed", SEARCH_SEED))) + ("--thorough",) * bool(getattr(args, "thorough", 0))
    extra += ("--reuse",) * (not getattr(args, "fresh", False))  # check_here (notebooks) never reuses
    if not args.output:
        results, environment, excerpt = watch.temporary_run(
            spec, args.stage, getattr(args, "only", False), echo, bounds, extra
        )
        return report(spec, results, environment), excerpt
    from shardlab import outdir

    with outdir.writing(args.output, "check") as staging:
        results, environment = watch.run(
            spec, args.stage, getattr(args, "only", False), str(staging), echo, bounds, extra
        )
        found = report(spec, results, environment)
        (staging / REPORT).write_text(json.dumps(found, indent=1), encoding="utf-8")
        excerpt = watch.learner_output(str(staging / LOG), keep=True)
    return found, excerpt.replace(str(staging), os.path.abspath(args.output))
