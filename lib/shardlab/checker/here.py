"""Check a stage from a notebook cell: the same supervised child-interpreter check as the command line."""

import os
import re
import tempfile

from shardlab.errors import ImplementationError
from shardlab.learner import implementation as _implementation


def searched_checks(stage, only: bool = True) -> list[str]:
    """The names of the randomised checks (the search over the domain) of `stage` (and the stages before it)."""
    from shardlab.checker.command import stages_for
    from shardlab.checker.search import checks_for

    chosen = [int(stage)] if only else stages_for(stage)
    return [check.__name__ for number in chosen for check in checks_for(number)]


def check_here(implementation: str = "reference", stage=1, only: bool = True, search: bool = False) -> dict:
    """Run the checks for `stage` in a fresh, supervised interpreter; print its verdict; return its report.

    The kernel's own JAX setup does not matter: the checks run in a child with four CPU devices,
    exactly as on the command line. `only=True` checks just this stage (quick enough for a cell);
    `only=False` also checks the stages before it. `search=False` runs the stage's enumerated
    checks, each a fixed, deterministic case, and leaves the randomised search over the domain to
    `make check` (the last line says so); `search=True` runs that search here too. It prints each
    failed check in full (expected, observed, diagnosis) and the count of each stage's passed checks,
    with the first failure to fix when one failed; a passed check has no line of its own. The report
    is a dict with `passed`, `stages`, every check's `expected`, `observed` and `diagnosis`, and
    `left_out`: the checks not run here.
    """
    import shardlab.checker.watch as watch
    from shardlab.checker.command import describe, report, summary

    spec = implementation
    if spec not in ("reference", "", None):
        try:
            spec = _implementation.check_path(spec)
        except ImplementationError as exc:
            print(f"[shardlab check] {exc}")
            return {"implementation": implementation, "passed": False, "error": str(exc), "checks": []}
    spec = spec or "reference"

    def shown(result):  # a failure in full, as it comes, without its seconds: a receipt changes only where it should
        if not (result.passed if hasattr(result, "passed") else result["passed"]):
            print(re.sub(r"  \(\d+\.\d+ s\)$", "", describe(result), flags=re.M), flush=True)

    left_out = [] if search else searched_checks(stage, only)
    with tempfile.TemporaryDirectory(prefix="shardlab-check-") as folder:
        results, environment = watch.run(spec, stage, only, folder, shown, skip=left_out)
        excerpt = watch.learner_output(os.path.join(folder, watch.LOG), keep=False)
    found = report(spec, results, environment)
    found["left_out"] = left_out
    lines = summary(found["checks"]).splitlines()
    print("\n".join(lines[:-1] if found["checks"] and found["passed"] else lines))  # all passed: the counts alone
    if left_out:
        target = "" if spec == "reference" else "IMPL=<your file> "  # no path of this machine in a receipt
        print(f"make check {target}STAGE={stage} also searches randomly drawn inputs; this cell does not")
    if excerpt:
        print(excerpt)
    return found
