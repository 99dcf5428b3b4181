"""The platforms' result files, all from one table of stage weights, and the Gradescope autograder's entry point.

From one grade record (`grade.json`) this writes, beside the table:

- `gradescope/<name>.json`: Gradescope's `results.json` shape (top-level `score`, `output`,
  `visibility`, and per stage a test with `name`, `score`, `max_score`, `status`, `visibility`, `output`);
- `prairielearn/<name>.json`: PrairieLearn's external-grading `results.json` (`gradable`, `score` in
  [0, 1], `message`, `output`, `tests` with `points` and `max_points`);
- `lms.csv`: one line per submission (points, out of, percent), cells escaped like grade.csv.

A stage's points are its weight times the share of its checks that passed; a stage not reached or
stopped scores 0. `python -m shardlab.handin.platforms --submission DIR --results FILE` grades the one
file in DIR (Gradescope's `/autograder/submission`) and writes Gradescope's results.json at FILE.
"""

import argparse
import csv
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

WEIGHTS = {1: 25.0, 2: 25.0, 3: 25.0, 4: 25.0}  # points per stage; the total is the assignment's maximum
GRADESCOPE, PRAIRIELEARN, LMS = "gradescope", "prairielearn", "lms.csv"


def expected_checks(stage: int) -> int:
    """How many checks a complete run of `stage` reports (the checker's own list)."""
    from shardlab.checker.cli import checks_of

    return len(checks_of(stage))


def stage_points(row: dict) -> float:
    """Points of one stage row: its weight times passed / expected checks (0 unless checks were reported)."""
    if row.get("verdict") in ("not gradable", "timeout", "output cap", "crashed", "not reached"):
        return 0.0
    share = min(1.0, int(row.get("passed", 0)) / max(1, expected_checks(row["stage"])))
    return round(WEIGHTS[row["stage"]] * share, 2)


def _test_output(row: dict) -> str:
    text = f"{row['verdict']}: {row['passed']} of {row['checks']} checks passed"
    if row.get("first_failure"):
        text += f"; first failure {row['first_failure']}"
    if row.get("diagnosis"):
        text += f" ({row['diagnosis']})"
    if str(row.get("sandbox", "yes")) != "yes":
        text += " [graded WITHOUT the sandbox]"
    return text


def gradescope(rows: list[dict]) -> dict:
    tests = [
        {
            "name": f"stage {r['stage']}",
            "number": str(r["stage"]),
            "score": stage_points(r),
            "max_score": WEIGHTS[r["stage"]],
            "status": "passed" if r["verdict"] == "pass" else "failed",
            "visibility": "visible",
            "output": _test_output(r),
        }
        for r in rows
    ]
    return {
        "score": round(sum(t["score"] for t in tests), 2),
        "output": f"shardlab stage checks of {rows[0]['submission']}: four logical CPU devices, bounded run",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def prairielearn(rows: list[dict]) -> dict:
    gradable = any(r["verdict"] != "not gradable" for r in rows)
    tests = [
        {
            "name": f"stage {r['stage']}",
            "points": stage_points(r),
            "max_points": WEIGHTS[r["stage"]],
            "message": r["verdict"],
            "output": _test_output(r),
        }
        for r in rows
    ]
    total = sum(WEIGHTS.values())
    return {
        "gradable": gradable,
        "score": round(sum(t["points"] for t in tests) / total, 4) if gradable else 0.0,
        "message": "" if gradable else rows[0]["diagnosis"],
        "output": "\n".join(_test_output(r) for r in rows),
        "tests": tests if gradable else [],
    }


def cell(value) -> str:
    """A CSV cell a spreadsheet shows as text: a leading = + - @ (a formula) or tab/CR is escaped with '."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def lms_csv(body: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    total = sum(WEIGHTS.values())
    writer.writerow(["submission", "sha256", "points", "out_of", "percent", "sandboxed"])
    for name, entry in body["submissions"].items():
        points = round(sum(stage_points(r) for r in entry["rows"]), 2)
        row = [name, entry.get("sha256") or "", points, total, round(100 * points / total, 1)]
        writer.writerow([cell(v) for v in [*row, entry["rows"][0].get("sandbox", "yes")]])
    return buffer.getvalue()


def write_all(folder: Path, body: dict) -> None:
    """The three platforms' files of `body` into `folder` (a grade run's staging folder)."""
    for kind in (GRADESCOPE, PRAIRIELEARN):
        (folder / kind).mkdir()
    for name, entry in body["submissions"].items():
        stem = entry.get("folder") or name
        for kind, build in ((GRADESCOPE, gradescope), (PRAIRIELEARN, prairielearn)):
            (folder / kind / f"{stem}.json").write_text(json.dumps(build(entry["rows"]), indent=1) + "\n")
    (folder / LMS).write_text(lms_csv(body), encoding="utf-8", newline="")


def autograde(submission: Path, results: Path, timeout: float, unsandboxed: bool) -> dict:
    """Grade the one submission in `submission` (a Gradescope-style folder) and write results.json at `results`."""
    from shardlab.handin import grade

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
    results.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
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
PY="${SHARDLAB_PYTHON:-$ROOT/venv/bin/python}"
FLAG=""
if ! "$PY" -c 'import sys; from shardlab.checker import sandbox; sys.exit(1 if sandbox.unavailable() else 0)'; then
  FLAG="--unsandboxed"
  echo "bubblewrap cannot build a sandbox in this container: the platform's container is the only sandbox"
fi
exec "$PY" -m shardlab.handin.platforms --submission "$ROOT/submission" --results "$ROOT/results/results.json" $FLAG
"""
BUNDLED = ("pyproject.toml", "requirements-cpu.txt", "README.md", "lib/shardlab")


def bundle(out: Path, checkout: Path) -> Path:
    """`out`/autograder.zip: setup.sh, run_autograder and shardlab's source from `checkout` (Gradescope's layout)."""
    import zipfile

    out.mkdir(parents=True, exist_ok=True)
    target = out / "autograder.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in (("setup.sh", SETUP), ("run_autograder", RUN)):
            member = zipfile.ZipInfo(name, (2000, 1, 1, 0, 0, 0))
            member.external_attr = 0o755 << 16
            archive.writestr(member, text)
        for item in BUNDLED:
            path = checkout / item
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            for file in files:
                if "__pycache__" not in file.parts and not file.is_symlink():
                    archive.write(file, file.relative_to(checkout).as_posix())
    return target


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["bundle"]:
        parser = argparse.ArgumentParser(prog="python -m shardlab.handin.platforms bundle")
        parser.add_argument("--out", required=True, help="folder for autograder.zip")
        parser.add_argument("--checkout", default=".", help="the shardlab checkout to bundle (default: .)")
        args = parser.parse_args(argv[1:])
        print(f"[shardlab autograder] {bundle(Path(args.out), Path(args.checkout))}: upload it as the autograder")
        return 0
    parser = argparse.ArgumentParser(prog="python -m shardlab.handin.platforms", description=__doc__.split("\n")[0])
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
        Path(args.results).write_text(json.dumps(failed, indent=1) + "\n", encoding="utf-8")
        print(f"[shardlab autograder] {exc}", file=sys.stderr)
        return 2
    print(f"[shardlab autograder] score {found['score']} of {sum(WEIGHTS.values()):g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
