"""What the runner spends: nbformat without jsonschema's IRI grammars, and the portfolio's check started early."""

import json
import subprocess
import sys

import pytest

from shardlab.course import catalog

CHILD = """
import json, sys
from shardlab.course import execute
if sys.argv[1] == "runner":
    execute._without_iri_grammars()
import nbformat
from nbformat import ValidationError

nb = nbformat.read(sys.argv[2], as_version=4)
nbformat.validate(nb)  # the course's notebook is valid
broken = nbformat.from_dict(json.loads(nbformat.writes(nb)))
broken.cells[0].pop("source")
try:
    nbformat.validate(broken)
    refused = False
except ValidationError:
    refused = True
print(json.dumps({"loaded": sys.modules.get(execute.UNUSED_AT_IMPORT) is not None, "refused": refused}))
"""


def _child(mode: str) -> dict:
    notebook = str(catalog.NOTEBOOK_DIR / "stage1_batches.ipynb")
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, notebook], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two fresh interpreters that import the library and nbformat: make test's, not the inner loop's
def test_the_runner_leaves_out_the_iri_grammars_and_nbformat_still_refuses_a_broken_notebook():
    plain, runner = _child("plain"), _child("runner")
    assert plain == {"loaded": True, "refused": True}  # installed, and loaded by jsonschema when left alone
    assert runner == {"loaded": False, "refused": True}  # left out, and validation is what it was


# ---- the portfolio's check of the stages no notebook checked, started beside the run's last steps ----


def _staging(tmp_path, checked: dict, executed=catalog.NOTEBOOKS) -> tuple:
    """OUT and a staging folder in it holding the `executed` notebooks, whose results record each notebook's
    check of its stage (passed or not)."""
    from shardlab import outdir

    out = tmp_path / "out"
    staging = out / f"{outdir.STAGING}1-x"
    (staging / "results").mkdir(parents=True)
    for name in executed:
        (staging / f"{name}.ipynb").write_text("{}")
    for notebook, (stage, passed) in checked.items():
        (staging / "results" / f"{notebook}.json").write_text(json.dumps({"check": {"stage": stage, "passed": passed}}))
    return out, staging


def test_the_started_check_runs_the_stages_no_notebook_passed_and_is_used_only_for_them(tmp_path, monkeypatch):
    from shardlab.checker.cli import STAGES
    from shardlab.course import execute
    from shardlab.handin import bounded, portfolio

    calls = []

    def fake_check(implementation, folder, stages):
        calls.append((implementation, list(stages), folder))
        report = {"checks": [{"stage": s, "number": len(calls)} for s in stages]}
        return bounded.Outcome(0, "", report, None, 0.0)

    monkeypatch.setattr(portfolio, "bounded_check", fake_check)
    checked = {"stage1_batches": (1, True), "stage2_update": (2, False), "stage3b_resume": (3, True)}
    out, staging = _staging(tmp_path, checked)
    expected = sorted(set(STAGES) - {1, 3})  # every stage but the ones a notebook recorded as passed
    started = execute._StartedCheck.begin(out, staging, "reference", list(catalog.NOTEBOOKS))
    assert started is not None and calls[0][:2] == ("reference", expected)
    folder = calls[0][2]
    assert folder.parent.parent == out and folder.parent.name.startswith(execute.outdir.STAGING)  # inside OUT
    assert started("/elsewhere/mine.py", expected) is None and started("reference", [4]) is None
    audit = {"results": {n: {"check": {"stage": s, "passed": ok}} for n, (s, ok) in checked.items()}}
    assert portfolio.stages_left(audit) == expected
    report = portfolio.checker_report("reference", None, tmp_path / "scratch", audit, started=started)
    assert report == {"checks": [{"stage": s, "number": 1} for s in expected]} and len(calls) == 1  # the started one
    started.close()
    assert sorted(p.name for p in out.iterdir()) == [staging.name]  # its folder is gone, the staging one stays

    ran_here = portfolio.checker_report("reference", None, tmp_path / "scratch", audit, started=lambda *a: None)
    assert ran_here == {"checks": [{"stage": s, "number": 2} for s in expected]}  # none started: checked here


def test_no_check_is_started_for_a_partial_run_or_when_every_stage_was_checked(tmp_path, monkeypatch):
    from shardlab.checker.cli import STAGES
    from shardlab.course import execute
    from shardlab.handin import portfolio

    monkeypatch.setattr(portfolio, "bounded_check", lambda *a: pytest.fail("no check should start"))
    out, staging = _staging(tmp_path, {f"n{s}": (s, True) for s in STAGES})
    assert execute._StartedCheck.begin(out, staging, "reference", list(catalog.NOTEBOOKS)) is None
    out, staging = _staging(tmp_path / "partial", {"stage1_batches": (1, True)})
    assert execute._StartedCheck.begin(out, staging, "reference", ["stage1_batches"]) is None
    out, staging = _staging(tmp_path / "one-missing", {"stage1_batches": (1, True)}, catalog.NOTEBOOKS[:-1])
    assert portfolio.left_out(staging) == catalog.NOTEBOOKS[-1:]  # the portfolio would not be built: no check
    assert execute._StartedCheck.begin(out, staging, "reference", list(catalog.NOTEBOOKS)) is None
