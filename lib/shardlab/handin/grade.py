"""`python -m shardlab grade SUBMISSIONS --out DIR`: every submission checked stage by stage, into one table.

A submission is a `.py` file in SUBMISSIONS, or a folder there holding exactly one `.py` file; every
other entry (a hidden file, a link, a FIFO, an empty folder, `.PY`, a lone zip) still gets a row,
`not gradable`, with the reason. Each submission is first copied (the regular file only, no link
followed, at most `SOURCE_BYTES`) into a private scratch folder; the hash in the table is the hash of
that copy, and that copy is what runs. Its check runs `python -m shardlab check --sandbox`: the
supervisor (shardlab's code only) starts each interpreter that imports the submission in a bubblewrap
sandbox (`shardlab.checker.sandbox`) that sees the copy read-only, its own scratch folder, nothing of
SUBMISSIONS or DIR, no network, and dies with every process it started at the bound, at Ctrl-C or when
grade dies. The verdict is read from the report the supervisor writes outside the sandbox, never from
what was printed. Without a working bubblewrap grade refuses, unless `--unsandboxed` is given (then every
row says so).

DIR receives `grade.csv`, `grade.html`, `grade.json`, the platforms' files (`shardlab.handin.platforms`)
and `checks/<name>/` (the checker's report and the start of its output). A rerun reuses the rows of
submissions whose file hash, checker version and bounds are unchanged, unless a row says `timeout` (a bound
stopped the check: nothing was judged, so it is checked again).
"""

import csv
import hashlib
import io
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from html import escape
from pathlib import Path

import shardlab.checker.sandbox as sandbox
import shardlab.checker.seal as seal
import shardlab.checker.watch as watch
from shardlab import outdir, process_group
from shardlab.checker.cli import STAGES
from shardlab.cli import count, seconds
from shardlab.core.files import read_bounded, sha256_file, zip_member
from shardlab.errors import BoundedReadError, ConfigError
from shardlab.evidence.index import STYLE, html_table
from shardlab.evidence.sources import source_hashes
from shardlab.handin import bounded, platforms
from shardlab.handin.platforms import cell
from shardlab.io import read_record, without_folder, write_json
from shardlab.learner.implementation import STAGE_FUNCTIONS

COMMAND = "grade"
TABLE, PAGE, RECORD, CHECKS = "grade.csv", "grade.html", "grade.json", "checks"
KEPT_OUTPUT = 20_000  # bytes of a submission's check output kept in checks/<name>/output.txt
DIAGNOSIS = 300  # characters of a diagnosis in the table
SOURCE_BYTES = 1_000_000  # a larger .py file is not gradable
ZIP_BYTES = 50_000_000  # a larger portfolio zip is not opened
MANIFEST_BYTES = 1_000_000  # a larger portfolio.json (uncompressed) is not read
RECORD_BYTES = 1 << 28  # a larger grade.json is not taken for the last grade's record
CHECKER_SOURCES = (
    "shardlab/checker/",
    "shardlab/core/",
    "shardlab/verify/",
    "shardlab/orbax_io.py",
    "shardlab/learner/implementation.py",
)
COLUMNS = (
    "submission",
    "stage",
    "verdict",
    "passed",
    "checks",
    "first_failure",
    "diagnosis",
    "portfolio",
    "sandbox",
    "sha256",
    "seconds",
)
UNSANDBOXED = "NO (--unsandboxed)"
SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def checker_version() -> str:
    """A digest of the checker's source files (and the course code it checks against): a rerun key."""
    chosen = {k: v for k, v in source_hashes().items() if k.startswith(CHECKER_SOURCES)}
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:16]


def shown(name: str) -> str:
    """A name as the table and console show it: control characters (newlines too) and backslashes escaped."""
    return "".join(c if c.isprintable() and c != "\\" else c.encode("unicode_escape").decode() for c in name)


def _folder_name(name: str, taken: set) -> str:
    """A safe, unique folder name under checks/ for a submission's details."""
    base = name if SAFE.fullmatch(name) else "_" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    chosen, number = base[:100], 1
    while chosen in taken:
        number += 1
        chosen = f"{base[:96]}-{number}"
    taken.add(chosen)
    return chosen


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device")):
        if test(mode):
            return word
    return "a block device" if stat.S_ISBLK(mode) else "not a regular file"


def _entry(entry: os.DirEntry) -> dict:
    """One row's description of a top-level entry: {name, file | problem, portfolio}."""
    name = shown(entry.name) or "?"
    row = {"name": name, "portfolio": None}
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError as exc:
        return {**row, "problem": f"unreadable entry ({exc.strerror})"}
    if entry.name.startswith("."):
        return {**row, "problem": "a hidden entry (its name starts with '.'); hand in a visible .py file"}
    if stat.S_ISLNK(info.st_mode):
        return {**row, "problem": "a symbolic link; a submission is a regular file or folder, never a link"}
    if stat.S_ISDIR(info.st_mode):
        return _folder(Path(entry.path), row)
    if not stat.S_ISREG(info.st_mode):
        return {**row, "problem": f"{_kind(info.st_mode)}, not a .py file or a folder"}
    if entry.name.endswith(".py"):
        return {**row, "file": Path(entry.path)}
    if entry.name.lower().endswith(".py"):
        return {**row, "problem": "its suffix is not exactly .py (lower case); rename it to be graded"}
    return {**row, "problem": "not a .py file (a submission is a .py file, or a folder holding one)"}


def _folder(folder: Path, row: dict) -> dict:
    """A folder submission: exactly one regular .py file; its first regular .zip is the portfolio."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        return {**row, "problem": f"the folder cannot be read ({exc.strerror})"}
    files, zips, odd = [], [], []
    for entry in entries[:1000]:
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            odd.append(entry.name)
            continue
        if not stat.S_ISREG(mode):
            if entry.name.endswith((".py", ".zip")):
                odd.append(entry.name)
            continue
        if entry.name.endswith(".py") and not entry.name.startswith("."):
            files.append(Path(entry.path))
        elif entry.name.endswith(".zip"):
            zips.append(Path(entry.path))
    if odd:
        return {**row, "problem": f"the folder holds {shown(odd[0])!s}, which is a link or not a regular file"}
    if len(files) != 1:
        return {**row, "problem": f"the folder holds {len(files)} .py files; a submission folder holds exactly one"}
    return {**row, "file": files[0], "portfolio": (zips or [None])[0]}


def discover(folder: Path, out: Path | None = None) -> list[dict]:
    """[{name, file or problem, portfolio}] for every entry in `folder`, sorted by name (each one a row).

    A file's name is its file name (`alice.py`), a folder's its folder name (`alice`), so the two never collide;
    `alice.zip` beside `alice.py` is that file's portfolio, not a row of its own.
    """
    if not folder.is_dir():
        raise ConfigError(f"submissions folder {folder} does not exist or is not a folder; pass a folder of .py files")
    entries = sorted(os.scandir(folder), key=lambda e: e.name)
    names = {e.name for e in entries}
    found = []
    for entry in entries:
        if out is not None and os.path.realpath(entry.path) == os.path.realpath(out):
            continue  # the output folder itself is not a submission
        if entry.name.endswith(".zip") and entry.name[: -len(".zip")] + ".py" in names:
            continue
        row = _entry(entry)
        if "file" in row and entry.name.endswith(".py"):
            zipped = Path(entry.path[: -len(".py")] + ".zip")
            row["portfolio"] = zipped if zipped.name in names else None
        found.append(row)
    if not found:
        raise ConfigError(f"{folder} holds no .py file and no folder; put one submission per file or folder there")
    taken, seen = set(), set()
    for row in found:
        while row["name"] in seen:  # two names that look alike once escaped
            row["name"] += "'"
        seen.add(row["name"])
        row["folder"] = _folder_name(row["name"], taken)
    return found


def portfolio_status(zipped: Path | None, digest: str | None) -> str:
    """'no', 'yes', or why the portfolio does not belong to this file (never more than a bounded read)."""
    if zipped is None:
        return "no"
    try:
        try:
            data = read_bounded(zipped, ZIP_BYTES)
        except BoundedReadError:
            return f"unreadable: {shown(zipped.name)} is not a regular file of at most {ZIP_BYTES} bytes"
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            try:
                opened = zip_member(archive, "portfolio/portfolio.json", MANIFEST_BYTES)
            except BoundedReadError:
                return f"unreadable: its portfolio.json is larger than {MANIFEST_BYTES} bytes"
            with opened as inner:
                manifest = json.loads(inner.read())
        spec = manifest["implementation"]["spec"]
    except (zipfile.BadZipFile, KeyError, ValueError, TypeError, OSError, RecursionError, RuntimeError, EOFError):
        return f"unreadable: {shown(zipped.name)} is not a portfolio zip"
    ran = spec.get("sha256") if isinstance(spec, dict) else spec
    return "yes" if ran == digest else f"yes, but for another file (sha256 {shown(str(ran))[:12]}…)"


def stage_rows(outcome: bounded.Outcome, timeout: float) -> list[dict]:
    """One row per stage: verdict, counts, the first failing check and its diagnosis.

    Only the supervisor's report counts: a run stopped before it wrote one has no passed checks. A stage whose
    only failures are calls stopped at their time bound (`watch.timed_out`) is `timeout`, never `fail`: how long
    a call takes depends on how busy the machine was, so such a stage was not judged. A stage
    that passed with functions that are the course's own code (checker/provenance.py) is `course code`,
    with no points: its checks judged the course; so is a stage one of whose checks failed because the
    file called the course's own code while graded (checker/seal.py).
    """
    checks = [c for c in (outcome.report or {}).get("checks", []) if isinstance(c, dict) and c.get("stage") in STAGES]
    course = ((outcome.report or {}).get("environment") or {}).get("course_functions") or {}
    course = course if isinstance(course, dict) else {}
    reached = ((outcome.report or {}).get("environment") or {}).get("course_code") or {}
    reached = reached if isinstance(reached, dict) else {}
    why = {"timeout": f"stopped at the {timeout:g} s bound", "output": "stopped: its output passed the cap"}
    rows, cut = [], False
    for stage in sorted(STAGES):
        mine = [c for c in checks if c["stage"] == stage]
        reaches = [seal.reach(c.get("diagnosis")) if not c.get("passed") else None for c in mine]
        own_failures = [c for c, r in zip(mine, reaches) if not c.get("passed") and not (r and r.function)]
        failed = next((c for c in mine if not c.get("passed")), None)
        row = {
            "stage": stage,
            "passed": sum(bool(c.get("passed")) for c in mine),
            "checks": len(mine),
            "first_failure": str(failed.get("name", "")) if failed else "",
            "diagnosis": (failed or {}).get("diagnosis", ""),
        }
        if cut:
            row["verdict"] = "not reached"
        elif outcome.stopped:
            verdict = {"timeout": "timeout", "output": "output cap"}[outcome.stopped]
            row.update(verdict=verdict, passed=0, diagnosis=f"{why[outcome.stopped]}; no report, so no check counts")
            cut = True
        elif failed and watch.TOTAL_BOUND in str(failed.get("diagnosis", "")):
            row.update(verdict="timeout", diagnosis=f"{why['timeout']} in stage {stage}: {failed['diagnosis']}")
            cut = True
        elif seen := _course_code(stage, reaches, own_failures, reached.get(str(stage)), course):
            row.update(verdict="course code", passed=0, diagnosis=seen)
        elif own_failures and all(watch.timed_out(c.get("diagnosis")) for c in own_failures):
            stopped = own_failures[0]
            said = f"a call was stopped at its time bound before a check could judge it: {stopped.get('diagnosis', '')}"
            row.update(verdict="timeout", first_failure=str(stopped.get("name", "")), diagnosis=said)
        elif failed := next(iter(own_failures), None):
            row.update(verdict="fail", first_failure=str(failed.get("name", "")), diagnosis=failed.get("diagnosis", ""))
        elif not mine:
            crashed = outcome.report is None
            row["verdict"] = "crashed" if crashed else "not reached"
            if crashed:
                tail = outcome.output.strip()[-200:]
                row["diagnosis"] = f"the check left no report (exit status {outcome.returncode}): {tail}"
            cut = True
        else:
            row.update(verdict="pass", first_failure="", diagnosis="")
        rows.append(_judged(row, len(mine) - sum(1 for r in reaches if r and r.function), course))
    return rows


def _judged(row: dict, judged: int, course: dict) -> dict:
    """The row with its counts and the source's finding: a check that reached another stage's course function
    judged neither this stage's pass nor its failure; a stage that passed with the course's functions (read
    from the file's source) is `course code`."""
    if row["verdict"] in ("pass", "fail"):
        row["checks"] = judged
    if row["verdict"] == "pass" and (theirs := sorted(set(STAGE_FUNCTIONS[row["stage"]]) & set(course))):
        named = ", ".join(f"{name} is {course[name]}" for name in theirs)
        row.update(verdict="course code", passed=0, diagnosis=f"not the file's own code: {named}")
    row["diagnosis"] = shown(str(row["diagnosis"]))[:DIAGNOSIS]
    return row


def _course_code(stage: int, reaches: list, own_failures: list, swallowed, course: dict) -> str | None:
    """Why a stage is `course code` while graded, else None, from what each of its failed checks reached
    (seal.reach, None for a passed check) and its failures on the file's own code.

    The stage's own functions are judged, not the others': a check that failed because it reached another
    stage's function of the course does not count against this stage, nor for it. The stage is `course code`
    when every one of its own functions is the course's (reached, or read so from the source), or when its
    checks reached one of them and none failed on the file's own code (a failing stage stays `fail`), or when
    the file swallowed a reach (the worker's reply said so, and no check failed for it)."""
    own = set(STAGE_FUNCTIONS[stage])
    reached = {r.function for r in reaches if r} - {None}
    if not reached:
        return _reached(reaches, swallowed)
    mine = reached & own
    if mine and own <= mine | set(course):  # the rest of the stage's functions are the course's by the source
        mine = own
    if mine and (mine == own or not own_failures):
        return _reached([r for r in reaches if r and r.function in mine], None)
    return None


def _reached(reaches: list, swallowed) -> str | None:
    """What a stage's checks reached of the course's own code while graded (checker/seal.py), else None: a check
    its error failed, or else a call whose error the file swallowed (the worker's reply still said so)."""
    for reach in reaches:
        if reach:
            return reach.message
    return swallowed if isinstance(swallowed, str) else None


def _not_gradable(base: dict, why: str) -> list[dict]:
    return [
        {
            **base,
            "stage": s,
            "verdict": "not gradable",
            "passed": 0,
            "checks": 0,
            "first_failure": "",
            "diagnosis": shown(why)[:DIAGNOSIS],
            "seconds": 0.0,
        }
        for s in sorted(STAGES)
    ]


def private_copy(source: Path, folder: Path, limit: int, name: str = "submission.py") -> Path:
    """Copy the regular file `source` to `folder`/`name`, read-only: no link followed, at most `limit` bytes read.

    OSError/ValueError say why an entry cannot be copied (a FIFO, a link, a device, too large, unreadable).
    """
    try:
        data = read_bounded(source, limit)
    except BoundedReadError as exc:
        raise ValueError(
            "not a regular file"
            if exc.size is None
            else f"{exc.size} bytes, more than the {limit} a submission may hold"
        ) from None
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / name
    copy.write_bytes(data)
    copy.chmod(0o444)
    return copy


def grade_one(sub: dict, folder: Path, timeout: float, cap: int, sandboxed: bool = True) -> tuple[str | None, list]:
    """Check one submission into `folder` (its checks/<name>/): (the sha256 of the copy that ran, its stage rows)."""
    base = {"submission": sub["name"], "portfolio": "no", "sandbox": "yes" if sandboxed else UNSANDBOXED}
    if folder.exists():  # a planted entry in the staging area never stops the run
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    if "problem" in sub:
        return None, _not_gradable(base, sub["problem"])
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        work = Path(scratch)
        name = sub["file"].name if SAFE.fullmatch(sub["file"].name) else "submission.py"
        try:
            copy = private_copy(sub["file"], work / "source", SOURCE_BYTES, name)
        except (OSError, ValueError) as exc:
            return None, _not_gradable(base, f"the file cannot be copied: {getattr(exc, 'strerror', None) or exc}")
        digest = sha256_file(copy)
        base.update(portfolio=portfolio_status(sub.get("portfolio"), digest), sha256=digest)
        outcome = bounded.check(str(copy), work / "run", timeout, cap, sandboxed=sandboxed, graded=True)
        private = str(copy.parent) + os.sep  # where the copy ran: shown as the bare file name
        outcome.output = outcome.output.replace(private, "")
        if outcome.report:
            outcome.report = without_folder(outcome.report, copy.parent)
            write_json(folder / "check_report.json", outcome.report)
        rows = [{**base, **row, "seconds": outcome.seconds} for row in stage_rows(outcome, timeout)]
    (folder / "output.txt").write_text(outcome.output[:KEPT_OUTPUT], encoding="utf-8")
    return digest, rows


def _say(echo, text: str) -> None:
    if echo:
        echo(text)


def grade(
    submissions,
    out,
    jobs: int | None = None,
    timeout: float = bounded.TIMEOUT_S,
    cap: int = bounded.OUTPUT_CAP,
    unsandboxed: bool = False,
    echo=None,
):
    """Grade every submission in `submissions` into `out`; return the record (also written as grade.json).

    `echo(line)` receives one progress line per finished submission. Without a working sandbox this
    refuses (ConfigError) unless `unsandboxed`.
    """
    found = discover(Path(submissions), Path(out))
    if not unsandboxed and (why := sandbox.unavailable()):
        raise ConfigError(f"cannot sandbox the submissions: {why}. Install it or pass --unsandboxed (at your risk)")
    out = outdir.claim(out, COMMAND)
    version, earlier = checker_version(), read_record(out / RECORD, RECORD_BYTES)  # {}: none, or unreadable
    bounds = {"timeout_s": timeout, "output_cap_bytes": cap, "sandboxed": not unsandboxed}
    same = earlier.get("checker_version") == version and earlier.get("bounds") == bounds
    jobs = jobs or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    with outdir.writing(out, COMMAND) as staging:
        record, todo = {}, []
        for sub in found:
            old = (earlier.get("submissions") or {}).get(sub["name"]) if same else None
            digest = _digest(sub.get("file"))
            previous = out / CHECKS / sub["folder"]
            unjudged = any(r.get("verdict") == "timeout" for r in (old or {}).get("rows", []))  # checked again
            kept = old and digest and old.get("sha256") == digest and not unjudged
            if kept and previous.is_dir() and not previous.is_symlink():
                shutil.copytree(previous, staging / CHECKS / sub["folder"], symlinks=True)
                status = portfolio_status(sub.get("portfolio"), digest)
                record[sub["name"]] = {**old, "rows": [{**r, "portfolio": status} for r in old["rows"]], "reused": True}
            else:
                todo.append(sub)
        start, total = time.perf_counter(), len(todo)
        _say(echo, f"[shardlab grade] {len(found)} entries, {len(found) - total} unchanged, {total} to check")
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {
                pool.submit(grade_one, sub, staging / CHECKS / sub["folder"], timeout, cap, not unsandboxed): sub
                for sub in todo
            }
            try:
                for number, future in enumerate(as_completed(futures), 1):
                    sub = futures[future]
                    try:
                        digest, rows = future.result()
                    except Exception as exc:  # noqa: BLE001 (one entry never ends the run)
                        base = {"submission": sub["name"], "portfolio": "no"}
                        base["sandbox"] = UNSANDBOXED if unsandboxed else "yes"
                        digest, rows = None, _not_gradable(base, f"grading failed: {type(exc).__name__}: {exc}")
                    record[sub["name"]] = {"sha256": digest, "folder": sub["folder"], "rows": rows, "reused": False}
                    elapsed = time.perf_counter() - start
                    left = elapsed / number * (total - number)
                    verdicts = " ".join(f"{r['stage']}:{r['verdict']}" for r in rows)
                    warning = f"  {UNSANDBOXED}" if unsandboxed else ""
                    _say(echo, f"[{number}/{total}] {sub['name']}  {verdicts}  (about {left:.0f} s left){warning}")
            except BaseException:  # Ctrl-C or SIGTERM: no check outlives the command
                pool.shutdown(wait=False, cancel_futures=True)
                process_group.stop_all()
                raise
        body = {"checker_version": version, "bounds": bounds, "jobs": jobs, "submissions": dict(sorted(record.items()))}
        write_json(staging / RECORD, body)  # keys sorted: the next grade and the tables read it by key, never by order
        rows = [row for entry in body["submissions"].values() for row in entry["rows"]]
        (staging / TABLE).write_text(table_csv(rows), encoding="utf-8", newline="")
        (staging / PAGE).write_text(table_html(rows, body), encoding="utf-8")
        platforms.write_all(staging, body)
    return body


def _digest(path: Path | None) -> str | None:
    """sha256 of a regular file (no link followed), None if it is not one."""
    if path is None:
        return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return sha256_file(path) if stat.S_ISREG(info.st_mode) and info.st_size <= SOURCE_BYTES else None


def table_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows({c: cell(r.get(c, "")) for c in COLUMNS} for r in rows)
    return buffer.getvalue()


def table_html(rows: list[dict], body: dict) -> str:
    """grade.html: the same rows as grade.csv, one line per submission and stage, failures first in each row."""
    table = html_table(COLUMNS, ([escape(str(r.get(c, ""))) for c in COLUMNS] for r in rows))
    bound = body["bounds"]
    where = (
        "in its own bubblewrap sandbox"
        if bound.get("sandboxed")
        else "<strong>without a sandbox (--unsandboxed)</strong>"
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Grades</title><style>{STYLE}
td{{white-space:pre-wrap}}</style></head>
<body><h1>Stage checks of every submission</h1><p>Checker version {escape(body["checker_version"])}; each
submission checked {where}, at most {bound["timeout_s"]:g} s and {bound["output_cap_bytes"]} bytes of
output, {body["jobs"]} at a time. A passing check is evidence about this bounded experiment on four logical
CPU devices, not a grade by itself. Details per submission: <code>checks/&lt;name&gt;/</code>.</p>
{table}</body></html>
"""


def add_arguments(parser) -> None:
    parser.add_argument("submissions", help="folder of submissions: .py files, or folders holding one .py file each")
    parser.add_argument("--out", required=True, help="folder for grade.csv, grade.html, grade.json and checks/")
    parser.add_argument("--jobs", type=count, default=None, help="submissions checked at once (default: usable cores)")
    parser.add_argument("--timeout", type=seconds, default=bounded.TIMEOUT_S, help="seconds per submission")
    parser.add_argument("--output-cap", type=count, default=bounded.OUTPUT_CAP, help="bytes of output per submission")
    parser.add_argument(
        "--unsandboxed",
        action="store_true",
        help="run submissions without the bubblewrap sandbox (when it is unavailable); every row says so",
    )


def main(args) -> int:
    unsandboxed = getattr(args, "unsandboxed", False)
    try:
        body = grade(
            args.submissions, args.out, args.jobs, args.timeout, args.output_cap, unsandboxed, echo=_progress_line
        )
    except ConfigError as exc:  # OutputFolderError is a ConfigError
        print(f"[shardlab grade] {exc}", file=sys.stderr)
        return 2
    for name, entry in body["submissions"].items():
        verdicts = " ".join(f"{r['stage']}:{r['verdict']}" for r in entry["rows"])
        again = "  (unchanged, not checked again)" if entry["reused"] else ""
        warning = "  UNSANDBOXED" if unsandboxed else ""
        print(f"{name:24s} {verdicts}  portfolio={entry['rows'][0]['portfolio']}{again}{warning}")
    print(f"[shardlab grade] table: {Path(args.out) / TABLE} and {Path(args.out) / PAGE}")
    return 0


def _progress_line(text: str) -> None:
    print(text, flush=True)
