"""What the checker accepts, the course runs: a correct file written differently runs stages 1-4 like the reference.

An implementation the checker passes must run the stage notebooks 1-4 to the end (`make run
IMPL=...`; stage 5 runs the reference) and record what the reference run records, except where an
implementation may legitimately differ (ALLOWED: its messages, its file format, its collectives,
timings). The learner runs themselves are `make test-alternatives`'s (tests/alternatives_all.py: every
file in tests/correct/, and broken files whose failed run must name a failing check); `make test` runs
the comparison's own tests and the planted failures here, each stopping in its first notebook.

The converse is tested too: every notebook cell that asserts something about the implementation
is listed in course_cells.COVERAGE with checks that exist, and a failed run names them.
"""

import json
import math
import re
import shutil
from pathlib import Path

import jax
import nbformat
import numpy as np
import pytest
from course_records import read_reached

from shardlab.checker import cli, course_cells, reuse
from shardlab.course import catalog
from shardlab.course import execute as runner
from shardlab.learner import implementation as implementation_loader
from shardlab.learner.implementation import API
from shardlab.verify import replay

CORRECT = Path(__file__).parent / "correct"
BROKEN = Path(__file__).parent / "broken"
NOTEBOOKS = Path(__file__).parents[1] / "notebooks"
LEARNER_STAGES = [name for name in catalog.NOTEBOOKS if not name.startswith("stage5")]  # stage 5 runs the reference

# result path -> why an implementation may record something else there than the reference run
ALLOWED = {
    "stage2_update/all_reduce": "its own compiled step: how many collectives, and their IR lines",
    "stage3a_checkpoint/checkpoint/bytes": "its own file format",
    "stage3a_checkpoint/checkpoint/saved_by": "a process identity",
    "stage3a_checkpoint/rejections": "its own messages, and only the damage its layout allows (compared apart)",
    "stage3b_resume/process": "process identities",
    "stage4a_profile": "timings, compile times, traces and the environment (compared apart: the NumPy errors)",
    "stage4b_beyond": "the course's own fused loops: timings and traces of this run",
    # when a sampler draws its next permutation: at an epoch's first batch (lazy) or as soon as its last batch
    # is taken (eager); both keep the course's rule, and the ids they give are compared exactly above
    "stage1_batches/walk_keys": "the batch at which the key changes: lazy or eager draw",
    "stage1_batches/ownership": "how its state holds each field (type, dtype, copies): its own representation",
    "stage3a_checkpoint/npz_members": "the members its file format writes",
    "stage3b_resume/permutations": "the step after which a permutation is drawn: lazy or eager draw",
    "stage3c_orbax_lesson/receipt/replay/cursors": "the cursor after an epoch's last batch: lazy or eager draw",
    "stage3c_orbax_lesson/receipt/replay/epoch_end": "the cursor after an epoch's last batch: lazy or eager draw",
    # Orbax's asynchronous save commits on a background thread: what is on disk when save() returns is a race
    # (the sentence about it is chosen by this run's own listing); after wait_until_finished() it is compared
    **{
        f"stage3c_orbax_lesson/async_save/{key}": "what a background save has written when save() returns"
        for key in ("at_return", "final_at_return", "others_at_return")
    },
    **{
        f"{name}/claims": "sentences chosen by this run's own values (each checked against them: check_claims)"
        for name in ("stage1_batches", "stage2_update", "stage3a_checkpoint", "stage3b_resume", "stage3c_orbax_lesson")
    },
}
EXACT = ("stage3b_resume/recovery", "stage3b_resume/orbax", "stage3b_resume/divergence")  # no tolerance at all
TOLERANCE = {"rel_tol": 1e-4, "abs_tol": 1e-5}  # float32 sums in another order: another implementation's rounding


def differences(reference, found, path: str) -> list[str]:
    """Where `found` differs from `reference`, outside ALLOWED; floats within TOLERANCE except under EXACT."""
    if any(path == a or path.startswith(a + "/") for a in ALLOWED):
        return []
    if isinstance(reference, dict) and isinstance(found, dict):
        if sorted(reference) != sorted(found):
            return [f"{path}: keys {sorted(found)} instead of {sorted(reference)}"]
        return [d for k in reference for d in differences(reference[k], found[k], f"{path}/{k}".lstrip("/"))]
    if isinstance(reference, list) and isinstance(found, list):
        if len(reference) != len(found):
            return [f"{path}: {len(found)} entries instead of {len(reference)}"]
        return [d for i, (a, b) in enumerate(zip(reference, found)) if (d := differences(a, b, f"{path}/{i}"))][:1]
    exact = path.startswith(EXACT)
    if isinstance(reference, float) and isinstance(found, (int, float)) and not exact:
        same = math.isclose(reference, found, **TOLERANCE) or (math.isnan(reference) and math.isnan(found))
    else:
        same = type(reference) is type(found) and reference == found
    return [] if same else [f"{path}: {found!r:.120} instead of {reference!r:.120}"]


INTACT = ("truncated file", "not an NPZ file", "different data (one value changed)")
INTACT += ("different configuration (batch size)", "existing checkpoint path")  # refused whatever the file's layout


def _rejections(found: dict) -> dict:
    return {r["case"]: r["error"] for r in found["stage3a_checkpoint"]["rejections"]}


def receipt_differences(reference: Path, run: Path) -> list[str]:
    """Every difference between two runs' results/*.json and stage 3 records that ALLOWED does not explain."""
    ref, found = (
        {n: json.loads((d / "results" / f"{n}.json").read_text()) for n in learner_notebooks()}
        for d in (reference, run)
    )
    diffs = differences(ref, found, "")
    theirs, ours = _rejections(found), _rejections(ref)
    if any(ours.get(case) != error for case, error in theirs.items()) or not set(INTACT) <= set(theirs):
        diffs.append(f"stage3a_checkpoint/rejections: {theirs} against {ours}")
    numpy_errors = found["stage4a_profile"]["max_abs_error_vs_numpy"]
    if (
        sorted(numpy_errors) != sorted(ref["stage4a_profile"]["max_abs_error_vs_numpy"])
        or max(numpy_errors.values()) > 1e-4
    ):
        diffs.append(f"stage4a_profile/max_abs_error_vs_numpy: {numpy_errors}")
    a, b = (replay.load_record(d / "stage3" / "control.npz") for d in (reference, run))
    for name in ("ids", "step"):
        if len(a[name]) != len(b[name]) or not all(np.array_equal(x, y) for x, y in zip(a[name], b[name])):
            diffs.append(f"stage3/control.npz: {name} differ from the reference's uninterrupted record")
    wrong = [k for k in range(len(a["step"])) if not same_sampler(a, b, k)]
    if wrong or len(a["cursor"]) != len(b["cursor"]):
        diffs.append(f"stage3/control.npz: the sampler fields after step(s) {wrong} differ from the reference's")
    for name in ("losses", "weights", "momentum"):
        if not np.allclose(np.asarray(a[name], np.float64), np.asarray(b[name], np.float64), rtol=1e-4, atol=1e-5):
            diffs.append(f"stage3/control.npz: {name} differ from the reference's beyond float32 rounding")
    return diffs


def same_sampler(reference: dict, found: dict, k: int) -> bool:
    """Key, order and cursor after step k equal the reference's, or its next epoch drawn at once (both correct).

    Where the reference's epoch is used up (cursor = rows), an implementation may already have split
    the key and drawn the next order (cursor 0): recomputed here with the course's JAX idiom.
    """
    key, order, cursor = (np.asarray(reference[n][k]) for n in ("key", "order", "cursor"))
    theirs = [np.asarray(found[n][k]) for n in ("key", "order", "cursor")]
    if all(np.array_equal(x, y) for x, y in zip((key, order, cursor), theirs)):
        return True
    if int(cursor) != len(order) or int(theirs[2]) != 0:
        return False
    following, subkey = jax.random.split(key.astype(np.uint32))
    drawn = jax.random.permutation(subkey, len(order))
    return np.array_equal(theirs[0], np.asarray(following)) and np.array_equal(theirs[1], np.asarray(drawn))


def learner_notebooks() -> list[str]:
    """The notebooks of stages 1-4 with a cell that runs the learner's code (calling_cells), in course order.

    The others run the course's own code whatever file is given (stage4b_beyond: the module's fused
    loops, its `implementation` parameter unused), so the reference's run of them speaks for every file.
    """
    calling = {notebook for notebook, _ in calling_cells()}
    return [name for name in LEARNER_STAGES if name in calling]


def run_learner_stages(
    implementation: str, out: Path, notebooks=None, reached: Path | None = None, cache: Path | None = None
) -> Path:
    """`make run IMPL=implementation` for the notebooks of stages 1-4 that run the learner's code (no HTML pages).

    `notebooks`: just those (in course order); `reached`: a folder where each notebook records the learner
    functions it looks up (course.execute.run's `reached`); `cache`: a compilation cache shared with
    other runs (course.execute.run's `compilation_cache`; None: the run's own).
    """
    if notebooks is None:
        notebooks = LEARNER_STAGES if implementation == "reference" else learner_notebooks()
    return runner.run(
        out,
        seed=17,
        batch_size=7,
        implementation=implementation,
        notebooks=notebooks,
        html=False,
        reached=reached,
        compilation_cache=cache or True,
    )


def digests(implementation: str) -> dict:
    """API name -> the checker's reuse digest of that function of `implementation` (None: cannot be hashed).

    The digest covers the function's source, everything it refers to and the file's top-level statements
    (shardlab.checker.reuse): two files with the same digest for a function run the same code for it.
    """
    return reuse.function_digests(implementation_loader.load(implementation), API)


def shared_notebooks(reached: dict, base: dict, mine: dict) -> list[str]:
    """The notebooks of learner_notebooks() a base run speaks for, given what each reached there.

    `reached`: {notebook: the API functions it looked up in the base run}; `base`, `mine`: digests().
    Each notebook runs in a kernel of its own: what one leaves for another is a file. A notebook is shared
    when every function it reached in the base run has one digest, not None, in both files, as a check's
    verdict is reused (checker/reuse.py): the same functions take the same path. A notebook that times
    something (not in BESIDE_FIXTURES) may take another path with other timings, so every function its
    cells can call counts too. A notebook that recorded no reach (unknown) is never shared, and the
    fresh-kernel pair, whose second reads the first's files (the checkpoint, the control record), is
    shared both or neither.
    """
    named = named_functions()
    shared = []
    for name in learner_notebooks():
        depends = set(reached.get(name) or ()) | (set() if name in catalog.BESIDE_FIXTURES else named[name])
        if reached.get(name) and all(base.get(f) is not None and base.get(f) == mine.get(f) for f in depends):
            shared.append(name)
    if not set(catalog.FRESH_KERNEL_PAIR) <= set(shared):
        shared = [name for name in shared if name not in catalog.FRESH_KERNEL_PAIR]
    return shared


def named_functions() -> dict:
    """{notebook: the API functions its cells can call}: those they name, or every one where a cell hands the
    loaded file itself to course code."""
    found = {}
    for (notebook, _), source in calling_cells().items():
        names = found.setdefault(notebook, set())
        names |= {api for api in API if re.search(rf"\bimpl\.{api}\b", source)}
        if re.search(r"\bimpl\b(?!\.)", source.replace(LOAD, "")):
            names |= set(API)
    return found


def merged_run(found: Path, sources: dict, into: Path) -> Path:
    """A folder holding each learner notebook's results, and stage 3's control record, from the run that made them.

    `sources`: {notebook: the run folder whose results speak for it}; a notebook not named comes from `found`.
    """
    (into / "results").mkdir(parents=True)
    for name in learner_notebooks():
        origin = Path(sources.get(name, found))
        shutil.copy2(origin / "results" / f"{name}.json", into / "results" / f"{name}.json")
    shutil.copytree(Path(sources.get("stage3a_checkpoint", found)) / "stage3", into / "stage3")
    return into


def checker_failures(implementation: str, only=None, reuse: bool = False) -> list[str]:
    """The checks `check --stage all` fails for `implementation`; with `only`, just those checks are run.

    With `reuse`, a check that passed for a file checked before is reused while every function it
    depended on is byte-identical (checker/reuse.py; the session's check cache, tests/conftest.py).
    """
    skip = [] if only is None else [c.__name__ for s in cli.STAGES for c in cli.checks_of(s) if c.__name__ not in only]
    return [r.name for r in cli.run_checks(implementation, "all", skip=skip, reuse=reuse) if not r.passed]


def test_an_alternative_runs_every_notebook_that_calls_its_code():
    """Only notebooks that never call the learner's code are left to the reference's run, and they never read it."""
    shared = [name for name in LEARNER_STAGES if name not in learner_notebooks()]
    assert shared == ["stage4b_beyond"], shared
    for name in shared:
        cells = [source for (notebook, _), source in code_cells().items() if notebook == name]
        assert cells and not any(USES_IMPL.search(source) or "implementation.load" in source for source in cells)
        assert name in ALLOWED, f"{name}'s results were compared with the reference's: it must run for each file"


def test_a_changed_receipt_is_a_difference():
    """The comparison can fail: a changed id, a loss beyond rounding, a missing key are all reported."""
    ref = {"stage1_batches": {"batches": [{"ids": [1, 2]}], "loss": 0.5}, "stage3b_resume": {"recovery": {"w": 0.0}}}
    assert differences(ref, json.loads(json.dumps(ref)), "") == []
    for path, value in (("ids", [2, 1]), ("loss", 0.5001), ("recovery", {"w": 1e-9})):
        changed = json.loads(json.dumps(ref))
        if path == "ids":
            changed["stage1_batches"]["batches"][0]["ids"] = value
        elif path == "loss":
            changed["stage1_batches"]["loss"] = value
        else:
            changed["stage3b_resume"]["recovery"] = value
        assert differences(ref, changed, ""), path
    assert differences(ref, {**ref, "stage1_batches": {"loss": 0.5}}, "")
    assert differences({"stage4a_profile": {"t": 1.0}}, {"stage4a_profile": {"t": 9.0}}, "") == []  # a timing


# --- the converse: every notebook assertion about learner code is a check ------------------------------------

ASSERTS = re.compile(r"\bassert\b|assert_|\brefusal\(|\brefuse\(|check_walk\(|check_recovery\(|timing\.check\(")
LEARNER = re.compile(r"\bimpl\.|\bimplementation\b")
USES_IMPL = re.compile(r"\bimpl\b")  # the loaded file: any call, or a function handed to course code
LOAD = "impl = sl.implementation.load(implementation)"  # a setup cell's load: make run names implementation_loads
# asserting cells whose assertions are about the course's own code or the notebook's bookkeeping, and why
NOT_LEARNER = {
    ("stage3b_resume", "fresh-kernel"): "which process runs the notebook",
    ("stage3c_orbax_lesson", "async-save"): "Orbax's own asynchronous save of a small pytree",
    ("stage4b_beyond", "fused_trace"): "the course's fused loop and its trace",
    ("stage4b_beyond", "plan_small"): "the course's host sampler beside the device sampler's plan",
    ("stage4b_beyond", "fused_all_reduces"): "the all-reduces of the course's own fused loops, counted",
}


def code_cells() -> dict:
    """(notebook, tag) -> source, for every code cell of stages 1-4 (the notebooks that run the learner's file)."""
    found = {}
    for name in LEARNER_STAGES:
        for cell in nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells:
            if cell.cell_type == "code":
                found[(name, (cell.metadata.get("tags") or ["untagged"])[0])] = cell.source
    return found


def asserting_cells() -> dict:
    """The code cells that assert something (the parameters cell aside)."""
    return {k: v for k, v in code_cells().items() if ASSERTS.search(v) and k[1] != "parameters"}


def calling_cells() -> dict:
    """The code cells that run the learner's code beyond loading it: a raise there fails the cell too."""
    return {
        k: v
        for k, v in code_cells().items()
        if any(USES_IMPL.search(line) and line.strip() != LOAD for line in v.splitlines())
    }


def test_every_notebook_assertion_about_learner_code_names_a_covering_check():
    cells = asserting_cells()
    assert ("stage3a_checkpoint", "rejections") in cells and ("stage2_update", "gradient") in cells
    unlisted = sorted(set(cells) - set(course_cells.COVERAGE) - set(NOT_LEARNER))
    assert unlisted == [], f"cells that assert but name no check in course_cells.COVERAGE: {unlisted}"
    stale = sorted(set(course_cells.COVERAGE) - set(code_cells()))
    assert stale == [], f"COVERAGE lists cells no notebook has (renamed tag?): {stale}"
    uses_impl = [k for k in NOT_LEARNER if any(ASSERTS.search(x) and LEARNER.search(x) for x in cells[k].splitlines())]
    assert uses_impl == [], f"cells said not to assert about learner code that do: {uses_impl}"


def test_every_cell_that_runs_learner_code_names_a_covering_check():
    """A cell that only calls the learner's functions fails when one raises: its advice must name a check too."""
    calling = calling_cells()
    assert ("stage3a_checkpoint", "derived") in calling and ("stage3c_orbax_lesson", "setup") in calling
    assert ("stage1_batches", "setup") not in calling  # it only loads the file
    unlisted = sorted(set(calling) - set(course_cells.COVERAGE))
    assert unlisted == [], f"cells that run your file but name no check in course_cells.COVERAGE: {unlisted}"
    assert sorted(set(calling) & set(NOT_LEARNER)) == [], "a cell about the course's own code runs the learner's"
    loads = [k for k, v in code_cells().items() if "sl.implementation.load(" in v]
    assert loads and all(LOAD in code_cells()[k].splitlines() for k in loads), "one load line, as make run expects"


def test_every_covering_check_is_one_the_checker_runs():
    runs = {c.__name__: stage for stage in cli.STAGES for c in cli.checks_of(stage)}
    named = {name for checks in course_cells.COVERAGE.values() for name in checks} - {course_cells.ALL}
    assert sorted(named - set(runs)) == []
    assert course_cells.stages() == runs


def test_the_docs_print_the_coverage_table():
    doc = (Path(__file__).parents[1] / "docs" / "evidence.md").read_text()
    for (notebook, tag), checks in course_cells.COVERAGE.items():
        row = next((line for line in doc.splitlines() if f"`{notebook}`" in line and f"`{tag}`" in line), "")
        assert row and all(c in row for c in checks), (notebook, tag)


# --- a failed run's advice leads somewhere --------------------------------------------------------------------


@pytest.mark.parametrize("cell", sorted(course_cells.COVERAGE))
def test_a_failing_covered_cell_names_its_checks_and_the_stage_to_check(cell):
    notebook, tag = cell
    advice = runner._failure_advice("nb failed", None, "mine.py", notebook, [tag])
    checks = course_cells.covering(notebook, [tag])
    assert checks and f"make check IMPL=mine.py STAGE={max(s for _, s in checks)}" in advice
    assert all(name in advice for name, _ in checks if name != course_cells.ALL)
    assert runner.GAP in advice  # should every named check pass


def test_a_file_that_does_not_load_is_sent_to_the_check_that_fails_to_load_it():
    advice = runner._failure_advice("nb failed", None, "mine.py", "stage1_batches", ["setup"], "ImplementationError")
    assert "implementation_loads" in advice and "make check IMPL=mine.py STAGE=1" in advice
    assert runner.GAP not in advice


def test_a_notebook_stopped_with_no_cell_to_name_is_sent_to_the_checkers_bounds():
    advice = runner._failure_advice("nb failed", None, "mine.py", "stage2_update", None)
    assert "make check IMPL=mine.py STAGE=all" in advice and runner.GAP in advice


def test_the_cell_a_timeout_stopped_is_the_last_one_papermill_started(tmp_path):
    """No error output after a timeout: the cell named is the last with a start time, the later ones pending."""
    cells = [nbformat.v4.new_code_cell(f"x = {n}", metadata={"tags": [tag]}) for n, tag in enumerate("abc")]
    for cell, start in zip(cells, ("2026-01-01T00:00:00", "2026-01-01T00:00:01", None)):
        cell.metadata["papermill"] = {"start_time": start, "status": "completed" if start else "pending"}
    path = tmp_path / "stopped.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    cell, error = runner._stopped_cell(path)
    assert cell.metadata["tags"] == ["b"] and error is None
    assert "tag b" in runner._failing_cell(path) and "was running" in runner._failing_cell(path)
    # an error output names its cell whatever started later; an unreadable copy names none
    cells[0].outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=[])]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    cell, error = runner._stopped_cell(path)
    assert cell.metadata["tags"] == ["a"] and error == "ValueError"
    assert "tag a" in runner._failing_cell(path) and runner._failing_cell(path).endswith("ValueError: bad")
    path.write_text("not a notebook")
    assert runner._stopped_cell(path) == (None, None) and "no error output" in runner._failing_cell(path)


def test_a_failing_cell_no_check_covers_is_called_a_gap_in_the_course():
    advice = runner._failure_advice("nb failed", None, "mine.py", "stage4a_profile", ["figure"])
    assert not course_cells.covering("stage4a_profile", ["figure"])
    assert "no check covers" in advice and "make check IMPL=mine.py STAGE=all" in advice
    assert "make check" not in runner._failure_advice("nb failed", None, "reference", "stage4a_profile", ["figure"])


PLANTED = {  # a file broken on purpose -> the notebook it fails in (early, so each run takes seconds)
    "import_error": ("import numpy_that_is_not_installed\n", "stage1_batches"),
    "initial_not_done": (
        "def initial(seed, data, mesh):\n    raise NotImplementedError('initial: not implemented yet (stage 1)')\n",
        "stage1_batches",
    ),
    "contract_not_done": (
        "def contract(data, config):\n    raise NotImplementedError('contract: not implemented yet (stage 3)')\n",
        "stage3a_checkpoint",
    ),
}


@pytest.mark.notebooks
@pytest.mark.learner_run
@pytest.mark.slow
@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_a_planted_failure_is_sent_to_a_check_that_fails_for_it(planted, tmp_path):
    """An unloadable or unfinished file fails a cell that asserts nothing; the advice still names a failing check."""
    body, notebook = PLANTED[planted]
    mine = tmp_path / "mine.py"
    mine.write_text("from shardlab.learner.reference import *  # noqa: F403\n" + body)
    if planted != "import_error":
        assert_advice_leads_to_a_failing_check(mine, tmp_path, [notebook])
        return
    with pytest.raises(runner.NotebookFailed) as info:
        runner.run(tmp_path / "out", 17, 7, implementation=str(mine), notebooks=[notebook], html=False)
    assert "implementation_loads" in str(info.value) and runner.GAP not in str(info.value)
    assert checker_failures(str(mine)) == ["implementation_loads"]


def assert_advice_leads_to_a_failing_check(broken: Path, tmp_path: Path, notebooks=LEARNER_STAGES) -> None:
    with pytest.raises(runner.NotebookFailed) as info:
        runner.run(tmp_path / "out", 17, 7, implementation=str(broken), notebooks=notebooks, html=False)
    advice = str(info.value)
    named = {c for c in course_cells.stages() if re.search(rf"\b{c}\b", advice)}
    assert named, advice
    assert set(checker_failures(str(broken), only=named)) & named, (advice, named)


def test_the_sampler_comparison_accepts_the_next_epoch_drawn_at_once_and_nothing_else():
    key = np.asarray(jax.random.split(jax.random.PRNGKey(3))[0], np.uint32)
    following, subkey = jax.random.split(key)
    drawn = np.asarray(jax.random.permutation(subkey, 5))
    used_up = {"key": [key], "order": [np.arange(5)], "cursor": [5]}
    assert same_sampler(used_up, used_up, 0)
    eager = {"key": [np.asarray(following)], "order": [drawn], "cursor": [0]}
    assert same_sampler(used_up, eager, 0)
    assert not same_sampler(used_up, {**eager, "order": [drawn[::-1]]}, 0)  # another permutation
    assert not same_sampler(used_up, {**eager, "key": [key]}, 0)  # the key not split
    assert not same_sampler({**used_up, "cursor": [3]}, eager, 0)  # mid-epoch: no second form


# --- what a run shares with an earlier one ------------------------------------------------------------------

OVERRIDE = """

def {name}(*args, **kwargs):
    from shardlab.learner import reference

    return reference.{name}(*args, **kwargs)
"""


def test_a_notebook_is_shared_only_while_every_function_it_can_reach_is_byte_identical(tmp_path):
    """A copy shares every notebook; a changed function unshares each notebook that reached it or names it."""
    base = (CORRECT / "packed_psum.py").read_text()
    files = {
        "copy": base,
        "restore": base + OVERRIDE.format(name="restore"),
        "next_batch": base + OVERRIDE.format(name="next_batch"),
        "make_step": base.replace("loss, grad = total[1] / total[0]", "loss, grad = (total[1] / total[0])"),
        "top_level": base.replace("\n\n\ndef make_step", "\nprint(end='')\n\n\ndef make_step"),
    }
    assert all(text != base for name, text in files.items() if name != "copy")
    found = {}
    for name, text in files.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "mine.py").write_text(text)
        found[name] = digests(str(tmp_path / name / "mine.py"))
    mine = digests(str(CORRECT / "packed_psum.py"))
    step = {"initial", "make_step", "transition"}
    reached = {
        **dict.fromkeys(learner_notebooks(), set(API)),
        "stage1_batches": {"initial", "next_batch"},
        "stage2_update": step | {"next_batch"},
        "stage3c_orbax_lesson": step | {"contract"},
        "stage4a_profile": step | {"next_batch"},
    }
    pair = list(catalog.FRESH_KERNEL_PAIR)
    assert set(pair) < set(learner_notebooks()) and "stage4a_profile" in learner_notebooks()
    assert shared_notebooks(reached, mine, found["copy"]) == learner_notebooks()
    unpaired = [name for name in learner_notebooks() if name not in pair]
    assert shared_notebooks(reached, mine, found["restore"]) == unpaired  # only the pair reaches restore
    assert shared_notebooks(reached, mine, found["make_step"]) == ["stage1_batches"]
    assert shared_notebooks(reached, mine, found["next_batch"]) == ["stage3c_orbax_lesson"]  # after unshared ones
    assert shared_notebooks(reached, mine, found["top_level"]) == []  # code run at the top may change any function
    assert "stage2_update" not in shared_notebooks({**reached, "stage2_update": set()}, mine, found["copy"])
    assert shared_notebooks(reached, {**mine, "initial": None}, {**found["copy"], "initial": None}) == []
    # a function a timed notebook's base run never reached but its cells name (a path the run did not take)
    assert "stage4a_profile" not in shared_notebooks(
        {**reached, "stage4a_profile": {"initial"}}, mine, found["make_step"]
    )
    # the pair is shared both or neither: the first alone would leave the second without its files
    first_only = {**reached, pair[0]: {"initial", "next_batch"}}
    assert not set(pair) & set(shared_notebooks(first_only, mine, found["restore"]))


def test_a_loaded_implementation_records_each_function_looked_up_once(tmp_path, monkeypatch):
    """With REACHED_ENV set, a load notes each API function looked up on it, once; the checker's worker never does."""
    from shardlab.checker import early

    mine, record = tmp_path / "mine.py", tmp_path / "reached.txt"
    mine.write_text((CORRECT / "packed_psum.py").read_text())
    monkeypatch.setattr(implementation_loader, "_NOTED", set())
    monkeypatch.delenv(implementation_loader.REACHED_ENV, raising=False)
    quiet = implementation_loader.load(str(mine))
    assert quiet.make_step and not record.exists()  # not set: nothing recorded, the module's class unchanged
    monkeypatch.setenv(implementation_loader.REACHED_ENV, str(record))
    impl = implementation_loader.load(str(mine))
    assert impl.make_step and impl.make_step and impl.save and impl.__name__ == "learner_implementation"
    assert sorted(record.read_text().split()) == ["make_step", "save"]
    assert read_reached(record) == {"make_step", "save"}
    assert implementation_loader.REACHED_ENV not in early.environment(None, [])
    assert implementation_loader.REACHED_ENV not in runner.kernel_environment(None)  # never inherited by a kernel
    assert runner.kernel_environment(None, tmp_path / "k.txt")[implementation_loader.REACHED_ENV] == str(
        tmp_path / "k.txt"
    )
