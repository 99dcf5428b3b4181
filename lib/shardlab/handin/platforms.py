"""The platforms' result files, all from one table of stage weights (the autograder bundle: handin.autograder).

From one grade record (`grade.json`) this writes, beside the table:

- `gradescope/<name>.json`: Gradescope's `results.json` shape (top-level `score`, `output`,
  `visibility`, and per stage a test with `name`, `score`, `max_score`, `status`, `visibility`, `output`);
- `prairielearn/<name>.json`: PrairieLearn's external-grading `results.json` (`gradable`, `score` in
  [0, 1], `message`, `output`, `tests` with `points` and `max_points`);
- `lms.csv`: one line per submission (points, out of, percent), cells escaped like grade.csv.

A stage's points are its weight times the share of its checks that passed; a stage not reached or
stopped scores 0.
"""

import csv
import io
from pathlib import Path

from shardlab.io import write_json

WEIGHTS = {1: 25.0, 2: 25.0, 3: 25.0, 4: 25.0}  # points per stage; the total is the assignment's maximum
GRADESCOPE, PRAIRIELEARN, LMS = "gradescope", "prairielearn", "lms.csv"


def expected_checks(stage: int) -> int:
    """How many checks a complete run of `stage` reports (the checker's own list)."""
    from shardlab.checker.cli import checks_of

    return len(checks_of(stage))


def stage_points(row: dict) -> float:
    """Points of one stage row: its weight times passed / expected checks (0 unless checks were reported)."""
    if row.get("verdict") in ("not gradable", "timeout", "output cap", "crashed", "not reached", "course code"):
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
            write_json(folder / kind / f"{stem}.json", build(entry["rows"]))
    (folder / LMS).write_text(lms_csv(body), encoding="utf-8", newline="")
