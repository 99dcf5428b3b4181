"""The markers that keep `make test-quick` quick are honest: a test that runs a notebook, a kernel or a
controller group without its marker fails, in `pytest --quick` and, for child processes, in every run."""

import shutil
import subprocess
import sys

import pytest
from conftest import LOOP_MARKERS, MAKE_TEST, QUICK, REPO, refused_command

FAKE_TESTS = """
import subprocess
import sys

import pytest


def test_imports_papermill():
    import papermill  # noqa: F401


def test_starts_a_kernel():
    subprocess.run([sys.executable, "-m", "ipykernel_launcher", "--version"], capture_output=True)


def test_starts_a_controller_group(tmp_path):
    subprocess.run([sys.executable, "-m", "shardlab.multi.program", "--help"], capture_output=True)


@pytest.mark.notebooks
def test_marked_imports_papermill():
    import papermill  # noqa: F401


@pytest.mark.controllers
def test_marked_starts_a_controller_group():
    subprocess.run([sys.executable, "-c", "pass"])


def test_plain_child_is_fine():
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0
"""


def _session(tmp_path, tests: str, *options: str) -> tuple[int, str, dict]:
    """(exit code, output, test name -> PASSED/FAILED) of a pytest session of its own over `tests`, under this
    suite's conftest (and what it imports)."""
    for name in ("conftest.py", "_xdist.py", "budget.py", "course_records.py"):
        shutil.copy(REPO / "tests" / name, tmp_path / name)
    (tmp_path / "test_fake.py").write_text(tests)
    command = [sys.executable, "-m", "pytest", *options, "-n", "0", "-p", "no:cacheprovider", "-rA"]
    command += ["-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path / "test_fake.py")]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    outcome = {
        line.split()[1].split("::")[-1]: line.split()[0]
        for line in said.splitlines()
        if line.startswith(("PASSED ", "FAILED ")) and "::" in line
    }
    return done.returncode, said, outcome


@pytest.mark.long  # a pytest session of its own: make test-long's
def test_quick_refuses_the_unmarked_and_leaves_the_marked_to_make_test(tmp_path):
    code, said, outcome = _session(tmp_path, FAKE_TESTS, "--quick")
    assert code == 1, said
    assert outcome == {
        "test_imports_papermill": "FAILED",
        "test_starts_a_kernel": "FAILED",
        "test_starts_a_controller_group": "FAILED",
        "test_plain_child_is_fine": "PASSED",
    }, said
    assert "2 deselected" in said  # the two marked tests are make test's
    assert "this test imports papermill" in said and "starts a child process `ipykernel_launcher" in said
    assert "starts a child process `shardlab.multi.program" in said and "mark it with one of" in said


ANY_RUN_TESTS = """
import importlib

import pytest


@pytest.mark.notebooks
def test_marked_imports_papermill_first():
    import papermill  # noqa: F401


def test_imports_papermill_already_loaded():
    import papermill  # noqa: F401


def test_imports_papermill_by_name():
    importlib.import_module("papermill")


def test_imports_nothing_refused():
    import json  # noqa: F401
"""


@pytest.mark.long  # a pytest session of its own: make test-long's
def test_every_run_refuses_an_unmarked_import_even_of_a_module_already_loaded(tmp_path):
    """`make test` (no --quick) refuses what --quick refuses, after a marked test has loaded the module."""
    code, said, outcome = _session(tmp_path, ANY_RUN_TESTS)
    assert outcome == {
        "test_marked_imports_papermill_first": "PASSED",
        "test_imports_papermill_already_loaded": "FAILED",
        "test_imports_papermill_by_name": "FAILED",
        "test_imports_nothing_refused": "PASSED",
    }, said
    assert code == 1 and "this test imports papermill" in said


def make_selection(target: str) -> str:
    """The -m expression of `make <target>`'s pytest command, read from the Makefile."""
    lines = (REPO / "Makefile").read_text().split(f"\n{target}: ", 1)[1].splitlines()
    (recipe,) = [line for line in lines[1:3] if "-m pytest" in line]
    return recipe.split(' -m "', 1)[1].split('"', 1)[0]


def test_make_test_and_make_test_long_split_the_suite_and_ci_runs_both_once():
    """Each test outside the sandbox's is in exactly one of `make test` and `make test-long`; CI calls each once."""
    test, long = make_selection("test"), make_selection("test-long")
    assert test == MAKE_TEST  # the selection whose wall time tests/conftest.py records
    names = ("long", "sandbox", "slow", "stage5")
    for markers in ({"long"}, set(), {"long", "stage5"}, {"slow"}, {"sandbox"}, {"sandbox", "long"}):
        # both expressions use only `not`, `and` and marker names: Python evaluates them as written
        chosen = [eval(e, {"__builtins__": {}}, {n: n in markers for n in names}) for e in (test, long)]
        assert sum(chosen) == (0 if "sandbox" in markers else 1), (markers, chosen)
    steps = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("make ")]
    assert steps.count("make test") == 1 and steps.count("make test-long") == 1, steps


def test_the_quick_selection_leaves_out_every_loop_marker():
    assert QUICK == "not (notebooks or controllers or learner_run or slow)"
    assert set(LOOP_MARKERS) == {"notebooks", "controllers", "learner_run", "slow"}


@pytest.mark.parametrize(
    "argv, refused",
    [
        ([sys.executable, "-m", "shardlab.multi.program", "--shared", "/s"], "shardlab.multi.program"),
        (["/venv/bin/python", "-m", "ipykernel_launcher", "-f", "k.json"], "ipykernel_launcher"),
        ("jupyter lab --no-browser", "jupyter"),
        ([sys.executable, "-m", "shardlab", "run", "--seed", "1.5"], None),  # a command line refused at once
        ([sys.executable, "-m", "shardlab", "check", "--stage", "1"], None),  # the checker starts no kernel
        ([sys.executable, "-m", "shardlab", "--help"], None),
        (["git", "ls-files"], None),
        ([sys.executable, "-c", "print('shardlab run')"], None),  # words inside a program are not argv words
    ],
)
def test_a_child_is_refused_by_what_it_starts(argv, refused):
    assert refused_command(argv) == refused
