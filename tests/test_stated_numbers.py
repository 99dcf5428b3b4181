"""What the docstrings, docs and comments list, checked against the code they describe: by name, not by number word."""

import ast
import re

from conftest import REPO

from rig import torture
from rig.torture import outcome
from shardlab.learner import implementation
from shardlab.multi import drills, rows


def test_every_failure_column_is_named_where_the_campaign_is_described():
    reliability = (REPO / "docs" / "reliability.md").read_text()
    assert all(column in torture.__doc__ and f"`{column}`" in reliability for column in outcome.FAILURES)


def test_the_drills_module_lists_exactly_the_drills_its_series_runs():
    listed = re.findall(r"^\d\. `(\w+)`", drills.__doc__, re.M)
    assert all(callable(getattr(drills, name)) for name in listed)
    run_all = next(
        n
        for n in ast.parse((REPO / "lib/shardlab/multi/drills.py").read_text()).body
        if getattr(n, "name", "") == "run_all"
    )
    timed = [
        call.args[0].value
        for call in ast.walk(run_all)
        if isinstance(call, ast.Call)
        and getattr(call.func, "id", "") == "timed"
        and isinstance(call.args[0], ast.Constant)
    ]
    local = set(timed) & {name for name in dir(drills) if callable(getattr(drills, name))}
    assert set(listed) <= local  # every listed drill runs in the series
    assert all(re.search(rf"\b{name}\b", drills.__doc__) for name in local - set(listed))  # the control group too


def test_the_starter_holds_the_functions_the_readme_names_and_a_learner_file_must_define():
    tree = ast.parse((REPO / "lib" / "shardlab" / "learner" / "templates" / "starter.py").read_text())
    public = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    readme = " ".join((REPO / "README.md").read_text().split())
    assert sorted(public) == sorted(implementation.API)
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


def checker_counts(text: str) -> dict:
    """The counts docs/checker.md's `Counts (taken from the registry and the folders)` sentence states."""
    sentence = " ".join(text.split("Counts (taken from the registry and the folders):", 1)[1].split("\n\n")[0].split())
    found = re.match(
        r"\*\*(\d+) checks\*\* \(([\d +]+), stages 1 to 4.*?\*\*(\d+) broken implementations\*\*, "
        r"\*\*(\d+) correct alternatives\*\* \(and (\d+) more",
        sentence,
    )
    assert found, f"docs/checker.md's counts sentence changed shape: {sentence[:200]!r}"
    total, stages, broken, correct, more = found.groups()
    return {
        "checks": int(total),
        "per_stage": [int(n) for n in stages.split("+")],
        "broken": int(broken),
        "correct": int(correct),
        "more": int(more),
    }


def test_the_checker_page_counts_what_the_registry_and_the_folders_hold():
    from shardlab.checker import cli

    per_stage = [len(cli.checks_of(stage)) for stage in sorted(cli.STAGES)]
    assert checker_counts((REPO / "docs" / "checker.md").read_text()) == {
        "checks": sum(per_stage),
        "per_stage": per_stage,
        "broken": len(list((REPO / "tests" / "broken").glob("*.py"))),
        "correct": len(list((REPO / "tests" / "correct").glob("*.py"))),
        "more": len(list((REPO / "tests" / "correct" / "more").glob("*.py"))),
    }
