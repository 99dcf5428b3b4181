"""Every time a learner or instructor reads is the measured table's, `bench/loops/loops.json` (`python -m rig.loops`).

A text states how long a loop takes only through the clause `rig.loops.took` renders, which cites the loop's key in
the table; every such clause in the README and the docs must be the one the committed table gives, so a table
measured again fails here until `python -m rig.loops --restate` writes the sentences again. The notebooks state no
time at all. No other wording of a duration ("about 2 min", "a few seconds", "~1.5 s") may appear where people read:
in the README, the docs, the notebooks, the starter, the Makefile or any command's `--help`.
"""

import json
import re
import shutil
import subprocess
import sys

import jupytext
from conftest import REPO

from rig import loops

TABLE = json.loads((REPO / loops.TABLE).read_text())

# Where each time is stated: the loops whose times the reader of that file needs.
EXPECTED = {
    "README.md": {"venv", "course_run", "check_stage_1", "check_stage_all", "test_quick"},
    "docs/checker.md": {"check_stage_1", "check_stage_all", "check_cell_1", "check_cell_2", "check_cell_3"},
}

# A duration stated by estimate, not by measurement: an approximation of a number of seconds or minutes, a
# vague amount of time, or a present-tense "takes N s". Bounds ("within 20 s", "timeout = 5.0") are limits the
# code enforces, and dated records ("took 108 s at load average 2-5") say when they were measured; neither is this.
ESTIMATE = re.compile(
    r"(?i)(?:(?:\b(?:about|around|roughly|approximately|nearly|almost|under|some)\s+|[~≈]\s*)"
    r"\d[\d.,]*\s*(?:s|sec|secs|seconds?|min|mins|minutes?|h|hours?)\b"
    r"|\ba (?:few|couple of) (?:seconds|minutes)\b|\b(?:several|many) (?:seconds|minutes)\b"
    r"|\b(?:a|half a) minute\b|\btakes? (?:about |around )?\d[\d.,]*\s*(?:s|min|minutes?|seconds?)\b)"
)


def _texts(relative: str, root=REPO) -> list[str]:
    """The file's text under `root`; for a notebook, also the markdown of its .ipynb pair (each must state the same)."""
    path = root / relative
    found = [path.read_text()]
    if path.parent.name == "notebooks":
        pair = jupytext.read(path.with_suffix(".ipynb"))
        found.append("\n\n".join(c.source for c in pair.cells if c.cell_type == "markdown"))
    return found


def test_every_stated_time_is_the_committed_tables():
    assert set(EXPECTED) == set(loops.STATED_IN)
    for relative, keys in EXPECTED.items():
        for text in _texts(relative):
            stated = [m.group("key") for m in loops.CLAUSE.finditer(text)]
            assert set(stated) == keys, (relative, stated)
            for match in loops.CLAUSE.finditer(text):
                assert match.group(0) == loops.took(TABLE, match.group("key")), (
                    f"{relative} states {match.group(0)!r}, the table {loops.TABLE} gives "
                    f"{loops.took(TABLE, match.group('key'))!r}: run `python -m rig.loops --restate`"
                )


def test_the_notebooks_state_no_measured_time():
    for path in sorted((REPO / "notebooks").glob("*.md")):
        for text in _texts(str(path.relative_to(REPO))):
            assert not loops.CLAUSE.findall(text), path.name
            assert "bench/loops" not in text, path.name


def test_every_stated_loop_is_one_the_rig_measures(tmp_path):
    measured = set(loops.course_loops(REPO, tmp_path))
    stated = set().union(*EXPECTED.values())
    assert stated <= measured, stated - measured
    assert not list(tmp_path.iterdir())  # naming the loops prepares and writes nothing


def _table(rows: dict, date="2031-02-03T04:05:06+00:00", cpus=8) -> dict:
    return {"date_utc": date, "machine": {"logical_cpus": cpus}, "loops": rows}


def _row(walls, statuses=None, load=1.25):
    statuses = statuses or [0] * len(walls)
    return {
        "samples": len(walls),
        "median_wall_s": sorted(walls)[len(walls) // 2],
        "min_wall_s": min(walls),
        "max_wall_s": max(walls),
        "median_load_before": load,
        "all_exited_0": all(s == 0 for s in statuses),
        "all_samples": [{"wall_s": w, "exit_status": s} for w, s in zip(walls, statuses)],
    }


def test_the_clause_is_worded_for_each_outcome_and_found_again():
    table = _table(
        {
            "one": _row([7.25]),
            "three": _row([130.4, 118.2, 141.9], load=3.5),
            "failed": _row([0.95, 2.0], statuses=[2, 0]),
        }
    )
    one, three, failed = (loops.took(table, k) for k in ("one", "three", "failed"))
    missing = loops.took(table, "never_measured")
    assert one.startswith("took 7.2 s (one run, on 8 logical CPUs at load 1.2, 2031-02-03")  # 7.25 to one decimal
    assert three.startswith("took 130 s (median of 3 runs, 118 to 142 s, on 8 logical CPUs at load 3.5, 2031-02-03")
    assert failed.startswith("did not finish cleanly when last measured (exit status 0, 2, 2031-02-03")
    assert "took" not in failed and "0.95" not in failed  # no time is stated for a loop that failed
    assert missing.startswith("has not been measured yet (`make bench` measures it")
    for key, clause in (("one", one), ("three", three), ("failed", failed), ("never_measured", missing)):
        assert clause.endswith(f"`{key}` in `bench/loops/loops.json`)")
        sentence = f"The loop {clause}; then more text (with parentheses) follows."
        assert [m.group("key") for m in loops.CLAUSE.finditer(sentence)] == [key]
        assert loops.restated(sentence, table) == sentence
    other = _table({"one": _row([61.0])}, date="2032-01-01T00:00:00+00:00")
    assert loops.restated(f"It {one}.", other) == "It took 61 s (one run, on 8 logical CPUs at load 1.2, " + (
        "2032-01-01: `one` in `bench/loops/loops.json`)."
    )


def test_restate_writes_a_new_tables_times_into_a_copy_and_nothing_else(tmp_path, capsys):
    checkout = tmp_path / "checkout"
    for relative in loops.STATED_IN:
        target = checkout / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, target)
        if target.parent.name == "notebooks":
            shutil.copy((REPO / relative).with_suffix(".ipynb"), target.with_suffix(".ipynb"))
    (checkout / loops.TABLE).parent.mkdir(parents=True)
    shutil.copy(REPO / loops.TABLE, checkout / loops.TABLE)
    keys = set().union(*EXPECTED.values())
    walls = {key: 11.0 + 3 * number for number, key in enumerate(sorted(keys))}  # each key its own whole number
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(_table({key: _row([wall]) for key, wall in walls.items()})))
    listing = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))

    files = [
        name
        for relative in loops.STATED_IN
        for name in (relative, *([relative[:-3] + ".ipynb"] if relative.startswith("notebooks/") else []))
    ]
    assert loops.restate(checkout, newer, write=False) == files  # every file states a time
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == listing
    assert loops.restate(checkout, newer) == files
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == listing  # no file added
    for relative, expected in EXPECTED.items():
        for text in _texts(relative, checkout):
            for key in expected:
                assert f"took {walls[key]:.0f} s (one run, on 8 logical CPUs at load 1.2, 2031-02-03: `{key}`" in text
    assert loops.restate(checkout, newer, write=False) == []
    done = subprocess.run(
        [sys.executable, "-m", "rig.loops", "--restate", "--checkout", str(checkout)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )  # the committed table again: the copy is back to the checkout's text
    assert done.returncode == 0, done.stderr
    assert f"{len(files)} file(s) changed" in done.stdout
    for name in files:  # byte for byte, the .ipynb pairs too
        assert (checkout / name).read_text() == (REPO / name).read_text(), name


def test_no_command_help_states_an_estimated_time():
    from shardlab import __main__ as face

    top = face.parser()
    helps = [top.format_help()] + [top.commands[name].format_help() for name in face.COMMANDS]
    assert len(helps) == len(face.COMMANDS) + 1 and all("usage:" in text for text in helps)
    found = [hit for text in helps for hit in ESTIMATE.findall(text)]
    assert not found, found


def test_no_time_people_read_is_an_estimate():
    planted = "It takes about 2 min, a few seconds more; ~1.5 s. It took 108 s at load 2; within 20 s."
    assert ESTIMATE.findall(planted) == ["takes about 2 min", "a few seconds", "~1.5 s"]
    files = [
        REPO / "README.md",
        REPO / "Makefile",
        REPO / "lib/shardlab/learner/templates/starter.py",
        *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "notebooks").glob("*.md")),
    ]
    found = [(path.name, hit) for path in files for hit in ESTIMATE.findall(path.read_text())]
    assert not found, f"durations stated by estimate (state them from {loops.TABLE} through rig.loops.took): {found}"


def test_restate_refuses_a_folder_that_is_not_a_checkout_or_a_table_it_cannot_read(tmp_path, capsys):
    (tmp_path / "README.md").write_text("It took 1.0 s (one run: `venv` in `bench/loops/loops.json`).\n")
    before = sorted(tmp_path.rglob("*"))
    assert loops.command(["--restate", "--checkout", str(tmp_path)]) == 2  # no table
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "is not a loops table that can be read (FileNotFoundError)" in said[0], said
    table = tmp_path / "bench" / "loops" / loops.LOOPS_JSON
    table.parent.mkdir(parents=True)
    for text, why in (("{not json", "is not a loops table that can be read"), ("[]", "holds no 'loops'")):
        table.write_text(text)
        assert loops.command(["--restate", "--checkout", str(tmp_path)]) == 2
        assert why in capsys.readouterr().err
    table.write_text(json.dumps(_table({"venv": _row([5.0])})))
    assert loops.command(["--restate", "--checkout", str(tmp_path)]) == 2  # README alone: the rest is missing
    said = capsys.readouterr().err
    assert "is not a shardlab checkout: it has no docs/checker.md" in said
    assert (tmp_path / "README.md").read_text().startswith("It took 1.0 s")  # refused before anything is written
    assert sorted(tmp_path.rglob("*")) == sorted([*before, table.parent.parent, table.parent, table])
