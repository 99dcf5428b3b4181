"""Numbers the docstrings, docs and comments state, checked against the code they describe."""

import ast
import re

from conftest import REPO

from rig import torture
from rig.torture import categories, outcome
from shardlab.multi import drills, guard, rows, supervisor

WORDS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten".split())}


def stated(text: str, noun: str) -> int:
    """The number written (as a word) just before `noun` in `text`."""
    found = re.search(rf"\b(\w+) {noun}", text, re.IGNORECASE)
    assert found, f"no count of {noun!r} in the text"
    return WORDS[found.group(1).lower()]


def test_the_failure_columns_are_as_many_as_stated():
    assert stated(torture.__doc__, "failure columns") == len(outcome.FAILURES)
    assert stated((REPO / "docs" / "reliability.md").read_text(), "failure columns") == len(outcome.FAILURES)
    assert all(column in torture.__doc__ for column in outcome.FAILURES)


def test_the_drills_module_names_as_many_drills_as_it_lists_and_each_exists():
    listed = re.findall(r"^\d\. `(\w+)`", drills.__doc__, re.M)
    assert stated(drills.__doc__, "drills here") == len(listed)
    assert all(callable(getattr(drills, name)) for name in listed)


def test_the_torture_categories_are_the_ones_the_docstring_names():
    assert len(categories.CATEGORIES) == len(set(categories.NAMES))
    words = ("kills during save", "corrupted files", "bad parameters", "multi-process", "output folders",
             "hostile restores", "save refusals", "stale temporaries", "Orbax", "fuzzer")  # fmt: skip
    text = " ".join(torture.__doc__.split())
    assert all(w in text for w in words) and len(words) == len(categories.CATEGORIES)


def test_the_freeze_bound_is_the_number_of_pulses_its_comment_states():
    comment = re.search(
        r"FREEZE_S = .*\((\d+) missed pulses\)", (REPO / "lib/shardlab/multi/supervisor.py").read_text()
    )
    assert int(comment.group(1)) == supervisor.FREEZE_S / guard.PULSE


def test_the_starter_holds_as_many_functions_as_the_readme_says():
    tree = ast.parse((REPO / "lib" / "shardlab" / "learner" / "templates" / "starter.py").read_text())
    public = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    readme = " ".join((REPO / "README.md").read_text().split())
    assert stated(readme, "functions the notebooks call") == len(public)
    assert all(f"`{name}`" in readme for name in public)


def test_the_row_table_is_a_projection_of_the_row_columns():
    assert set(rows.TABLE) - {"what", "cause"} <= set(rows.COLUMNS)


def test_the_bench_traces_stay_out_of_git_as_the_rule_says():
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "bench"], cwd=REPO, capture_output=True, text=True, check=True)
    assert tracked.stdout.strip(), "no bench file is tracked: is this a git checkout?"
    assert not [p for p in tracked.stdout.split() if p.startswith("bench/trace")]
    ignored = subprocess.run(["git", "check-ignore", "-q", "bench/trace_fused/x.xplane.pb"], cwd=REPO)
    assert ignored.returncode == 0
    assert "git ignores them" in (REPO / "docs" / "evidence.md").read_text()
