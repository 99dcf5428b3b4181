"""Every correct alternative in tests/correct/ runs stages 1-4 like the reference: `make test-alternatives`.

Not collected by `make test` (the name does not start with test_); the Makefile target names this
file, and .ci/run calls it after `make test`. Each alternative is first run through `check --stage
all` (the property's premise), then through the course, and its receipts are compared with a
reference run of the same stages. Broken files show that a failed run's advice names a failing check, and every
alternative in tests/correct/ passes the randomised checks with 20 search seeds (`make test` runs one).
"""

import fcntl
import json
from pathlib import Path

import pytest
from conftest import session_folder
from test_alternatives_run import (
    BROKEN,
    CORRECT,
    assert_advice_leads_to_a_failing_check,
    checker_failures,
    learner_notebooks,
    receipt_differences,
    run_learner_stages,
)
from test_checker import SEARCHED_IN_MAKE_TEST, assert_the_search_accepts
from test_claims import check_claims

# broken files that pass stages 1 and 2 and fail a stage 3 notebook cell, each for another cause
FAILING_RUNS = ("save_overwrites", "restore_skips_validation", "restore_resets_key", "checkpoint_without_momentum")


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> Path:
    """The reference through stages 1-4, once per session (a file lock: one run for all xdist workers)."""
    shared = session_folder(tmp_path_factory) / "reference-1-4"
    shared.mkdir(exist_ok=True)
    status = shared / "status.json"
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not status.exists():
            status.write_text(json.dumps({"out": str(run_learner_stages("reference", shared / "receipts"))}))
    return Path(json.loads(status.read_text())["out"])


# tests/correct/*.py (test_checker.py judges each at the stages it changes), tests/correct/more/*.py and
# held-out correct cases (tests/heldout/correct/, made from their diffs) are judged here only, by the whole
# checker: each adds minutes of checks, kept out of `make test`
HELDOUT_CORRECT = (
    "contract_bytes_with_digest",
    "flat_contract_renamed_keys",
    "nested_contract_format_key",
    "sampler_split_pair_and_take",
    "save_open_x_part_file",
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
    alternative, request, tmp_path, heldout
):
    made = alternative.startswith("heldout/")
    spec = str(heldout / f"{alternative.removeprefix('heldout/')}.py" if made else CORRECT / f"{alternative}.py")
    assert checker_failures(spec) == [], f"{alternative} is not accepted by the checker"
    found = run_learner_stages(spec, tmp_path / "run")
    for notebook in learner_notebooks():  # every sentence the run chose is true of this run's own values
        assert check_claims(json.loads((found / "results" / f"{notebook}.json").read_text())) == [], notebook
    # asked for last: while one worker runs the reference, the other checks and runs its own file meanwhile
    assert receipt_differences(request.getfixturevalue("reference_run"), found) == []


@pytest.mark.learner_run
@pytest.mark.parametrize("broken", FAILING_RUNS)
def test_a_failed_run_names_a_check_that_fails_for_that_file(broken, tmp_path):
    assert_advice_leads_to_a_failing_check(BROKEN / f"{broken}.py", tmp_path, ["stage3a_checkpoint"])


@pytest.mark.parametrize("alternative", sorted(p.stem for p in CORRECT.glob("*.py") if p.stem != SEARCHED_IN_MAKE_TEST))
def test_every_correct_alternative_passes_the_search_with_20_seeds(alternative):
    assert_the_search_accepts(CORRECT / f"{alternative}.py")
