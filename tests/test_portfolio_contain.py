"""What `portfolio` may read: paths inside their folders, receipts as the run's manifest records them, own reports."""

import json
import os
from pathlib import Path

import pytest

from shardlab import outdir
from shardlab.core.files import sha256_file
from shardlab.errors import PortfolioError
from shardlab.handin import contain


def _run_folder(tmp_path: Path) -> Path:
    """A folder published the way `python -m shardlab run` publishes receipts (its manifest section 'run')."""
    receipts = tmp_path / "receipts"
    with outdir.writing(receipts, contain.RUN_COMMAND) as staging:
        (staging / "results").mkdir()
        (staging / "results" / "stage2.json").write_text('{"loss": 1.5}')
        (staging / "page.html").write_text("<p>run</p>")
        (staging / "portfolio").mkdir()
        (staging / "portfolio" / "check_report.json").write_text('{"implementation": "reference", "checks": []}')
    return receipts


def test_unchanged_receipts_pass_and_an_edited_one_is_named(tmp_path):
    receipts = _run_folder(tmp_path)
    contain.verify_receipts(receipts)
    (receipts / "results" / "stage2.json").write_text('{"loss": 0.1}')
    with pytest.raises(PortfolioError, match=r"changed after the run wrote it: results/stage2\.json"):
        contain.verify_receipts(receipts)
    (receipts / "results" / "stage2.json").unlink()
    contain.verify_receipts(receipts)  # absent is not edited: the item that needs it says it is missing


def test_a_receipt_replaced_by_a_link_or_a_missing_manifest_is_refused(tmp_path):
    receipts = _run_folder(tmp_path)
    secret = tmp_path / "secret.html"
    secret.write_bytes((receipts / "page.html").read_bytes())  # the same bytes, but not the run's file
    (receipts / "page.html").unlink()
    os.symlink(secret, receipts / "page.html")
    with pytest.raises(PortfolioError, match=r"page\.html"):
        contain.verify_receipts(receipts)
    (tmp_path / "bare").mkdir()
    with pytest.raises(PortfolioError, match="no record of the files"):
        contain.verify_receipts(tmp_path / "bare")


def test_only_files_the_run_wrote_are_copied(tmp_path):
    receipts = _run_folder(tmp_path)
    assert contain.source(receipts, receipts / "page.html") == receipts / "page.html"
    (receipts / "planted.html").write_text("not the run's")
    with pytest.raises(PortfolioError, match="not a file the run wrote"):
        contain.source(receipts, receipts / "planted.html")


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
    mine = tmp_path / "mine.py"
    mine.write_text("x = 1\n")
    assert contain.source(folder, mine, str(mine)) == mine, "the implementation file itself may be copied"


def test_a_check_report_is_trusted_only_if_the_run_wrote_it_or_it_names_the_file(tmp_path):
    receipts = _run_folder(tmp_path)
    own = receipts / "portfolio" / "check_report.json"
    assert contain.check_report(own, receipts, "reference")["checks"] == []
    forged = tmp_path / "check_report.json"
    forged.write_text(json.dumps({"implementation": "reference", "passed": True, "checks": []}))
    with pytest.raises(PortfolioError, match="was not written by this run"):
        contain.check_report(forged, receipts, "reference")
    mine = tmp_path / "mine.py"
    mine.write_text("x = 1\n")
    for sha, trusted in ((sha256_file(mine), True), ("0" * 64, False)):
        forged.write_text(json.dumps({"implementation": str(mine), "implementation_sha256": sha, "checks": []}))
        if trusted:
            assert contain.check_report(forged, receipts, str(mine))["checks"] == []
        else:
            with pytest.raises(PortfolioError):
                contain.check_report(forged, receipts, str(mine))
    copied = tmp_path / "copied_report.json"
    copied.write_bytes(own.read_bytes())
    assert contain.check_report(copied, receipts, "reference")["checks"] == [], "the run's report, copied elsewhere"
    own.write_text('{"implementation": "reference", "passed": true, "checks": []}')  # edited after the run
    with pytest.raises(PortfolioError, match="was not written by this run"):
        contain.check_report(own, receipts, "reference")
