"""The hand-in: `grade` over hostile submissions, the portfolio of a finished run, its refusals, the self-checks."""

import json
import os
import re
import shutil
import zipfile
from argparse import Namespace
from html import escape
from pathlib import Path

import nbformat
import pytest
from conftest import REPO

from shardlab.course import catalog, selfcheck
from shardlab.errors import PortfolioError
from shardlab.handin import grade, platforms, portfolio

BROKEN = Path(__file__).parent / "broken"
BOUND = 90.0  # seconds per submission: the reference needs 7 s alone and over 40 s on a loaded 2-core machine

# The course project's hand-off list, in its own order, as this test reads it (independent of items.HANDOFF):
# the item, then what its data must hold.
HANDOFF = {
    "implementation": "your implementation",
    "stage_output": "passing stage output",
    "recovery": "full-state recovery comparison",
    "changed_seed_batch": "changed-seed/batch results",
    "failures": "deliberate failure explanations",
    "trace": "actual trace",
    "ir_excerpt": "placement/IR excerpt",
    "timing": "synchronised samples",
    "report": "short report",
    "transfer": "transfer experiments",
}
REPORT_ANSWERS = {"topology", "denominator", "step_count", "next_optimisation"}


def _submissions(folder: Path) -> Path:
    folder.mkdir()
    (folder / "reference").mkdir()
    # a learner's own complete file (the reference delegates to the course's code: graded `course code`)
    shutil.copy(REPO / "tests/heldout/base3.py", folder / "reference" / "model.py")
    shutil.copy(BROKEN / "averaging_local_means.py", folder / "broken.py")
    (folder / "syntax.py").write_text("def initial(seed, data, mesh:\n    return None\n")
    (folder / "loop.py").write_text("while True:\n    pass\n")
    flood = "import sys\nopen('stray.txt', 'w').write('x')\nwhile True:\n    sys.stdout.write('x' * 4096)\n"
    (folder / "flood.py").write_text(flood)
    return folder


def _fake_portfolio(path: Path, sha256: str) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("portfolio/portfolio.json", json.dumps({"implementation": {"spec": {"sha256": sha256}}}))


@pytest.mark.sandbox
@pytest.mark.slow  # every stage of five submissions, each checked in its own bounded process
def test_grade_gives_every_submission_its_own_correct_rows(tmp_path):
    subs = _submissions(tmp_path / "subs")
    model = subs / "reference" / "model.py"
    _fake_portfolio(subs / "reference" / "portfolio.zip", portfolio.sha256_file(model))
    _fake_portfolio(subs / "broken.zip", "0" * 64)
    out = tmp_path / "grades"
    body = grade.grade(subs, out, jobs=2, timeout=BOUND)
    rows = {(r["submission"], r["stage"]): r for r in csv_rows(out / grade.TABLE)}
    assert {name for name, _ in rows} == {"reference", "broken.py", "syntax.py", "loop.py", "flood.py"}
    for stage in (1, 2, 3, 4):
        assert rows["reference", stage]["verdict"] == "pass", rows["reference", stage]
    assert rows["reference", 1]["portfolio"] == "yes"
    assert rows["broken.py", 1]["verdict"] == "course code"  # it keeps the course's sampler
    # named from the file's source (next_batch is the course's) or from the run (a stand-in of a course function)
    said = rows["broken.py", 1]["diagnosis"]
    assert rows["broken.py", 1]["passed"] == "0"
    assert "next_batch is shardlab" in said or "course's own shardlab" in said
    # its step is built from the course's local_sums and apply_momentum: graded, a failing stage names the reach
    assert rows["broken.py", 2]["verdict"] == "fail" and "local_sums" in rows["broken.py", 2]["diagnosis"]
    assert rows["broken.py", 1]["portfolio"].startswith("yes, but for another file")
    assert rows["syntax.py", 1]["verdict"] == "fail" and rows["syntax.py", 1]["first_failure"] == "implementation_loads"
    assert "SyntaxError" in rows["syntax.py", 1]["diagnosis"] and "syntax.py:1" in rows["syntax.py", 1]["diagnosis"]
    loop = rows["loop.py", 1]  # stopped by grade's bound, or by the checker's own bound on each call: not judged
    assert loop["verdict"] == "timeout", loop
    flood = rows["flood.py", 1]  # stopped by grade's cap, or by the checker's own cap on printed output
    assert flood["verdict"] == "output cap" or (
        flood["verdict"] == "fail" and "to the console" in flood["diagnosis"]
    ), flood["diagnosis"]
    for name in ("syntax.py", "loop.py", "flood.py"):
        assert [rows[name, s]["verdict"] for s in (2, 3, 4)] == ["not reached"] * 3
        assert rows[name, 1]["portfolio"] == "no"
    seconds = body["submissions"]["loop.py"]["rows"][0]["seconds"]
    assert seconds < BOUND + 30, "a bound stops the loop, promptly"
    assert seconds >= BOUND or "did not return within" in loop["diagnosis"], "grade's own bound waits its full time"
    assert len((out / "checks" / "flood.py" / "output.txt").read_bytes()) <= grade.KEPT_OUTPUT
    strays = [p for p in [Path.cwd(), subs, *subs.iterdir(), out, *out.rglob("*")] if p.name == "stray.txt"]
    assert not strays and not (Path.cwd() / "stray.txt").exists(), "a submission's files stay in its scratch folder"
    page = (out / grade.PAGE).read_text()
    assert "<table>" in page and flood["verdict"] in page and "flood.py" in page

    (subs / "syntax.py").write_text("def initial(seed, data, mesh):\n    raise NotImplementedError\n")
    again = grade.grade(subs, out, jobs=2, timeout=BOUND)
    reused = {name: entry["reused"] for name, entry in again["submissions"].items()}
    # loop.py's rows say timeout: nothing was judged, so it is checked again
    assert reused == {"reference": True, "broken.py": True, "syntax.py": False, "loop.py": False, "flood.py": True}
    assert again["submissions"]["reference"]["rows"] == body["submissions"]["reference"]["rows"]
    fixed = again["submissions"]["syntax.py"]["rows"][0]["diagnosis"]
    assert "SyntaxError" not in fixed and "does not define" in fixed, "the changed file was checked again"


STOPPED = "`restore` did not return within 20 s -> an infinite loop? (the call was stopped)"  # as the checker says it


def _check(stage: int, name: str, diagnosis: str = "") -> dict:
    return {"name": name, "stage": stage, "passed": not diagnosis, "diagnosis": diagnosis}


def test_a_stage_whose_only_failures_are_stopped_calls_is_a_timeout_never_a_fail():
    """A call stopped at its bound was not judged (a busy machine stops a correct one too): its stage says
    `timeout` and scores nothing, so the instructor grades it again; a real failure beside it still says `fail`."""
    checks = [_check(1, "initial_state_fields"), _check(2, "gradient_on_a_full_batch")]
    checks += [_check(3, "contract_pins_the_experiment"), _check(3, "fresh_process_resume", STOPPED)]
    checks += [_check(3, "save_never_overwrites", f"{STOPPED}; not called again in this run")]
    checks += [_check(4, "eager_step_matches_numpy", "the loss differs from NumPy's by 0.5")]
    checks += [_check(4, "eager_and_compiled_agree", STOPPED)]
    outcome = grade.bounded.Outcome(0, "", {"checks": checks, "environment": {}}, None, 12.0)
    rows = {row["stage"]: row for row in grade.stage_rows(outcome, BOUND)}
    assert [rows[s]["verdict"] for s in (1, 2, 3, 4)] == ["pass", "pass", "timeout", "fail"]
    assert rows[3]["first_failure"] == "fresh_process_resume" and STOPPED in rows[3]["diagnosis"]
    assert rows[3]["passed"] == 1 and platforms.stage_points(rows[3]) == 0.0
    assert rows[4]["first_failure"] == "eager_step_matches_numpy", rows[4]
    # learner text that only mentions a bound is no stop: the supervisor's verdict starts with the function's name
    said = "the implementation raised RuntimeError: restore did not return within 20 s"
    outcome.report["checks"] = [_check(1, "initial_state_fields", said)]
    assert grade.stage_rows(outcome, BOUND)[0]["verdict"] == "fail"


def csv_rows(path: Path) -> list[dict]:
    import csv

    with open(path, newline="") as handle:
        return [{**r, "stage": int(r["stage"])} for r in csv.DictReader(handle)]


def test_grade_refuses_a_folder_without_submissions(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    args = Namespace(submissions=str(tmp_path / "empty"), out=str(tmp_path / "g"), jobs=1, timeout=5, output_cap=100)
    assert grade.main(args) == 2
    assert "holds no .py file" in capsys.readouterr().err and not (tmp_path / "g").exists()


def test_the_grade_record_read_back_reuses_exactly_the_unchanged_submissions(tmp_path, monkeypatch):
    """grade.json gives the next grade every unchanged file's rows as they were; a changed file is checked again,
    and so is an unchanged one a time bound stopped (its `timeout` judged nothing)."""
    checked = []

    def stand_in(sub, folder, timeout, cap, sandboxed=True):  # grade_one without a check: one row per stage
        folder.mkdir(parents=True, exist_ok=True)
        checked.append(sub["name"])
        digest = grade.sha256_file(sub["file"])
        base = {"submission": sub["name"], "portfolio": "no", "sandbox": grade.UNSANDBOXED, "sha256": digest}
        rows = grade._not_gradable(base, f"stand-in for {digest[:12]}")
        return digest, [{**r, "verdict": "timeout"} for r in rows] if sub["name"] == "slow.py" else rows

    monkeypatch.setattr(grade, "grade_one", stand_in)
    subs, out = tmp_path / "subs", tmp_path / "grades"
    subs.mkdir()
    for name in ("a.py", "b.py", "slow.py"):
        (subs / name).write_text(f"# {name}\n")
    first = grade.grade(subs, out, jobs=1, unsandboxed=True)
    (subs / "b.py").write_text("# b.py, changed\n")
    again = grade.grade(subs, out, jobs=1, unsandboxed=True)
    assert sorted(checked) == ["a.py", "b.py", "b.py", "slow.py", "slow.py"]
    reused = {name: entry["reused"] for name, entry in again["submissions"].items()}
    assert reused == {"a.py": True, "b.py": False, "slow.py": False}
    assert again["submissions"]["a.py"]["rows"] == first["submissions"]["a.py"]["rows"]
    assert again["submissions"]["b.py"]["rows"] != first["submissions"]["b.py"]["rows"]
    assert json.loads((out / grade.RECORD).read_text()) == json.loads(json.dumps(again))


def _manifest(zipped: Path) -> tuple[dict, set]:
    with zipfile.ZipFile(zipped) as archive:
        return json.loads(archive.read("portfolio/portfolio.json")), set(archive.namelist())


@pytest.mark.notebooks
def test_the_runs_portfolio_holds_every_handoff_item(run_dir):
    manifest, names = _manifest(run_dir / portfolio.ZIP)
    by_id = {item["id"]: item for item in manifest["items"]}
    assert set(HANDOFF) <= set(by_id)
    for ident in HANDOFF:
        item = by_id[ident]
        assert item["data"] and item["sources"], ident
        for source in item["sources"]:
            path = run_dir / source["file"]
            if source["sha256"] and path.is_file():
                assert portfolio.sha256_file(path) == source["sha256"], (ident, source)
    audit = json.loads((run_dir / "audit.json").read_text())
    assert by_id["recovery"]["data"]["recovery"] == audit["recovery"]
    assert all(v == 0 for k, v in audit["recovery"].items() if k not in ("steps_compared", "epochs_covered"))
    checker = by_id["stage_output"]["data"]["checker"]
    assert set(checker) == {"1", "2", "3", "4"} and all(s["passed"] == s["checks"] > 0 for s in checker.values())
    settings = by_id["changed_seed_batch"]["data"]["other_settings"]
    assert {s["seed"] for s in settings} >= {29} and {s["batch_size"] for s in settings} >= {10}
    ir = (run_dir / "step.stablehlo.mlir").read_text()
    excerpt = "\n".join(by_id["ir_excerpt"]["data"]["excerpt"])
    assert excerpt.count("stablehlo.all_reduce") == len(re.findall(r'"stablehlo\.all_reduce"', ir)) == 3
    samples = {k: v["samples_ms"] for k, v in by_id["timing"]["data"]["variants"].items()}
    assert samples == {k: audit["timing"][k]["samples_ms"] for k in ("eager_4dev", "compiled_4dev", "compiled_1dev")}
    with zipfile.ZipFile(run_dir / portfolio.ZIP) as archive:
        for key in ("xplane", "perfetto"):
            copied = archive.read(f"portfolio/evidence/{audit['trace'][key]}")
            assert copied == (run_dir / audit["trace"][key]).read_bytes(), key
    report = by_id["report"]["data"]
    assert len(report["topology"]["devices"]) == 4 and report["boundaries"]["timing"] == audit["timing"]["boundary"]
    # a reference run has no learner: every written answer and self-check is named missing, none invented
    assert all("missing" in a for a in manifest["written_answers"].values())
    assert REPORT_ANSWERS <= set(manifest["written_answers"])
    named = [m for item in manifest["items"] for m in item["missing"]]
    assert all(any(f"`{i}`" in m for m in named) for i in manifest["written_answers"])
    assert all("missing" in s for s in manifest["selfcheck"].values())
    assert {"portfolio.html", "portfolio/report.md", "portfolio/check_report.json"} <= names
    page = (run_dir / portfolio.PAGE).read_text()
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert 'href="portfolio.html"' in (run_dir / "index.html").read_text()


def _workspace(folder: Path, name: str, answer: str, choices: dict) -> None:
    nb = nbformat.read(catalog.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    cell = nbformat.v4.new_markdown_cell(f"**Answer: denominator**\n\n{answer}")
    cell.metadata["tags"] = ["answer"]
    nb.cells.insert(3, cell)
    check = [c for c in nb.cells if "selfcheck" in c.metadata.get("tags", [])][-1]
    check.source = check.source.replace("choices = {}", f"choices = {choices!r}")
    folder.mkdir(exist_ok=True)
    nbformat.write(nb, folder / f"{name}.ipynb")


@pytest.mark.notebooks
def test_portfolio_takes_the_learners_own_words_and_scores(run_dir, tmp_path):
    asked = selfcheck.questions("stage2_update")
    right = {q.number: q.answer for q in asked[:-1]}
    wrong = {asked[-1].number: next(x for x in "abc" if x != asked[-1].answer)}
    text = "Each device holds a different number of valid rows; dividing once by the global N weights every row."
    _workspace(tmp_path / "ws", "stage2_update", text, {**right, **wrong})
    out = tmp_path / "handin"
    portfolio.build(
        out, run_dir, "reference", tmp_path / "ws", check_report=run_dir / "portfolio" / "check_report.json"
    )
    manifest, _ = _manifest(out / portfolio.ZIP)
    assert manifest["written_answers"]["denominator"]["text"] == text
    assert text in (out / "portfolio" / "report.md").read_text()
    assert "missing" in manifest["written_answers"]["step_count"]
    score = manifest["selfcheck"]["stage2_update"]
    assert (score["correct"], score["questions"]) == (len(asked) - 1, len(asked))
    assert score["passed"] == ((len(asked) - 1) / len(asked) >= 0.8)
    assert "missing" in manifest["selfcheck"]["stage1_batches"]


def _copy_run(run_dir: Path, into: Path) -> Path:
    shutil.copytree(run_dir, into, ignore=shutil.ignore_patterns("trace_fused", "portfolio*", ".shardlab-*"))
    return into


@pytest.mark.notebooks
def test_portfolio_refuses_receipts_of_another_implementation(run_dir, tmp_path):
    learner = tmp_path / "mine.py"
    shutil.copy(REPO / "lib/shardlab/learner/reference.py", learner)
    with pytest.raises(PortfolioError, match="its audit.json records reference"):
        portfolio.build(tmp_path / "a", run_dir, str(learner))
    copy = _copy_run(run_dir, tmp_path / "receipts")
    audit = json.loads((copy / "audit.json").read_text())
    audit["run"]["implementation"] = {"file": "mine.py", "sha256": "0" * 64}
    (copy / "audit.json").write_text(json.dumps(audit))
    with pytest.raises(PortfolioError, match=r"not produced by mine\.py as it is now.*0{64}"):
        portfolio.build(tmp_path / "b", copy, str(learner))
    audit["run"]["implementation"] = "reference"
    audit["sources"]["shardlab/core/update.py"] = "f" * 64
    (copy / "audit.json").write_text(json.dumps(audit))
    with pytest.raises(PortfolioError, match=r"reference changed.*shardlab/core/update\.py"):
        portfolio.build(tmp_path / "c", copy, "reference")
    assert not any((tmp_path / x).exists() for x in "abc"), "a refused portfolio writes nothing"


@pytest.mark.notebooks
def test_portfolio_of_an_unfinished_run_lists_exactly_what_is_missing(run_dir, tmp_path, capsys):
    copy = _copy_run(run_dir, tmp_path / "receipts")
    (copy / "stage4a_profile.ipynb").unlink()
    (copy / "results" / "stage3b_resume.json").unlink()
    args = Namespace(
        out=str(tmp_path / "out"), receipts=str(copy), implementation=None, workspace=None, check_report=None
    )
    assert portfolio.main(args) == 1
    err = capsys.readouterr().err
    assert "stage4a_profile.ipynb (executed)" in err and "results/stage3b_resume.json" in err
    assert "stage1_batches.ipynb" not in err and not (tmp_path / "out").exists()


def test_portfolio_of_no_run_names_every_file_a_run_leaves(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PortfolioError) as refused:
        portfolio.build(tmp_path / "out", tmp_path / "empty")
    for name in ["audit.json", *(f"{n}.ipynb" for n in catalog.NOTEBOOKS), *(f"{n}.json" for n in catalog.NOTEBOOKS)]:
        assert name in str(refused.value)
    (tmp_path / "empty" / "audit.json").write_text("[1, 2]")
    with pytest.raises(PortfolioError, match="audit.json in the shape"):
        portfolio.build(tmp_path / "out", tmp_path / "empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"], "nothing written"


def test_portfolio_reads_the_audit_within_a_bound_and_never_from_a_fifo(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    os.mkfifo(folder / "audit.json")  # opened without a bound or O_NONBLOCK, this read would wait for ever
    with pytest.raises(PortfolioError, match="missing: audit.json;"):  # not a regular file: never opened
        portfolio.build(tmp_path / "out", folder)
    (folder / "audit.json").unlink()
    (folder / "audit.json").write_text(json.dumps({"run": {}, "sources": {}, "results": {}, "pad": "x" * 200}))
    monkeypatch.setattr(portfolio, "RECEIPT_BYTES", 100)
    with pytest.raises(PortfolioError, match="audit.json is not JSON of at most 100 bytes"):
        portfolio.build(tmp_path / "out", folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"], "nothing written"


STAGES = (
    "stage1_batches stage2_update stage3a_checkpoint stage3b_resume stage3c_orbax_lesson stage4a_profile "
    "stage4b_beyond stage5a_protocol stage5b_scaling"
).split()


def test_the_self_checks_cover_every_stage_notebook():
    assert set(STAGES) <= set(catalog.NOTEBOOKS)
    assert {q.notebook for q in selfcheck.QUESTIONS} == set(STAGES)


@pytest.mark.parametrize("name", STAGES)
def test_every_stage_ends_with_its_self_check_then_its_closing_record(name):
    nb = nbformat.read(catalog.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    heading, cell, closing = nb.cells[-3:]  # the self-check is the last the learner reads; the records close it
    assert heading.cell_type == "markdown" and heading.source.startswith("## Self-check")
    assert cell.cell_type == "code" and cell.metadata.get("tags") == ["selfcheck"]
    assert closing.cell_type == "code" and closing.metadata.get("tags") == ["record"]
    assert closing.metadata.get("jupyter", {}).get("source_hidden"), f"{name}: the closing record cell is not folded"
    assert f'selfcheck.show("{name}", choices' in cell.source and "choices = {}" in cell.source  # prompts=False too
    asked = selfcheck.questions(name)
    assert len(asked) >= 3 and [q.number for q in asked] == [str(i) for i in range(1, len(asked) + 1)]
    assert all(q.answer in "abcd"[: len(q.options)] for q in asked)


def test_a_page_that_lists_its_portfolio_prompts_can_leave_them_out_of_its_self_check():
    from shardlab.course import answers

    asked = answers.prompts("stage4a_profile")
    page = " ".join((catalog.NOTEBOOK_DIR / "stage4a_profile.md").read_text().split())
    assert asked and all(f"`{p.id}` — {p.question}" in page for p in asked)  # the page lists each one, in full
    with_prompts, without = (selfcheck.render("stage4a_profile", {}, prompts=shown) for shown in (True, False))
    assert all(f"Answer: {p.id}" in with_prompts for p in asked)
    assert not any(p.id in without for p in asked) and "make portfolio" not in without


def test_self_check_score_is_the_fraction_right_against_80_percent():
    asked = selfcheck.questions("stage1_batches")
    key = {q.number: q.answer for q in asked}
    flip = {q.number: next(x for x in "abc" if x != q.answer) for q in asked}
    for wrong in range(len(asked) + 1):
        choices = {**key, **{q.number: flip[q.number] for q in asked[:wrong]}}
        result = selfcheck.score("stage1_batches", choices)
        assert result["correct"] == len(asked) - wrong
        assert result["passed"] == ((len(asked) - wrong) / len(asked) >= 0.8)
    partial = selfcheck.score("stage1_batches", {"1": key["1"]})
    assert partial["unanswered"] == [q.number for q in asked[1:]] and not partial["passed"]


@pytest.mark.notebooks
def test_self_check_evidence_is_what_the_stage_recorded(run_dir):
    for q in selfcheck.QUESTIONS:
        notebook, key = q.evidence.split(":")
        recorded = json.loads((run_dir / "results" / f"{notebook}.json").read_text())
        assert key in recorded, f"{notebook} question {q.number} points at {key}, which the stage does not record"
    nb = nbformat.read(run_dir / "stage2_update.ipynb", as_version=4)
    (asked,) = [c for c in nb.cells if "selfcheck" in c.metadata.get("tags", [])]
    shown = "".join(o.get("data", {}).get("text/html", "") for o in asked.outputs)
    assert shown.count("<details>") == len(selfcheck.questions("stage2_update")) and "Not answered yet" in shown


# A portfolio from the committed receipts (no notebook runs here): the run's own check report is reused.
RECEIPTS = REPO / "receipts"


def _receipts_copy(into: Path) -> Path:
    shutil.copytree(RECEIPTS, into, ignore=shutil.ignore_patterns("portfolio*", ".shardlab-staging-*"))
    return into


# A stage 4 hypothesis as a learner writes it into their copy's `mine = None` line.
MINE = {"change": "one_call_reshuffle", "threshold_ms": 0.05, "because": "jitted_dispatch is the widest part I own"}


def _with_mine(nb, mine) -> None:
    """Write `mine` into the `mine = None` line of stage 4a's hypothesis cell, as a learner would in Lab."""
    cell = next(c for c in nb.cells if "hypothesis" in c.metadata.get("tags", []))
    assert "\nmine = None" in "\n" + cell.source
    cell.source = cell.source.replace("mine = None", f"mine = {mine!r}" if not isinstance(mine, str) else mine)


def _full_workspace(folder: Path, mine=MINE) -> dict:
    """Every notebook's copy with an `answer` cell per prompt, every self-check letter right and (unless `mine` is
    None) a stage 4 hypothesis; {id: text}."""
    from shardlab.course import answers

    written = {}
    folder.mkdir()
    for name in catalog.NOTEBOOKS:
        nb = nbformat.read(catalog.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
        if name == "stage4a_profile" and mine is not None:
            _with_mine(nb, mine)
        for prompt in answers.prompts(name):
            written[prompt.id] = f"My own words on {prompt.id}.\n\nA second paragraph with <b>markup</b>."
            cell = nbformat.v4.new_markdown_cell(f"Answer: {prompt.id}\n{written[prompt.id]}")
            cell.metadata["tags"] = ["answer"]
            nb.cells.append(cell)
        marked = [c for c in nb.cells if "selfcheck" in c.metadata.get("tags", [])]
        if marked:
            letters = {q.number: q.answer for q in selfcheck.questions(name)}
            marked[-1].source = marked[-1].source.replace("choices = {}", f"choices = {letters!r}")
        nbformat.write(nb, folder / f"{name}.ipynb")
    return written


@pytest.mark.slow  # a copy of the receipts and a whole portfolio build
@pytest.mark.skipif(not (RECEIPTS / "portfolio" / "check_report.json").is_file(), reason="needs make run's receipts")
def test_portfolio_without_answers_says_incomplete_with_how_to_add_each(tmp_path, capsys):
    from shardlab.course import answers

    manifest, shown = _portfolio_of(tmp_path, tmp_path / "no_workspace", capsys)
    required = [n for n in catalog.NOTEBOOKS if n not in catalog.OPTIONAL]  # an optional self-check is never missing
    asked = len(answers.PROMPTS) + sum(bool(selfcheck.questions(n)) for n in required)
    optional = [
        m for m in manifest["status"]["missing"] if m["item"] not in ("selfcheck",) and "written" not in m["what"]
    ]
    expected = asked + len(optional)
    assert f"incomplete: {expected} items missing" in shown.splitlines()[0] and "ready" not in shown
    assert manifest["status"]["ready"] is False and len(manifest["status"]["missing"]) == expected
    assert all(m["how"] for m in manifest["status"]["missing"])
    how_to = manifest["status"]["how_to"]
    assert "tag `answer`" in how_to["answer"] and "`Answer: ID`" in how_to["answer"]
    first = manifest["status"]["first"]  # no workspace yet: make lab first, said once
    assert "make lab" in first and shown.count(first) == 1 and not any("make lab" in h for h in how_to.values())
    # the notebooks' own self-check cells show string keys: the how-to's example must be the same
    examples = re.findall(
        r"choices = \{\}.*?e\.g\. (\{[^}]*\})", (catalog.NOTEBOOK_DIR / "stage1_batches.md").read_text()
    )
    assert examples and all(f"choices = {example}" in how_to["selfcheck"] for example in examples), examples
    for prompt in answers.PROMPTS:
        where = next(m["how"] for m in manifest["status"]["missing"] if f"`{prompt.id}`" in m["what"])
        assert f"`Answer: {prompt.id}`" in where and f"{prompt.notebook}.ipynb" in where
    # the run judged the worked example and the workspace holds no hypothesis: it is missing, never "complete"
    assert [m["kind"] for m in manifest["status"]["missing"]].count("hypothesis") == 1
    page = (tmp_path / "out" / portfolio.PAGE).read_text()
    assert f"Status: incomplete: {expected} items missing" in page
    # each kind's how said once on the page and once on the console, above the numbered entries of that kind
    assert page.count("how: ") == len(how_to) == shown.count("  how: ")
    for kind, text in how_to.items():
        assert page.count(escape(text)) == 1 and shown.count(text) == 1, kind
    assert "<pre>" not in page  # the JSON beside the page
    # the list follows the course: each missing entry's notebook comes no earlier than the one before it
    order = {name: i for i, name in enumerate(catalog.NOTEBOOKS)}
    where = {p.id: order[p.notebook] for p in answers.PROMPTS}
    places = {"answer": [], "selfcheck": []}  # within each kind, in the order the notebooks come
    for m in manifest["status"]["missing"]:
        answer, letters = re.match(r"written answer `(\w+)`", m["what"]), re.match(r"self-check of (\w+)", m["what"])
        if answer or letters:
            places[m["kind"]].append(where[answer[1]] if answer else order[letters[1]])
    assert all(p == sorted(p) for p in places.values()) and sum(map(len, places.values())) == asked, places
    kinds = [m["kind"] for m in manifest["status"]["missing"]]
    assert kinds == sorted(kinds, key=kinds.index)  # each kind's entries together, under its one how-to
    assert '<img src="portfolio/evidence/evidence.png"' in page and "portfolio/portfolio.json" in page
    assert "<th>what ran</th>" in page and "the enumerated checks only; the randomised search (" in page


@pytest.mark.skipif(not (RECEIPTS / "portfolio" / "check_report.json").is_file(), reason="needs make run's receipts")
@pytest.mark.slow  # a copy of the committed receipts and a portfolio built from it: make test's, not the inner loop's
def test_portfolio_with_every_answer_shows_them_and_is_ready_only_if_nothing_is_missing(tmp_path, capsys):
    written = _full_workspace(tmp_path / "ws")
    manifest, shown = _portfolio_of(tmp_path, tmp_path / "ws", capsys)
    left = manifest["status"]["missing"]
    assert not [m for m in left if "written answer" in m["what"] or m["item"] == "selfcheck"]
    if left:  # results this run's course version did not record: named, never called ready
        assert f"incomplete: {len(left)} item" in shown and "ready" not in shown.splitlines()[0]
    else:
        assert shown.startswith("[shardlab portfolio] ready to hand in") and manifest["status"]["ready"] is True
    page = (tmp_path / "out" / portfolio.PAGE).read_text()
    for ident, text in written.items():
        assert manifest["written_answers"][ident]["text"] == text
        assert "My own words on " + ident + ".</p><p>A second paragraph with &lt;b&gt;markup&lt;/b&gt;." in page
    assert all(s.get("passed") for s in manifest["selfcheck"].values())
    # the hypothesis written into the workspace copy reaches the report, labelled as not the one the run judged
    report = (tmp_path / "out" / "portfolio" / "report.md").read_text()
    yours = report.split("## Your stage 4 hypothesis\n", 1)[1].split("\n## ", 1)[0]
    assert MINE["because"] in yours and MINE["change"] in yours and "MISSING" not in yours
    assert "worked example" in yours  # make run judged the course's example, and the report says so


def _portfolio_of(tmp_path, workspace: Path, capsys) -> tuple[dict, str]:
    """(portfolio.json, what was printed) of a portfolio built from a copy of the receipts and `workspace`."""
    receipts = _receipts_copy(tmp_path / "receipts")
    args = Namespace(
        out=str(tmp_path / "out"),
        receipts=str(receipts),
        implementation="reference",
        workspace=str(workspace),
        check_report=str(RECEIPTS / "portfolio" / "check_report.json"),
    )
    assert portfolio.main(args) == 0
    manifest = json.loads((tmp_path / "out" / "portfolio" / "portfolio.json").read_text())
    return manifest, capsys.readouterr().out


@pytest.mark.slow  # a copy of the receipts and a whole portfolio build
@pytest.mark.skipif(not (RECEIPTS / "portfolio" / "check_report.json").is_file(), reason="needs make run's receipts")
def test_every_answer_but_no_hypothesis_is_not_ready(tmp_path, capsys):
    """The run judged the worked example (its notebook's `mine` is None): with the workspace copy's `mine` still
    None, the one missing entry is the hypothesis, and nothing says ready."""
    audit = json.loads((RECEIPTS / "audit.json").read_text())
    assert audit["trace"]["example_run"] is True  # make run executes the course's notebooks, not the workspace's
    _full_workspace(tmp_path / "ws", mine=None)
    manifest, shown = _portfolio_of(tmp_path, tmp_path / "ws", capsys)
    hypothesis = [m for m in manifest["status"]["missing"] if m["kind"] == "hypothesis"]
    assert len(hypothesis) == 1 and "mine = None" in hypothesis[0]["what"]
    assert manifest["status"]["ready"] is False and "ready" not in shown.splitlines()[0]
    assert "stage4a_profile.ipynb" in manifest["status"]["how_to"]["hypothesis"]
    page = (tmp_path / "out" / portfolio.PAGE).read_text()
    assert "ready to hand in" not in page
    report = next(i for i in manifest["items"] if i["id"] == "report")
    assert report["missing"] == [hypothesis[0]["what"]] and "your_hypothesis" not in report["data"]


@pytest.mark.parametrize(
    "mine, why",
    [
        ({"change": "one_call_reshuffle", "threshold_ms": 0.05}, "not exactly"),
        ({"change": "a faster computer", "threshold_ms": 0.05, "because": "x"}, "menu"),
        ({"change": "one_call_reshuffle", "threshold_ms": -1, "because": "x"}, "above 0"),
        ({"change": "one_call_reshuffle", "threshold_ms": 0.05, "because": " "}, "empty"),
    ],
)
def test_a_hypothesis_of_the_wrong_shape_is_named_missing_with_why(tmp_path, mine, why):
    from shardlab.handin import workspace_reader

    nb = nbformat.read(catalog.NOTEBOOK_DIR / "stage4a_profile.ipynb", as_version=4)
    _with_mine(nb, mine)
    (tmp_path / "ws").mkdir()
    nbformat.write(nb, tmp_path / "ws" / "stage4a_profile.ipynb")
    found = workspace_reader.hypothesis(tmp_path / "ws")
    assert set(found) == {"missing"} and why in found["missing"], found


def test_the_hypothesis_cell_is_read_never_run(tmp_path):
    from shardlab.handin import workspace_reader

    planted = tmp_path / "ran"
    nb = nbformat.read(catalog.NOTEBOOK_DIR / "stage4a_profile.ipynb", as_version=4)
    _with_mine(nb, f"mine = open({str(planted)!r}, 'w').write('x') or {MINE!r}")
    (tmp_path / "ws").mkdir()
    nbformat.write(nb, tmp_path / "ws" / "stage4a_profile.ipynb")
    assert "missing" in workspace_reader.hypothesis(tmp_path / "ws") and not planted.exists()
    assert workspace_reader.hypothesis(None) == {"missing": "no workspace given"}
    nb = nbformat.read(catalog.NOTEBOOK_DIR / "stage4a_profile.ipynb", as_version=4)
    _with_mine(nb, MINE)
    nbformat.write(nb, tmp_path / "ws" / "stage4a_profile.ipynb")
    assert workspace_reader.hypothesis(tmp_path / "ws") == {"value": MINE, "file": "stage4a_profile.ipynb"}


def test_each_checker_count_says_whether_the_randomised_search_ran(tmp_path):
    """A notebook's check cell leaves the search out; its count must say so, naming the checks it left out."""
    from shardlab.checker.cli import checks_of
    from shardlab.handin import items

    names = {s: [c.__name__ for c in checks_of(s)] for s in (1, 2, 3, 4)}
    searched = {s: [n for n in names[s] if n.startswith("random_")] for s in names}  # the search's naming
    assert searched[1] and searched[3] and not searched[4]

    def cell(stage, count):
        return {"check": {"stage": stage, "checks": count, "failed": [], "passed": True}}

    audit = {
        "results": {
            "stage1_batches": cell(1, len(names[1]) - len(searched[1])),  # as the notebooks' cells record it
            "stage2_update": cell(2, len(names[2])),  # a cell that ran every check
        }
    }
    ran = [n for n in names[3] if n not in searched[3]] + names[4]  # a report of stages 3 and 4 without the search
    stage_of = {n: s for s in names for n in names[s]}
    report = {"checks": [{"stage": stage_of[n], "name": n, "passed": True, "diagnosis": ""} for n in ran]}
    rows = items.stage_output(items.Run(tmp_path, audit, "reference", report, {}, {})).data["checker"]
    for stage in ("1", "3"):
        scope = rows[stage]["scope"]
        assert "enumerated checks only" in scope and all(n in scope for n in searched[int(stage)]), scope
        assert f"{len(searched[int(stage)])} check" in scope
    assert "randomised search included" in rows["2"]["scope"] and "randomised search included" in rows["4"]["scope"]
    assert rows["1"]["checks"] == len(names[1]) - len(searched[1]) and rows["3"]["checks"] == len(ran) - len(names[4])


@pytest.mark.parametrize("target, command", [("run", "shardlab run"), ("portfolio", "shardlab portfolio")])
def test_make_run_and_make_portfolio_read_the_same_workspace(target, command):
    """make run builds the run's own portfolio; it reads the WORKSPACE make portfolio reads, default or given."""
    import argparse
    import subprocess

    from shardlab.course import execute

    for given, expected in ((["WORKSPACE=/elsewhere/ws"], "/elsewhere/ws"), ([], "workspace")):
        printed = subprocess.run(
            ["make", "-n", target, *given], cwd=REPO, capture_output=True, text=True, timeout=60
        ).stdout
        line = next(x for x in printed.splitlines() if command in x)
        assert f"--workspace {expected} " in line, line
    parser = argparse.ArgumentParser()
    execute.add_arguments(parser)
    assert parser.parse_args(["--workspace", "ws"]).workspace == "ws" and parser.parse_args([]).workspace is None


def test_the_workspace_ledger_and_the_last_grade_record_are_read_with_a_bound(tmp_path):
    """Both are JSON a command left in a folder the learner or instructor owns, read back by `io.read_record`: a
    FIFO put in their place reads as absent (never a hang), a file past its bound too, one at the bound as what it
    holds, and anything but a JSON object as absent."""
    import os

    from shardlab.course import workspace
    from shardlab.io import read_record

    path = tmp_path / grade.RECORD
    text = json.dumps({"stage1_batches": "0" * 64})
    path.write_text(text)
    assert read_record(path, len(text)) == json.loads(text)
    assert read_record(path, len(text) - 1) == {}
    for other in ("[1, 2]", "not json", "[" * 100_000):
        path.write_text(other)
        assert read_record(path, grade.RECORD_BYTES) == {}, other[:10]
    path.unlink()
    assert read_record(path, grade.RECORD_BYTES) == {}
    os.mkfifo(path)
    assert read_record(path, grade.RECORD_BYTES) == {}
    folder = tmp_path / "workspace"
    folder.mkdir()
    os.mkfifo(folder / workspace.LEDGER)  # the command reads its ledger through read_record: no ledger, no hang
    assert set(workspace.prepare(folder).values()) == {"copied"}


def test_an_optional_notebook_s_self_check_counts_only_when_answered(tmp_path):
    from shardlab.handin import workspace_reader

    (name,) = catalog.OPTIONAL
    assert selfcheck.questions(name)  # it has questions, yet an empty workspace is not missing them
    scores = workspace_reader.selfcheck_scores(None)
    assert name not in scores and all("missing" in s for s in scores.values()), scores
    asked = selfcheck.questions(name)
    nb = nbformat.read(catalog.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    check = [c for c in nb.cells if "selfcheck" in c.metadata.get("tags", [])][-1]
    check.source = check.source.replace("choices = {}", f"choices = { ({q.number: q.answer for q in asked})!r}")
    nbformat.write(nb, tmp_path / f"{name}.ipynb")
    score = workspace_reader.selfcheck_scores(tmp_path)[name]
    assert (score["correct"], score["questions"]) == (len(asked), len(asked)), score


def test_a_report_that_ran_in_a_private_folder_names_its_files_by_their_own_names(tmp_path):
    """grade's checks and the portfolio's report drop the folder a copy ran in from every string, even one whose
    name JSON escapes; the folder's name without its separator, or another folder, is left as it was."""
    from shardlab.io import without_folder

    folder = tmp_path / 'a "quoted" \\ folder'
    report = {
        "checks": [{"diagnosis": f"{folder}/model.py:3: SyntaxError", "files": [f"{folder}/data/x.npz"]}],
        f"{folder}/key": f"{folder}",
        "elsewhere": "/srv/other/model.py",
    }
    assert without_folder(report, folder) == {
        "checks": [{"diagnosis": "model.py:3: SyntaxError", "files": ["data/x.npz"]}],
        "key": str(folder),
        "elsewhere": "/srv/other/model.py",
    }


@pytest.mark.parametrize(("asked", "needed"), [(4, 4), (5, 4), (10, 8)])
def test_the_pass_mark_is_also_said_as_a_number_of_questions(asked, needed):
    result = {"questions": asked, "answered": asked, "correct": needed - 1, "unanswered": [], "fraction": 0.0}
    said = selfcheck.verdict({**result, "passed": False})
    # by hand: the fewest right answers whose fraction reaches 80 %
    assert min(k for k in range(asked + 1) if k / asked >= 0.8) == needed
    assert f"({needed} of {asked} right)" in said, said
    assert f"({needed} of {asked} right)" in selfcheck.verdict({**result, "answered": 0})
