"""`python -m rig.grade_attacks --out DIR [--reduced]`: the grade attack campaign, one row per attack."""

import csv
import json
import resource
import shutil
import sys
import time
from pathlib import Path

from rig import cli
from rig.grade_attacks import attacks as A
from shardlab.cli import count, seconds
from shardlab.core.files import sha256_file
from shardlab.errors import ConfigError
from shardlab.handin import grade
from shardlab.io import write_json

KEY = ("stage", "verdict", "passed", "checks", "first_failure")
RECEIPTS = Path(__file__).resolve().parents[2] / "receipts"  # a finished run's receipts, for the portfolio attacks


def _digest(path: Path) -> str:
    return sha256_file(path) if path.is_file() else "absent"


def _verdicts(rows: list) -> list:
    return [r["verdict"] for r in rows]


def _same_as_alone(ctx, name) -> bool:
    mine, alone = ctx["rows"][name]["rows"], ctx["alone"][name]["rows"]
    return [tuple(r[k] for k in KEY) for r in mine] == [tuple(r[k] for k in KEY) for r in alone]


def _first(got) -> list:
    return next(iter(got.values()))


def _no_pass(got, ctx):
    return "pass" not in _verdicts(_first(got)), f"verdicts {_verdicts(_first(got))}"


def _course_code(got, ctx):
    rows = _first(got)
    return all(r["verdict"] == "course code" for r in rows), f"verdicts {_verdicts(rows)}"


def _links(got, ctx):
    rows = _first(got)
    failed = [r for r in rows if r["verdict"] == "fail"]
    said = any("symbolic links" in r["diagnosis"] for r in rows)
    return bool(failed) and said and not ctx["changed"], f"verdicts {_verdicts(rows)}; {rows[2]['diagnosis'][:120]}"


def _orphans(got, ctx):
    ok = not ctx["left"] and not ctx["rewritten"] and not ctx["changed"]
    return (
        ok,
        f"processes left {ctx['left']}, outputs rewritten {ctx['rewritten']}, submissions changed {ctx['changed']}",
    )


def _sibling(got, ctx):
    same = all(_same_as_alone(ctx, n) for n in ctx["honest"])
    return not ctx["changed"] and same, f"submissions changed {ctx['changed']}, honest rows as alone {same}"


def _pyc(got, ctx):
    rows = _first(got)
    ok = rows[0]["verdict"] == "fail" and "pass" not in _verdicts(rows) and not ctx["changed"]
    return ok, f"verdicts {_verdicts(rows)}; {rows[0]['diagnosis'][:80]}"


def _odd(got, ctx):
    bad = {n: _verdicts(r)[0] for n, r in got.items() if any(x["verdict"] != "not gradable" for x in r)}
    return not bad, (f"{len(got)} rows, all not gradable" if not bad else f"gradable: {bad}")


def _names(got, ctx):
    raw_newline = any("\n" in line for line in ctx["lines"])
    formula = [r["submission"] for r in ctx["table"] if r["submission"][:1] in "=+-@"]
    return not raw_newline and not formula, f"raw newline in console {raw_newline}; formula cells {formula}"


def _bombs(got, ctx):
    states = {n: r[0]["portfolio"] for n, r in got.items()}
    ok = all(s.startswith("unreadable") for s in states.values()) and ctx["peak"] < 2 * 1024**3
    return ok, f"{states}; grade's peak memory {ctx['peak'] / 1024**2:.0f} MB"


def _snoop(got, ctx):
    text = _first(got)[0]["diagnosis"]
    return "CONTAINED" in text and "ESCAPED" not in text, text[:160]


def _hog(got, ctx):
    first = _first(got)[0]
    return first["verdict"] == "fail" and "MemoryError" in first["diagnosis"], first["diagnosis"][:120]


JUDGES = {
    "forge_run_one": _no_pass,
    "forge_printed_lines": _no_pass,
    "forge_in_worker": _no_pass,
    "symlinks_out": _links,
    "delegate_course": _course_code,
    "orphan_and_rewriter": _orphans,
    "sibling_overwrite": _sibling,
    "pyc_shadowing": _pyc,
    "odd_entries": _odd,
    "odd_names": _names,
    "portfolio_bombs": _bombs,
    "network_and_host_files": _snoop,
    "memory_hog": _hog,
}


def run(out: Path, reduced: bool, timeout: float, jobs: int, receipts: Path | None = RECEIPTS) -> list[dict]:
    """Every grade attack (and, given a finished run's `receipts`, every portfolio attack); one row each, also
    written to `out`/attacks.json. `out` is a new or empty folder."""
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise ConfigError(f"{out} is not empty; the campaign writes into a new or empty folder")
    token = A.new_token()
    subs = out / "submissions"
    attacks = A.build(subs, token, reduced)
    grades = out / "grades"
    grades.mkdir()
    (grades / ".shardlab-staging-999999-junk" / "checks" / "honest_stub.py").mkdir(parents=True)  # a dead run's junk
    before = A.snapshot(subs)
    lines = []
    start = time.perf_counter()
    body = grade.grade(subs, grades, jobs=jobs, timeout=timeout, echo=lines.append)
    seconds = time.perf_counter() - start
    published = {n: _digest(grades / n) for n in ("grade.json", "grade.csv", ".shardlab-manifest.json")}
    time.sleep(3)  # anything still alive would rewrite the outputs now
    after = A.snapshot(subs)
    left = A.holding(token)
    rewritten = [n for n, d in published.items() if _digest(grades / n) != d]
    rows = body["submissions"]
    honest = [n for n in ("honest_stub.py", "honest_reference.py") if n in rows]
    alone_in = out / "alone_submissions"
    alone_in.mkdir()
    for name in honest:
        shutil.copy(subs / name, alone_in / name)
    alone = grade.grade(alone_in, out / "alone", jobs=jobs, timeout=timeout)["submissions"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    table = list(csv.DictReader(open(grades / grade.TABLE, newline="", encoding="utf-8")))
    found = []

    def row(attack, held, observed):
        found.append(
            {
                "attack": attack.name,
                "what": attack.what,
                "expected": "contained" if attack.expected == "held" else "open (a known limit, see docs/handin.md)",
                "observed": observed,
                "held": bool(held) and attack.expected == "held",
                "as_expected": bool(held) if attack.expected == "held" else True,
            }
        )

    ctx = {"rows": rows, "alone": alone, "honest": honest, "left": left, "rewritten": rewritten}
    ctx.update(changed=before != after, lines=lines, table=table, peak=peak)
    for attack in attacks:
        got = {name: rows.get(name, {}).get("rows", []) for name in attack.entries}
        missing = [n for n, r in got.items() if not r]
        held, observed = (False, f"no row for {missing}") if missing else JUDGES[attack.name](got, ctx)
        row(attack, held, observed)
    # a forged row edited into grade.json is never kept as "unchanged"
    tampered = out / "tampered"
    shutil.copytree(grades, tampered, symlinks=True)
    record = json.loads((tampered / "grade.json").read_text())
    for r in record["submissions"]["honest_stub.py"]["rows"]:
        r["verdict"] = "pass"
    (tampered / "grade.json").write_text(json.dumps(record))
    try:
        again = grade.grade(subs, tampered, jobs=jobs, timeout=timeout)
        kept = "pass" in _verdicts(again["submissions"]["honest_stub.py"]["rows"])
        observed = "rerun kept the forged row" if kept else "rerun checked the file again"
    except ConfigError as exc:
        kept, observed = False, f"rerun refused: {str(exc)[:120]}"
    found.append(
        {
            "attack": "edited_record_rerun",
            "what": "grade.json edited to pass, then a rerun",
            "expected": "contained",
            "observed": observed,
            "held": not kept,
            "as_expected": not kept,
        }
    )
    for name in honest:
        same = _same_as_alone(ctx, name)
        found.append(
            {
                "attack": f"honest:{name}",
                "what": "an honest file graded beside the attackers",
                "expected": "rows as when graded alone",
                "observed": f"verdicts {_verdicts(rows[name]['rows'])}",
                "held": same,
                "as_expected": same,
            }
        )
    if receipts is not None and (receipts / "audit.json").is_file():
        from rig.grade_attacks import portfolio_attacks

        found += portfolio_attacks.run(out / "portfolio", receipts)
    summary = {"seconds": round(seconds, 1), "entries": len(rows), "rows": found, "progress": lines}
    write_json(out / "attacks.json", summary)
    return found


def add_arguments(parser) -> None:
    parser.add_argument("--out", required=True, help="folder for the submissions, grades and attacks.json")
    parser.add_argument("--reduced", action="store_true", help="leave out the honest reference (the slow row)")
    parser.add_argument("--timeout", type=seconds, default=240.0, help="each submission's bound (default 240)")
    parser.add_argument("--jobs", type=count, default=2, help="submissions graded at once (default 2)")


def command(argv=None) -> int:
    """`python -m rig.grade_attacks ARGV`: a bad command line is one UsageError line and exit code 2, as for the
    course's."""
    return cli.command("python -m rig.grade_attacks", __doc__.splitlines()[0], add_arguments, main, argv)


def main(args) -> int:
    from shardlab import outdir
    from shardlab.errors import OutputFolderError

    try:
        with outdir.writing(args.out, "grade_attacks") as staging:  # writes only inside OUT, replaces only its own
            found = run(staging, args.reduced, args.timeout, args.jobs)
    except OutputFolderError as exc:
        print(f"[shardlab grade_attacks] {exc}", file=sys.stderr)
        return 1
    for r in found:
        mark = "ok  " if r["as_expected"] else "FAIL"
        print(f"{mark} {r['attack']:24s} expected {r['expected']:40s} observed {r['observed']}")
    return 0 if all(r["as_expected"] for r in found) else 1


if __name__ == "__main__":
    sys.exit(command())
