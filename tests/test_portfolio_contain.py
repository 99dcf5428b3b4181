"""`portfolio` over the committed receipts: it reads only the run's own files and writes only inside --out."""

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import REPO

from shardlab.errors import PortfolioError
from shardlab.handin import contain, portfolio

RECEIPTS = REPO / "receipts"


@pytest.fixture
def receipts(tmp_path) -> Path:
    copy = tmp_path / "receipts"
    shutil.copytree(RECEIPTS, copy, symlinks=True)
    return copy


def _report(receipts: Path) -> Path:
    return receipts / "portfolio" / "check_report.json"


def _tree(folder: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*")} if folder.exists() else {}


def test_the_run_s_own_receipts_build_a_portfolio(receipts, tmp_path):
    out = portfolio.build(tmp_path / "out", receipts, "reference", None, check_report=_report(receipts))
    assert (out / portfolio.ZIP).is_file()


def test_an_edited_receipt_is_refused_and_named(receipts, tmp_path):
    results = receipts / "results" / "stage2_update.json"
    results.write_text(results.read_text().replace("1", "2", 1))
    with pytest.raises(PortfolioError, match=r"changed after the run wrote it: results/stage2_update\.json"):
        portfolio.build(tmp_path / "out", receipts, "reference", None, check_report=_report(receipts))
    assert not (tmp_path / "out").exists()


def test_a_receipt_replaced_by_a_link_is_refused(receipts, tmp_path):
    target = receipts / "stage1_batches.html"
    secret = tmp_path / "secret.txt"
    secret.write_text("not the run's")
    target.unlink()
    os.symlink(secret, target)
    with pytest.raises(PortfolioError, match="stage1_batches.html"):
        portfolio.build(tmp_path / "out", receipts, "reference", None, check_report=_report(receipts))


def test_paths_from_the_run_stay_inside_their_folders(tmp_path):
    folder = tmp_path / "f"
    (folder / "sub").mkdir(parents=True)
    assert contain.member(folder, "sub/x.json") == folder / "sub" / "x.json"
    for bad in ("../outside.txt", "/etc/passwd", "sub/../../x", ""):
        with pytest.raises(PortfolioError):
            contain.member(folder, bad)
    os.symlink(tmp_path, folder / "out")
    with pytest.raises(PortfolioError, match="link"):
        contain.member(folder, "out/anything")
    (tmp_path / "elsewhere.txt").write_text("x")
    with pytest.raises(PortfolioError, match="outside the receipts"):
        contain.source(folder, tmp_path / "elsewhere.txt")


def test_a_made_up_check_report_is_refused(receipts, tmp_path):
    forged = tmp_path / "check_report.json"
    forged.write_text(json.dumps({"implementation": "mine.py", "passed": True, "checks": []}))
    with pytest.raises(PortfolioError, match="was not written by this run"):
        portfolio.build(tmp_path / "out", receipts, "reference", None, check_report=forged)
    mine = tmp_path / "mine.py"
    mine.write_text("x = 1\n")
    sha = portfolio.sha256_file(mine)
    assert contain.check_report(_write(tmp_path / "r1.json", mine, sha), receipts, str(mine))["checks"] == []
    with pytest.raises(PortfolioError):
        contain.check_report(_write(tmp_path / "r2.json", mine, "0" * 64), receipts, str(mine))


def _write(path: Path, implementation: Path, sha: str) -> Path:
    path.write_text(json.dumps({"implementation": str(implementation), "implementation_sha256": sha, "checks": []}))
    return path


def test_a_made_up_reference_report_outside_the_run_is_refused(receipts, tmp_path):
    forged = tmp_path / "check_report.json"
    forged.write_text(json.dumps({"implementation": "reference", "passed": True, "checks": []}))
    with pytest.raises(PortfolioError, match="was not written by this run"):
        portfolio.build(tmp_path / "out", receipts, "reference", None, check_report=forged)
