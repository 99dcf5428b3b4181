"""Check a stage from a notebook cell: the same child-interpreter check as the command line, its verdict printed."""

import json
import os
import re
import subprocess
import sys
import tempfile

from shardlab.errors import ImplementationError
from shardlab.learner import implementation as _implementation

REPORT = "check_report.json"  # the JSON report the child writes (the command line's --output)
CHILD_TIMEOUT = 1800  # seconds for a whole check run; generous for a loaded 2-core machine


def check_here(implementation: str = "reference", stage=1, only: bool = True) -> dict:
    """Run `python -m shardlab check` for `stage` in a fresh interpreter; print its lines; return its report.

    The kernel's own JAX setup does not matter: the checks run in a child with four CPU devices,
    exactly as on the command line. `only=True` checks just this stage (quick enough for a cell);
    `only=False` also checks the stages before it. The report is a dict with `passed`, `stages`
    and every check's `expected`, `observed` and `diagnosis`.
    """
    spec = implementation
    if spec not in ("reference", "", None):
        try:
            spec = _implementation.check_path(spec)
        except ImplementationError as exc:
            print(f"[shardlab check] {exc}")
            return {"implementation": implementation, "passed": False, "error": str(exc), "checks": []}
    with tempfile.TemporaryDirectory(prefix="shardlab-check-here-") as folder:
        command = [sys.executable, "-m", "shardlab.checker", "--implementation", spec or "reference"]
        command += ["--stage", str(stage), "--output", folder] + (["--only"] if only else [])
        done = subprocess.run(
            command,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
        )
        # the verdict lines without their per-check seconds: a receipt changes only where a measurement does
        # and without the child's report path: a temporary folder, gone when this returns (the report is returned)
        shown = re.sub(r"  \(\d+\.\d+ s\)$", "", done.stdout, flags=re.M)
        print("".join(line for line in shown.splitlines(keepends=True) if folder not in line), end="")
        if done.returncode not in (0, 1) or not os.path.isfile(os.path.join(folder, REPORT)):
            print(done.stderr[-2000:], end="")
            return {"implementation": implementation, "passed": False, "error": done.stderr[-2000:], "checks": []}
        with open(os.path.join(folder, REPORT)) as handle:
            return json.load(handle)
