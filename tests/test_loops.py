"""The table of the loops (`python -m rig.loops`): its shape and bookkeeping on tiny fake loops.

No timing is asserted: only that every sample is kept, medians are the medians of the kept samples,
the load is recorded beside each sample, and the command writes nothing but its loops.json.
"""

import itertools
import json
import os
import shlex
import statistics
import sys
from pathlib import Path

from rig import loops


def fake_loops(scratch):
    marker = scratch / "parts.json"

    def parts():
        return json.loads(marker.read_text())

    write = f"import json; json.dump({{'a': 1.5, 'b': 2.5}}, open({str(marker)!r}, 'w'))"
    return {
        "passes": loops.Loop("passes", [sys.executable, "-c", "pass"], str(scratch), note="exits 0"),
        "fails": loops.Loop("fails", [sys.executable, "-c", "raise SystemExit(3)"], str(scratch)),
        "parts": loops.Loop("parts", [sys.executable, "-c", write], str(scratch), parts=parts),
    }


def test_every_sample_is_kept_round_robin_with_its_load_and_the_medians_are_theirs(tmp_path):
    ticks = itertools.count(0.0, 0.5)  # each reading of the clock half a second after the one before
    clock = lambda: next(ticks)  # noqa: E731
    loads = itertools.count(1.0)
    load = lambda: (next(loads), 0.0, 0.0)  # noqa: E731
    said = []
    found = loops.measure(fake_loops(tmp_path), samples=3, clock=clock, load=load, echo=said.append)
    assert list(found) == ["passes", "fails", "parts"]
    assert [line.split()[2] for line in said] == ["passes", "fails", "parts"] * 3  # round-robin
    befores = []
    for row in found.values():
        samples = row["all_samples"]
        assert row["samples"] == len(samples) == 3
        assert all(s["wall_s"] == 0.5 for s in samples)  # one tick between start and end of each sample
        assert row["median_wall_s"] == statistics.median(s["wall_s"] for s in samples)
        assert all(s["load_after"][0] == s["load_before"][0] + 1 for s in samples)
        befores += [s["load_before"][0] for s in samples]
        assert row["median_load_before"] == statistics.median(s["load_before"][0] for s in samples)
    assert sorted(befores) == [1.0 + 2 * k for k in range(9)]  # each sample read the load twice, in turn
    assert found["passes"]["all_exited_0"] and not found["fails"]["all_exited_0"]
    assert {s["exit_status"] for s in found["fails"]["all_samples"]} == {3}
    assert found["parts"]["median_parts_s"] == {"a": 1.5, "b": 2.5}
    assert "median_parts_s" not in found["passes"]


def test_the_command_writes_only_its_table_and_prints_one_row_per_loop(tmp_path):
    out = tmp_path / "bench"
    result = loops.run(out, samples=2, loops=fake_loops, echo=lambda line: None)
    assert sorted(p.name for p in out.iterdir()) == [".shardlab-manifest.json", loops.LOOPS_JSON]
    kept = json.loads((out / loops.LOOPS_JSON).read_text())
    assert kept == json.loads(json.dumps(result))
    assert set(kept["machine"]) >= {"load_average_at_start", "load_average_at_end", "logical_cpus"}
    assert kept["samples_per_loop"] == 2 and all(len(r["all_samples"]) == 2 for r in kept["loops"].values())
    text = loops.table(kept)
    assert [line.split("|")[1].strip() for line in text.splitlines()[2:]] == [
        "passes",
        "fails",
        "parts",
        "parts: a",
        "parts: b",
    ]


def test_the_course_loops_are_the_ones_people_wait_on(tmp_path):
    from conftest import REPO

    found = loops.course_loops(REPO, tmp_path)
    assert list(found) == [
        "test_quick",
        "course_run",
        "check_stage_1",
        "check_stage_all",
        "check_cell_1",
        "check_cell_2",
        "check_cell_3",
        "venv",
        "grade_class",
    ]
    assert "--quick" in found["test_quick"].command and found["test_quick"].cwd == str(REPO)
    # the quick loop is the Makefile's: its pytest arguments, in its order (a sandbox test is not in it)
    recipe = next(line for line in (REPO / "Makefile").read_text().splitlines() if "pytest --quick" in line)
    made = shlex.split(recipe.split("-m pytest", 1)[1].split("\\", 1)[0].split("&&", 1)[0])
    command = found["test_quick"].command
    at = command.index("pytest") + 1
    assert command[at : at + len(made)] == made and "not sandbox" in made, (made, command)
    # ...and its variables, written between the recipe's clock and the interpreter
    words = shlex.split(recipe.split("$(BIN)/python", 1)[0].rsplit(";", 1)[-1])
    variables = dict(word.split("=", 1) for word in words)
    assert variables and variables == found["test_quick"].env, (variables, found["test_quick"].env)
    assert all(loops.environment(found["test_quick"])[name] == value for name, value in variables.items())
    assert found["check_stage_all"].command[-2:] == ["--stage", "all"]
    # each check cell loop runs what that stage's notebook's check cell runs, on the reference
    for stage, notebook in (("1", "stage1_batches"), ("2", "stage2_update"), ("3", "stage3b_resume")):
        text = (REPO / "notebooks" / f"{notebook}.md").read_text()
        assert f"check_here(implementation, stage={stage})" in text, notebook
        assert 'implementation = "reference"' in text, notebook  # the parameter the course run keeps
        command = found[f"check_cell_{stage}"].command
        assert command[1] == "-c" and f"check_here('reference', stage={stage})" in command[2]
    # the venv loop installs the Makefile's pinned packages with its pip options, into scratch, cold each time
    recipe = next(line for line in (REPO / "Makefile").read_text().splitlines() if "-r requirements-cpu.txt" in line)
    pip = recipe.split("-m pip install", 1)[1].split("-r", 1)[0].split()
    script = found["venv"].command[-1]
    assert pip and script.split("-m pip install", 1)[1].split("-r", 1)[0].split() == pip, (pip, script)
    assert script.endswith(str(REPO / "requirements-cpu.txt")) and f"-m venv {tmp_path.resolve()}" in script
    pip_cache = Path(loops.environment(found["venv"])["PIP_CACHE_DIR"])
    assert pip_cache.is_relative_to(tmp_path.resolve())
    for folder in (pip_cache, tmp_path / "venv"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "left").write_text("from an earlier sample")
    found["venv"].prepare()
    assert not pip_cache.exists() and not (tmp_path / "venv").exists()
    found["grade_class"].prepare()
    assert sorted(p.name for p in (tmp_path / "grade" / "class").iterdir()) == sorted(
        c.split("/")[1] for c in loops.CLASS
    )
    # the checker's cache: each check or grade sample starts from an empty folder in scratch; the quick loop
    # gets none from this process (this session's own, set by conftest), so its conftest makes a fresh one
    assert loops.CHECK_CACHE in os.environ and loops.CHECK_CACHE not in loops.environment(found["test_quick"])
    for name in ("check_stage_1", "check_stage_all", "grade_class"):
        cache = Path(loops.environment(found[name])[loops.CHECK_CACHE])
        assert cache.is_relative_to(tmp_path.resolve()), name
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "kept").write_text("a verdict of an earlier sample")
        found[name].prepare()
        assert not cache.exists(), name
    outs = [loop.command[loop.command.index("--out") + 1] for loop in found.values() if "--out" in loop.command]
    assert len(outs) == 2 and all(out.startswith(str(tmp_path.resolve())) for out in outs)  # writes only in scratch
