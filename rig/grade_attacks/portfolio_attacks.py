"""Attacks on `portfolio`: hand-edited receipts, links, a made-up check report, relabelled receipts.

Each builds a portfolio from a copy of a finished run's receipts (the committed `receipts/`) changed
one way, and records whether `portfolio` refused it, named what changed, and wrote nothing outside `--out`.
"""

import json
import os
import shutil
from pathlib import Path

from shardlab.checker.watch import REPORT
from shardlab.errors import ConfigError, PortfolioError
from shardlab.handin import portfolio


def _listing(folder: Path) -> set:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _attempt(name: str, what: str, work: Path, receipts: Path, change, expect: str, **build) -> dict:
    copy = work / name / "receipts"
    shutil.copytree(receipts, copy, symlinks=True)
    implementation = change(copy) or "reference"
    report = build.get("check_report", copy / "portfolio" / "check_report.json")
    outside = _listing(work / name)
    try:
        portfolio.build(work / name / "out", copy, implementation, None, check_report=report)
        observed, refused = "built", False
    except (PortfolioError, ConfigError) as exc:
        observed, refused = f"refused: {str(exc)[:150]}", True
    escaped = sorted(
        _listing(work / name) - outside - {"out"} - {x for x in _listing(work / name) if x.startswith("out")}
    )
    held = refused and expect in observed and not escaped and not (work / name / "out").exists()
    return {
        "attack": name,
        "what": what,
        "expected": f"refused, naming {expect!r}, nothing written",
        "observed": observed + (f"; wrote outside --out: {escaped}" if escaped else ""),
        "held": held,
        "as_expected": held,
    }


def _baseline(work: Path, receipts: Path) -> dict:
    """The unchanged receipts must build, so that each refusal below is the attack's and not a stale run's."""
    copy = work / "baseline" / "receipts"
    shutil.copytree(receipts, copy, symlinks=True)
    try:
        portfolio.build(work / "baseline" / "out", copy, "reference", None, check_report=copy / "portfolio" / REPORT)
        built, why = True, "built"
    except (PortfolioError, ConfigError) as exc:
        built, why = False, f"refused: {str(exc)[:200]} (regenerate the receipts with make run)"
    what = "the unchanged receipts, so that each refusal below is the attack's"
    return {
        "attack": "portfolio_baseline",
        "what": what,
        "expected": "built",
        "observed": why,
        "held": built,
        "as_expected": built,
    }


def run(work: Path, receipts: Path) -> list[dict]:
    work.mkdir(parents=True)

    def dotdot(copy):
        audit = json.loads((copy / "audit.json").read_text())
        audit["trace"]["perfetto"] = "../../escaped_by_portfolio.json.gz"
        (copy / "audit.json").write_text(json.dumps(audit))

    def linked(copy):
        (copy / "stage1_batches.html").unlink()
        os.symlink("/etc/hostname", copy / "stage1_batches.html")

    def relabelled(copy):
        from shardlab.learner import reference

        mine = copy.parent / "mine.py"
        shutil.copy(reference.__file__, mine)
        audit = json.loads((copy / "audit.json").read_text())
        audit["run"]["implementation"] = {"file": "mine.py", "sha256": portfolio.sha256_file(mine)}
        (copy / "audit.json").write_text(json.dumps(audit))
        return str(mine)

    forged = work / "forged_check_report.json"
    forged.write_text(json.dumps({"implementation": "reference", "passed": True, "checks": []}))
    first = _baseline(work, receipts)
    if not first["held"]:
        return [first]
    return [
        first,
        _attempt(
            "portfolio_dotdot_path", "a ../ path in a hand-edited audit.json", work, receipts, dotdot, "audit.json"
        ),
        _attempt(
            "portfolio_symlink",
            "a receipt replaced by a link to a host file",
            work,
            receipts,
            linked,
            "stage1_batches.html",
        ),
        _attempt(
            "forged_check_report",
            "a made-up --check-report",
            work,
            receipts,
            lambda c: None,
            "not written by this run",
            check_report=forged,
        ),
        _attempt(
            "relabelled_receipts",
            "the reference's receipts relabelled as a learner's file",
            work,
            receipts,
            relabelled,
            "audit.json",
        ),
    ]
