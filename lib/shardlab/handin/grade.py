"""`python -m shardlab grade SUBMISSIONS --out DIR`: every submission checked stage by stage, into one table.

A submission is a `.py` file in SUBMISSIONS, or a folder there holding exactly one `.py` file.
Each is checked by `python -m shardlab check` in its own process group, several at a time (up
to the usable cores), within a wall-time bound and an output cap that this command enforces
(`shardlab.handin.bounded`), so a submission that loops, crashes or floods its output costs at
most its bound and never touches another's row. DIR receives `grade.csv`, `grade.html`,
`grade.json` and `checks/<name>/` (the checker's report and the start of its output). A
rerun reuses the rows of submissions whose file hash and checker version are unchanged.
"""

import csv
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from html import escape
from pathlib import Path

from shardlab import outdir
from shardlab.checker.cli import STAGES
from shardlab.cli import count, seconds
from shardlab.core.files import sha256_file
from shardlab.errors import ConfigError
from shardlab.evidence.audit import source_hashes
from shardlab.evidence.index import STYLE
from shardlab.handin import bounded

COMMAND = "grade"
TABLE, PAGE, RECORD, CHECKS = "grade.csv", "grade.html", "grade.json", "checks"
KEPT_OUTPUT = 20_000  # bytes of a submission's check output kept in checks/<name>/output.txt
DIAGNOSIS = 300  # characters of a diagnosis in the table
CHECKER_SOURCES = (
    "shardlab/checker/",
    "shardlab/core/",
    "shardlab/verify/",
    "shardlab/orbax_io.py",
    "shardlab/learner/implementation.py",
)
COLUMNS = ("submission", "stage", "verdict", "passed", "checks", "first_failure", "diagnosis", "portfolio", "seconds")
LINE = re.compile(r"^(PASS|FAIL)  stage (\d+)  (\S+)")


def checker_version() -> str:
    """A digest of the checker's source files (and the course code it checks against): a rerun key."""
    chosen = {k: v for k, v in source_hashes().items() if k.startswith(CHECKER_SOURCES)}
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:16]


def discover(folder: Path, out: Path | None = None) -> list[dict]:
    """[{name, file or problem, portfolio}] for every submission in `folder`, sorted by name.

    A file's name is its file name (`alice.py`), a folder's its folder name (`alice`), so the two never collide.
    """
    if not folder.is_dir():
        raise ConfigError(f"submissions folder {folder} does not exist or is not a folder; pass a folder of .py files")
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.is_symlink() or (out and entry.resolve() == out.resolve()):
            continue  # hidden files, links and the output folder itself are not submissions
        if entry.is_file() and entry.suffix == ".py":
            zipped = entry.with_suffix(".zip")
            found.append({"name": entry.name, "file": entry, "portfolio": zipped if zipped.is_file() else None})
        elif entry.is_dir():
            files = sorted(p for p in entry.glob("*.py") if p.is_file())
            zips = sorted(entry.glob("*.zip"))
            row = {"name": entry.name, "file": files[0] if len(files) == 1 else None, "portfolio": (zips or [None])[0]}
            if len(files) != 1:
                row["problem"] = f"the folder holds {len(files)} .py files; a submission folder holds exactly one"
            found.append(row)
    if not found:
        raise ConfigError(f"{folder} holds no .py file and no folder; put one submission per file or folder there")
    return found


def portfolio_status(zipped: Path | None, digest: str | None) -> str:
    """'no', 'yes', or why the portfolio does not belong to this file."""
    if zipped is None:
        return "no"
    try:
        with zipfile.ZipFile(zipped) as archive:
            manifest = json.loads(archive.read("portfolio/portfolio.json"))
        spec = manifest["implementation"]["spec"]
    except (zipfile.BadZipFile, KeyError, ValueError, TypeError, OSError):
        return f"unreadable: {zipped.name} is not a portfolio zip"
    ran = spec.get("sha256") if isinstance(spec, dict) else spec
    return "yes" if ran == digest else f"yes, but for another file (sha256 {str(ran)[:12]}…)"


def _parsed(output: str) -> list[dict]:
    """Check results rebuilt from the checker's streamed PASS/FAIL lines (when it was stopped before its report)."""
    results, lines = [], output.splitlines()
    for number, line in enumerate(lines):
        if found := LINE.match(line):
            diagnosis = next(
                (
                    x.split("diagnosis:", 1)[1].strip()
                    for x in lines[number + 1 : number + 4]
                    if x.strip().startswith("diagnosis:")
                ),
                "",
            )
            results.append(
                {"stage": int(found[2]), "name": found[3], "passed": found[1] == "PASS", "diagnosis": diagnosis}
            )
    return results


def stage_rows(outcome: bounded.Outcome, timeout: float) -> list[dict]:
    """One row per stage: verdict, counts, the first failing check and its diagnosis.

    A stage the child was stopped in (bound or cap) says so; the stages after it were not reached.
    """
    checks = (outcome.report or {}).get("checks") or _parsed(outcome.output)
    why = {"timeout": f"stopped at the {timeout:g} s bound", "output": "stopped: its output passed the cap"}
    rows, cut = [], False
    for stage in sorted(STAGES):
        mine = [c for c in checks if c["stage"] == stage]
        failed = next((c for c in mine if not c["passed"]), None)
        row = {
            "stage": stage,
            "passed": sum(c["passed"] for c in mine),
            "checks": len(mine),
            "first_failure": failed["name"] if failed else "",
            "diagnosis": (failed or {}).get("diagnosis", ""),
        }
        if cut:
            row["verdict"] = "not reached"
        elif outcome.stopped and len(mine) < len(STAGES[stage].CHECKS):
            after = f" after {mine[-1]['name']}" if mine else ", before its first check finished"
            verdict = {"timeout": "timeout", "output": "output cap"}[outcome.stopped]
            row.update(verdict=verdict, diagnosis=f"{why[outcome.stopped]} in stage {stage}{after}")
            cut = True
        elif failed:
            row["verdict"] = "fail"
        elif not mine:
            crashed = outcome.returncode not in (0, 1)
            row["verdict"] = "crashed" if crashed else "not reached"
            if crashed:
                row["diagnosis"] = f"the check exited with {outcome.returncode}: {outcome.output.strip()[-200:]}"
            cut = True
        else:
            row["verdict"] = "pass"
        row["diagnosis"] = str(row["diagnosis"])[:DIAGNOSIS]
        rows.append(row)
    return rows


def grade_one(sub: dict, folder: Path, timeout: float, cap: int) -> list[dict]:
    """Check one submission into `folder` (its checks/<name>/) and return its stage rows."""
    folder.mkdir(parents=True)
    digest = sha256_file(sub["file"]) if sub.get("file") else None
    base = {"submission": sub["name"], "portfolio": portfolio_status(sub.get("portfolio"), digest)}
    if "problem" in sub:
        return [
            {
                **base,
                "stage": s,
                "verdict": "not gradable",
                "passed": 0,
                "checks": 0,
                "first_failure": "",
                "diagnosis": sub["problem"],
                "seconds": 0.0,
            }
            for s in sorted(STAGES)
        ]
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        outcome = bounded.check(str(sub["file"].resolve()), Path(scratch), timeout, cap)
    (folder / "output.txt").write_text(outcome.output[:KEPT_OUTPUT], encoding="utf-8")
    if outcome.report:
        (folder / "check_report.json").write_text(json.dumps(outcome.report, indent=1) + "\n", encoding="utf-8")
    return [{**base, **row, "seconds": outcome.seconds} for row in stage_rows(outcome, timeout)]


def _previous(out: Path) -> dict:
    """The record of the last grade in `out` ({} if none, or unreadable)."""
    try:
        return json.loads((out / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def grade(submissions, out, jobs: int | None = None, timeout: float = bounded.TIMEOUT_S, cap: int = bounded.OUTPUT_CAP):
    """Grade every submission in `submissions` into `out`; return the record (also written as grade.json)."""
    out = outdir.claim(out, COMMAND)
    found = discover(Path(submissions), out)
    version, earlier = checker_version(), _previous(out)
    bounds = {"timeout_s": timeout, "output_cap_bytes": cap}
    same = earlier.get("checker_version") == version and earlier.get("bounds") == bounds
    jobs = jobs or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    with outdir.writing(out, COMMAND) as staging:
        record, todo = {}, []
        for sub in found:
            digest = sha256_file(sub["file"]) if sub.get("file") else None
            old = (earlier.get("submissions") or {}).get(sub["name"]) if same else None
            if old and digest and old.get("sha256") == digest and (out / CHECKS / sub["name"]).is_dir():
                shutil.copytree(out / CHECKS / sub["name"], staging / CHECKS / sub["name"])
                status = portfolio_status(sub.get("portfolio"), digest)
                record[sub["name"]] = {**old, "rows": [{**r, "portfolio": status} for r in old["rows"]], "reused": True}
            else:
                todo.append((sub, digest))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {
                sub["name"]: (digest, pool.submit(grade_one, sub, staging / CHECKS / sub["name"], timeout, cap))
                for sub, digest in todo
            }
            try:
                for name, (digest, future) in futures.items():
                    record[name] = {"sha256": digest, "rows": future.result(), "reused": False}
            except BaseException:  # Ctrl-C or SIGTERM: no check outlives the command
                pool.shutdown(wait=False, cancel_futures=True)
                bounded.stop_all()
                raise
        body = {"checker_version": version, "bounds": bounds, "jobs": jobs, "submissions": dict(sorted(record.items()))}
        (staging / RECORD).write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
        rows = [row for entry in body["submissions"].values() for row in entry["rows"]]
        (staging / TABLE).write_text(table_csv(rows), encoding="utf-8", newline="")
        (staging / PAGE).write_text(table_html(rows, body), encoding="utf-8")
    return body


def table_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def table_html(rows: list[dict], body: dict) -> str:
    """grade.html: the same rows as grade.csv, one line per submission and stage, failures first in each row."""
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    lines = "".join("<tr>" + "".join(f"<td>{escape(str(r.get(c, '')))}</td>" for c in COLUMNS) + "</tr>" for r in rows)
    bound = body["bounds"]
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Grades</title><style>{STYLE}
td{{white-space:pre-wrap}}</style></head>
<body><h1>Stage checks of every submission</h1><p>Checker version {escape(body["checker_version"])}; each
submission checked in its own process, at most {bound["timeout_s"]:g} s and {bound["output_cap_bytes"]} bytes of
output, {body["jobs"]} at a time. A passing check is evidence about this bounded experiment on four logical
CPU devices, not a grade by itself. Details per submission: <code>checks/&lt;name&gt;/</code>.</p>
<table><tr>{head}</tr>{lines}</table></body></html>
"""


def add_arguments(parser) -> None:
    parser.add_argument("submissions", help="folder of submissions: .py files, or folders holding one .py file each")
    parser.add_argument("--out", required=True, help="folder for grade.csv, grade.html, grade.json and checks/")
    parser.add_argument("--jobs", type=count, default=None, help="submissions checked at once (default: usable cores)")
    parser.add_argument("--timeout", type=seconds, default=bounded.TIMEOUT_S, help="seconds per submission")
    parser.add_argument("--output-cap", type=count, default=bounded.OUTPUT_CAP, help="bytes of output per submission")


def main(args) -> int:
    try:
        body = grade(args.submissions, args.out, args.jobs, args.timeout, args.output_cap)
    except ConfigError as exc:  # OutputFolderError is a ConfigError
        print(f"[shardlab grade] {exc}", file=sys.stderr)
        return 2
    for name, entry in body["submissions"].items():
        verdicts = " ".join(f"{r['stage']}:{r['verdict']}" for r in entry["rows"])
        again = "  (unchanged, not checked again)" if entry["reused"] else ""
        print(f"{name:24s} {verdicts}  portfolio={entry['rows'][0]['portfolio']}{again}")
    print(f"[shardlab grade] table: {Path(args.out) / TABLE} and {Path(args.out) / PAGE}")
    return 0
