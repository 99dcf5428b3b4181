"""Every correct alternative in tests/correct/ runs stages 1-4 like the reference: `make test-alternatives`.

Not collected by `make test` (the name does not start with test_); the Makefile target names this
file, and .ci/run calls it after `make test`. Each alternative is first run through `check --stage
all` (the property's premise), then through the course, and its receipts are compared with a
reference run of the same stages: every check of every stage runs for each file (the fresh-interpreter resume and
the randomised search included), which is why `make test` runs none of these files through the whole checker. Broken
files show that a failed run's advice names a failing check, and every alternative in tests/correct/ passes the
randomised checks with 20 search seeds.

What does not depend on the file is shared, by the checker's own reuse rule (checker/reuse.py): a check
passed for a file checked earlier in the session is reused while every function it depended on is
byte-identical, and a notebook whose calls reached only functions byte-identical to those of a run made
earlier in the session (the reference's or another alternative's, recorded as that run went) is not run
again: that run's results speak for it (test_alternatives_run.shared_notebooks says when).
"""

import fcntl
import json
import os
import uuid
from pathlib import Path

import pytest
from conftest import results, session_folder
from course_records import read_reached_folder
from test_alternatives_run import (
    BROKEN,
    CORRECT,
    assert_advice_leads_to_a_failing_check,
    calling_cells,
    digests,
    learner_notebooks,
    merged_run,
    receipt_differences,
    run_learner_stages,
    shared_notebooks,
)
from test_checker import RANDOMISED, check_cli, judged_at
from test_claims import check_claims

from shardlab.checker import cli
from shardlab.learner import implementation
from shardlab.learner.implementation import API

# broken files that pass stages 1 and 2 and fail a stage 3 notebook cell, each for another cause
FAILING_RUNS = ("save_overwrites", "restore_skips_validation", "restore_resets_key", "checkpoint_without_momentum")


def runs_made(tmp_path_factory) -> Path:
    """The session's record of finished course runs (every xdist worker's): one JSON file per run."""
    folder = session_folder(tmp_path_factory) / "course-runs-made"
    folder.mkdir(exist_ok=True)
    return folder


def compiled(tmp_path_factory) -> Path:
    """JAX's compilation cache every course run of the session shares: the course's own programs are the same
    for every file, and an alternative's own programs are keyed on their text (execute.run's compilation_cache)."""
    return session_folder(tmp_path_factory) / "course-compilation-cache"


def record_run(folder: Path, spec: str, found: dict, reached: dict, sources: dict) -> None:
    """Add a finished run: its file's digests, what each notebook reached, and which folder holds its results."""
    record = {"spec": spec, "digests": found, "reached": {k: sorted(v) for k, v in reached.items()}}
    record["sources"] = {name: str(where) for name, where in sources.items()}
    name = uuid.uuid4().hex
    (folder / f".{name}").write_text(json.dumps(record))
    os.replace(folder / f".{name}", folder / f"{name}.json")  # a reader never sees half of it


def speakers(folder: Path, mine: dict) -> dict:
    """{notebook: the finished run that speaks for it}, for each notebook some finished run shares with mine."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        run = json.loads(path.read_text())
        for name in shared_notebooks({k: set(v) for k, v in run["reached"].items()}, run["digests"], mine):
            found.setdefault(name, run)  # the fresh-kernel pair: both from one run (shared both or neither)
    return found


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> Path:
    """The reference through stages 1-4, once per session (a file lock: one run for all xdist workers)."""
    shared = session_folder(tmp_path_factory) / "reference-1-4"
    shared.mkdir(exist_ok=True)
    status = shared / "status.json"
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not status.exists():
            out = run_learner_stages(
                "reference", shared / "receipts", reached=shared / "reached", cache=compiled(tmp_path_factory)
            )
            reached = read_reached_folder(shared / "reached")
            sources = dict.fromkeys(learner_notebooks(), out)
            record_run(runs_made(tmp_path_factory), "reference", digests("reference"), reached, sources)
            status.write_text(json.dumps({"out": str(out), "reached": {k: sorted(v) for k, v in reached.items()}}))
    return Path(json.loads(status.read_text())["out"])


@pytest.mark.learner_run
def test_the_reference_run_records_every_function_each_notebook_calls(reference_run):
    """Each notebook's record holds every API function its cells call by name (read here from their source).

    Stage 3b's check cell runs stage 3's checks, among them one that loads the file in a fresh
    interpreter (checker/reuse.py EVERY_FUNCTION): the checker's child records every function for it.
    """
    status = json.loads((reference_run.parent / "status.json").read_text())
    reached = {name: set(found) for name, found in status["reached"].items()}
    for notebook in learner_notebooks():
        called = set()
        for (name, _), source in calling_cells().items():
            if name == notebook:
                called |= {api for api in API if f"impl.{api}" in source}
        assert called and called <= reached.get(notebook, set()), (notebook, called, reached.get(notebook))
    assert reached["stage3b_resume"] == set(API)


# The whole checker from the command line, its search included (make check's own loop), on the reference: the
# file every alternative below is compared with passes every check, in a child interpreter, and reports each.
def test_reference_passes_every_stage_in_a_fresh_interpreter(tmp_path):
    status, report = check_cli(tmp_path, "reference", "all")
    assert status == 0
    assert report["passed"] is True and report["environment"]["devices"] == 4
    assert report["environment"]["platform"] == "cpu"
    expected_counts = {str(s): len(cli.checks_of(s)) for s in cli.STAGES}
    assert {s: c["checks"] for s, c in report["stages"].items()} == expected_counts
    for entry in report["checks"]:
        assert set(entry) >= {"name", "stage", "passed", "expected", "observed", "diagnosis"}
        assert entry["passed"], entry


# tests/correct/*.py, tests/correct/more/*.py and held-out correct cases (tests/heldout/correct/, made from their
# diffs) are judged here only, by the whole checker: each adds minutes of checks, kept out of `make test`
HELDOUT_CORRECT = (
    "contract_bytes_with_digest",
    "flat_contract_renamed_keys",
    "nested_contract_format_key",
    "sampler_split_pair_and_take",
    "tuple_psum_einsum",
)
# the third held-out set's correct files, each written differently from its base (tests/heldout/README3.md)
HELDOUT_CORRECT3 = (
    "alt_compressed_short_members",
    "alt_einsum_packed_psum",
    "alt_nested_contract_blake2",
    "alt_pad_repeat_rows",
    "alt_rawfd_bincount",
)
ALTERNATIVES = (
    sorted(str(p.relative_to(CORRECT).with_suffix("")) for p in CORRECT.rglob("*.py"))
    + [f"heldout/correct/{name}" for name in HELDOUT_CORRECT]
    + [f"heldout/correct3/{name}" for name in HELDOUT_CORRECT3]
)


@pytest.mark.learner_run
@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_every_alternative_the_checker_accepts_runs_stages_1_to_4_like_the_reference(
    alternative, request, tmp_path, heldout, tmp_path_factory
):
    made = alternative.startswith("heldout/")
    spec = str(heldout / f"{alternative.removeprefix('heldout/')}.py" if made else CORRECT / f"{alternative}.py")
    results = cli.run_checks(spec, "all", reuse=True)  # a check is reused only if nothing it depends on changed
    failed = [(r.name, r.diagnosis) for r in results if not r.passed]
    assert not failed, f"{alternative} is correct but the checker rejected it: {failed}"
    every = sorted((number, c.__name__) for number in cli.STAGES for c in cli.checks_of(number))
    assert sorted((r.stage, r.name) for r in results) == every  # none left out: the fresh-interpreter resume ran too
    mine, folder = digests(spec), runs_made(tmp_path_factory)
    speaks = speakers(folder, mine)  # notebooks an earlier run with the same functions speaks for
    running = [name for name in learner_notebooks() if name not in speaks]
    cache = compiled(tmp_path_factory)
    found = tmp_path / "run"
    if running:
        found = run_learner_stages(spec, found, running, reached=tmp_path / "reached", cache=cache)
    reached = {
        **{name: set(run["reached"][name]) for name, run in speaks.items()},
        **read_reached_folder(tmp_path / "reached"),
    }
    sources = {**{name: run["sources"][name] for name, run in speaks.items()}, **dict.fromkeys(running, found)}
    merged = merged_run(found, sources, tmp_path / "merged")
    for notebook in learner_notebooks():  # every sentence the run chose is true of this run's own values
        assert check_claims(json.loads((merged / "results" / f"{notebook}.json").read_text())) == [], notebook
    # asked for last: while one worker runs the reference, the other checks and runs its own file meanwhile
    assert receipt_differences(request.getfixturevalue("reference_run"), merged) == []
    record_run(folder, spec, mine, reached, sources)  # only a run that records what the reference records


@pytest.mark.learner_run
@pytest.mark.parametrize("broken", FAILING_RUNS)
def test_a_failed_run_names_a_check_that_fails_for_that_file(broken, tmp_path):
    assert_advice_leads_to_a_failing_check(BROKEN / f"{broken}.py", tmp_path, ["stage3a_checkpoint"])


# The randomised checks over the domain, for every file in tests/correct/: 20 search seeds, one case per seed and
# check (20 cases per randomised check in all; a default run draws 4 to 14), at the stages below 4 it changes.
SEARCH_SEEDS = range(100, 120)


@pytest.mark.parametrize("alternative", sorted(p.stem for p in CORRECT.glob("*.py")))
def test_every_correct_alternative_passes_the_search_with_20_seeds(alternative):
    spec = str(CORRECT / f"{alternative}.py")
    stages = [s for s in judged_at(implementation.load(spec)) if s < 4]
    randomised = {c.__name__ for s in stages for c in cli.STAGES[s].CHECKS if c.__name__ in RANDOMISED}
    failed = []
    for seed in SEARCH_SEEDS:
        for stage in stages:
            skip = [c.__name__ for c in cli.checks_of(stage) if c.__name__ not in randomised]
            results = cli.run_checks(spec, stage, only=True, skip=skip, search_seed=seed, search_cases=1)
            assert {r.name for r in results} == randomised & {c.__name__ for c in cli.STAGES[stage].CHECKS}
            failed += [(seed, r.name, r.diagnosis) for r in results if not r.passed]
    assert not failed, f"{alternative} is correct but the search rejected it: {failed[:3]}"


# a notebook run of a file of tests/correct/, which this target runs the course for (make test runs the reference's)
@pytest.mark.notebooks
@pytest.mark.learner_run
@pytest.mark.stage2
def test_stage2_accepts_a_correct_packed_step(tmp_path, tmp_path_factory):
    """One packed psum (one all_reduce) is correct: the notebook shows the count and passes, like the checker."""
    packed = str(CORRECT / "packed_psum.py")
    out = run_learner_stages(packed, tmp_path / "packed", ["stage2_update"], cache=compiled(tmp_path_factory))
    res = results(out, "stage2_update")
    assert res["all_reduce"]["count"] == 1
    assert res["check"]["passed"] is True
