"""Check a stage from a notebook cell: the same supervised child-interpreter check as the command line."""

import re

from shardlab.errors import ImplementationError
from shardlab.learner import implementation as _implementation


def check_here(implementation: str = "reference", stage=1, only: bool = True) -> dict:
    """Run the checks for `stage` in a fresh, supervised interpreter; print its lines; return its report.

    The kernel's own JAX setup does not matter: the checks run in a child with four CPU devices,
    exactly as on the command line. `only=True` checks just this stage (quick enough for a cell);
    `only=False` also checks the stages before it. The report is a dict with `passed`, `stages`
    and every check's `expected`, `observed` and `diagnosis`.
    """
    from shardlab.checker.cli import describe, report, summary
    from shardlab.checker.supervise import temporary_run

    spec = implementation
    if spec not in ("reference", "", None):
        try:
            spec = _implementation.check_path(spec)
        except ImplementationError as exc:
            print(f"[shardlab check] {exc}")
            return {"implementation": implementation, "passed": False, "error": str(exc), "checks": []}

    def shown(result):  # the verdict lines without their per-check seconds: a receipt changes only where it should
        print(re.sub(r"  \(\d+\.\d+ s\)$", "", describe(result), flags=re.M), flush=True)

    results, environment, excerpt = temporary_run(spec or "reference", stage, only, shown)
    found = report(spec or "reference", results, environment)
    print(summary(found["checks"]))
    if excerpt:
        print(excerpt)
    return found
