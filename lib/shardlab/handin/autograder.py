"""The Gradescope autograder: its bundle (`make autograder`) and its entry point inside Gradescope's container.

`python -m shardlab.handin.autograder bundle --out DIR` writes DIR/autograder.zip (setup.sh,
run_autograder and shardlab's source). Inside the container, `python -m shardlab.handin.autograder
--submission DIR --results FILE` grades the one file in DIR (Gradescope's `/autograder/submission`)
with `grade` and writes Gradescope's results.json at FILE (shardlab.handin.platforms' shape).
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from shardlab.handin import grade
from shardlab.handin.platforms import WEIGHTS, gradescope
from shardlab.io import write_json


def autograde(submission: Path, results: Path, timeout: float, unsandboxed: bool) -> dict:
    """Grade the one submission in `submission` (a Gradescope-style folder) and write results.json at `results`."""
    with tempfile.TemporaryDirectory(prefix="shardlab-autograder-") as scratch:
        entry = Path(scratch) / "submissions" / "submission"
        entry.mkdir(parents=True)
        files = [p for p in sorted(submission.iterdir()) if p.is_file() and not p.is_symlink()]
        for path in files:
            if path.suffix in (".py", ".zip"):
                shutil.copyfile(path, entry / path.name)
        body = grade.grade(entry.parent, Path(scratch) / "out", jobs=1, timeout=timeout, unsandboxed=unsandboxed)
        rows = body["submissions"]["submission"]["rows"]
    found = gradescope(rows)
    results.parent.mkdir(parents=True, exist_ok=True)
    write_json(results, found)
    return found


SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, in its Ubuntu image, from /autograder/source.
set -euo pipefail
cd /autograder/source
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11 python3.11-venv bubblewrap >/dev/null
python3.11 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet -r requirements-cpu.txt
/autograder/venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
"""
RUN = """#!/usr/bin/env bash
# Gradescope runs this per submission: /autograder/submission -> /autograder/results/results.json.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="$ROOT/venv/bin/python"
FLAG=""
if ! "$PY" -c 'import sys; from shardlab.checker import sandbox; sys.exit(1 if sandbox.unavailable() else 0)'; then
  FLAG="--unsandboxed"
  echo "bubblewrap cannot build a sandbox in this container: the platform's container is the only sandbox"
fi
exec "$PY" -m shardlab.handin.autograder --submission "$ROOT/submission" --results "$ROOT/results/results.json" $FLAG
"""
BUNDLED = ("pyproject.toml", "requirements-cpu.txt", "README.md", "lib/shardlab")


def bundle(out: Path, checkout: Path) -> Path:
    """`out`/autograder.zip: setup.sh, run_autograder and shardlab's source from `checkout` (Gradescope's layout).

    The same checkout gives the same bytes: every member has one timestamp (`io.write_zip`).
    """
    from shardlab.io import write_zip

    def members():
        for name, text in (("setup.sh", SETUP), ("run_autograder", RUN)):
            yield name, text.encode(), 0o755
        for item in BUNDLED:
            path = checkout / item
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            for file in files:
                if "__pycache__" not in file.parts and not file.is_symlink():
                    yield file.relative_to(checkout).as_posix(), file.read_bytes(), 0o644

    out.mkdir(parents=True, exist_ok=True)
    target = out / "autograder.zip"
    write_zip(target, members())
    return target


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["bundle"]:
        parser = argparse.ArgumentParser(prog="python -m shardlab.handin.autograder bundle")
        parser.add_argument("--out", required=True, help="folder for autograder.zip")
        parser.add_argument("--checkout", default=".", help="the shardlab checkout to bundle (default: .)")
        args = parser.parse_args(argv[1:])
        print(f"[shardlab autograder] {bundle(Path(args.out), Path(args.checkout))}: upload it as the autograder")
        return 0
    parser = argparse.ArgumentParser(prog="python -m shardlab.handin.autograder", description=__doc__.split("\n")[0])
    parser.add_argument("--submission", required=True, help="folder holding the submission (one .py file)")
    parser.add_argument("--results", required=True, help="where results.json goes")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole check")
    parser.add_argument("--unsandboxed", action="store_true", help="the platform's container is the only sandbox")
    args = parser.parse_args(argv)
    from shardlab.errors import ConfigError

    try:
        found = autograde(Path(args.submission), Path(args.results), args.timeout, args.unsandboxed)
    except ConfigError as exc:
        failed = {"score": 0.0, "output": f"not graded: {exc}", "visibility": "visible", "tests": []}
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        write_json(args.results, failed)
        print(f"[shardlab autograder] {exc}", file=sys.stderr)
        return 2
    print(f"[shardlab autograder] score {found['score']} of {sum(WEIGHTS.values()):g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
