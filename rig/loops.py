"""`python -m rig.loops --out DIR`: the wall time of the loops people wait on, side by side in one run.

The loops are the developer's inner loop (`pytest --quick`, what `make test-quick` runs), the
course run (`python -m shardlab run`, with the seconds of each notebook as the run records them
in its wall_time.json), the checker on the reference (`check --stage 1` and `--stage all`, and what each
notebook's check cell runs: `check_here` of one stage without the randomised search), a new venv with the
pinned packages (what `make venv` waits on, from an empty pip cache) and a grade of a small class (two correct
files and a broken one from tests/). Each loop is a command in
a child process; the samples go round-robin (every loop's first sample, then every loop's second),
so a change of load on a shared machine spreads over all loops alike. The checker keeps compiled
programs and passed verdicts between runs; the check and grade loops start each sample from an
empty cache folder of their own, so they time a first check, not what this machine checked before.
Every sample is kept with its exit status and the machine's load average (os.getloadavg) just before and just after it;
the table reports medians. These are measurements of one machine at one time, never a pass/fail
threshold: they show the next change that slows a loop as a number. The README and docs/checker.md state
these times only as `took` renders them from the committed table; `--restate` writes them
again after the table is measured again.

It belongs to the rig, not the library: it times the checkout's own test suite and grades files
from tests/, so it runs from the repository root (`make bench` runs it after `python -m rig.bench`).
"""

import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from shardlab import process_group

LOOPS_JSON = "loops.json"
SAMPLES = 3
CLASS = ("correct/packed_psum.py", "correct/nested_contract.py", "broken/drop_remainder.py")  # under tests/
# make test-quick's variables (Makefile): Python keeps the bytecode it compiles (in __pycache__, which git ignores
# and `make clean` removes) even where the environment turns that off, so a second run reads what the first compiled
QUICK_ENV = {"PYTHONDONTWRITEBYTECODE": ""}
TIMEOUT_S = 3600.0  # per sample; a loop that passes it is recorded as stopped, never waited on for ever


@dataclass
class Loop:
    """One loop: the command a person runs, where, and what it records of its own parts."""

    name: str
    command: list
    cwd: str
    parts: object = None  # a callable returning {part: seconds} after a sample, or None
    prepare: object = None  # a callable run before each sample (a fresh output folder), or None
    note: str = ""
    env: dict | None = None  # variables set for this loop's command, over this process's environment


# what a notebook's check cell runs (its `implementation` parameter is "reference" in the course run)
CHECK_CELL = (
    "import sys; from shardlab.checker import check_here; "
    "sys.exit(0 if check_here('reference', stage={stage})['passed'] else 1)"
)
# what `make venv` spends its time on: the venv and the pinned packages (its editable install of the checkout
# would write into the checkout, so it is left out)
VENV = (
    "{python} -m venv {venv} && {venv}/bin/python -m pip install --disable-pip-version-check --quiet -r {requirements}"
)
CHECK_CACHE = "SHARDLAB_CHECK_CACHE"  # the checker's folder of compiled programs and kept verdicts


def environment(loop: Loop) -> dict:
    """The command's environment: this process's, without a checker cache folder of its own, and the loop's."""
    found = {name: value for name, value in os.environ.items() if name != CHECK_CACHE}
    return {**found, **(loop.env or {})}


def _course_parts(out: Path):
    def parts() -> dict:
        from shardlab.course.execute import WALL_TIME

        try:
            recorded = json.loads((out / WALL_TIME).read_text())
        except (OSError, ValueError):
            return {}
        return recorded.get("notebook_s", {})

    return parts


def _fresh(*folders: Path):
    def prepare() -> None:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)

    return prepare


def _class(checkout: Path, folder: Path, cache: Path):
    def prepare() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        (folder / "class").mkdir(parents=True)
        for relative in CLASS:
            source = checkout / "tests" / relative
            (folder / "class" / source.name).write_bytes(source.read_bytes())

    return prepare


def course_loops(checkout, scratch) -> dict:
    """The loops of this checkout, each writing only inside `scratch` (tests/ and the Makefile's commands)."""
    checkout, scratch = Path(checkout).resolve(), Path(scratch).resolve()
    python = sys.executable
    run_out, grade = scratch / "course_run", scratch / "grade"
    # the checker keeps compiled programs and passed verdicts between runs (shardlab.checker.reuse): each sample
    # starts from an empty folder in scratch, so it times a first check, whatever this machine checked before
    cache = scratch / "check-cache"
    venv, pip_cache = scratch / "venv", scratch / "pip-cache"
    cold = {CHECK_CACHE: str(cache)}
    found = [
        Loop(
            "test_quick",
            [python, "-m", "pytest", "--quick", "-m", "not sandbox", "-p", "no:cacheprovider", "-q"],
            str(checkout),
            note="make test-quick: every test that runs no notebook, controller group or learner run",
            env=QUICK_ENV,
        ),
        Loop(
            "course_run",
            [python, "-m", "shardlab", "run", "--out", str(run_out), "--seed", "17", "--batch-size", "7"],
            str(scratch),
            parts=_course_parts(run_out),
            prepare=_fresh(run_out),
            note=(
                "make run (reference, seed 17, batch 7): parts are each notebook's seconds as the run recorded them "
                "(a notebook that times something with its HTML page, the others without it)"
            ),
        ),
        *(
            Loop(
                f"check_stage_{stage}",
                [python, "-m", "shardlab", "check", "--implementation", "reference", "--stage", stage],
                str(scratch),
                prepare=_fresh(cache),
                note=f"make check STAGE={stage} on the reference, from an empty checker cache",
                env=cold,
            )
            for stage in ("1", "all")
        ),
        *(
            Loop(
                f"check_cell_{stage}",
                [python, "-c", CHECK_CELL.format(stage=stage)],
                str(scratch),
                note=f"the check cell of stage {stage}'s notebook on the reference: check_here(stage={stage}), "
                "that stage alone, without the randomised search",
            )
            for stage in ("1", "2", "3")
        ),
        Loop(
            "venv",
            [
                "sh",
                "-c",
                VENV.format(
                    python=shlex.quote(python),
                    venv=shlex.quote(str(venv)),
                    requirements=shlex.quote(str(checkout / "requirements-cpu.txt")),
                ),
            ],
            str(scratch),
            prepare=_fresh(venv, pip_cache),
            note="make venv's slow part: a new venv and the pinned packages (requirements-cpu.txt) from this "
            "machine's package index, with an empty pip cache",
            env={"PIP_CACHE_DIR": str(pip_cache)},
        ),
        Loop(
            "grade_class",
            [python, "-m", "shardlab", "grade", str(grade / "class"), "--out", str(grade / "out")],
            str(scratch),
            prepare=_class(checkout, grade, cache),
            note="make grade of " + ", ".join(f"tests/{c}" for c in CLASS) + ", from an empty checker cache",
            env=cold,
        ),
    ]
    if not (checkout / "tests" / "conftest.py").is_file():
        found = [loop for loop in found if loop.name not in ("test_quick", "grade_class")]
    if not (checkout / "requirements-cpu.txt").is_file():
        found = [loop for loop in found if loop.name != "venv"]
    return {loop.name: loop for loop in found}


def sample(loop: Loop, clock=time.perf_counter, load=os.getloadavg, timeout: float = TIMEOUT_S) -> dict:
    """One timed run of `loop`'s command: wall seconds, exit status, load before and after, its recorded parts."""
    if loop.prepare:
        loop.prepare()
    before = list(load())
    start = clock()
    try:
        done = process_group.run(loop.command, timeout, cwd=loop.cwd, env=environment(loop), capture_output=True)
        status = done.returncode
    except subprocess.TimeoutExpired:
        status = "stopped after the timeout"
    wall = clock() - start
    found = {"wall_s": round(wall, 2), "exit_status": status, "load_before": before, "load_after": list(load())}
    if loop.parts:
        found["parts_s"] = loop.parts()
    return found


def summary(samples: list[dict]) -> dict:
    """Medians of the kept samples: wall seconds, each recorded part's seconds, the 1-minute load at the start."""
    found = {
        "samples": len(samples),
        "median_wall_s": round(statistics.median(s["wall_s"] for s in samples), 2),
        "min_wall_s": min(s["wall_s"] for s in samples),
        "max_wall_s": max(s["wall_s"] for s in samples),
        "median_load_before": round(statistics.median(s["load_before"][0] for s in samples), 2),
        "all_exited_0": all(s["exit_status"] == 0 for s in samples),
    }
    parts = [s.get("parts_s") or {} for s in samples]
    names = [name for name in (parts[0] if parts else {}) if all(name in p for p in parts)]
    if names:
        found["median_parts_s"] = {name: round(statistics.median(p[name] for p in parts), 2) for name in names}
    return found


def measure(loops: dict, samples: int = SAMPLES, clock=time.perf_counter, load=os.getloadavg, echo=print) -> dict:
    """Every loop `samples` times, round-robin; {name: {"command", "note", "samples": [...], **summary}}."""
    kept = {name: [] for name in loops}
    for number in range(1, samples + 1):
        for name, loop in loops.items():
            kept[name].append(sample(loop, clock, load))
            last = kept[name][-1]
            echo(f"[shardlab loops] {name} {number}/{samples}: {last['wall_s']:.1f} s, exit {last['exit_status']}")
    return {
        name: {
            "command": " ".join(os.path.basename(str(a)) if a == sys.executable else str(a) for a in loop.command),
            "note": loop.note,
            **summary(kept[name]),
            "all_samples": kept[name],
        }
        for name, loop in loops.items()
    }


def table(result: dict) -> str:
    """The loops side by side: median, range, samples and the load they started at."""
    lines = ["| loop | median s | min-max s | samples | load at start (median) | every exit 0 |", "|---" * 6 + "|"]
    for name, row in result["loops"].items():
        lines.append(
            f"| {name} | {row['median_wall_s']:.1f} | {row['min_wall_s']:.1f}-{row['max_wall_s']:.1f} | "
            f"{row['samples']} | {row['median_load_before']:.2f} | {'yes' if row['all_exited_0'] else 'no'} |"
        )
    for name, row in result["loops"].items():
        for part, seconds in (row.get("median_parts_s") or {}).items():
            lines.append(f"| {name}: {part} | {seconds:.1f} | | | | |")
    return "\n".join(lines)


def run(out, samples: int = SAMPLES, checkout=".", loops=None, echo=print) -> dict:
    """Measure the loops into OUT/loops.json (the output-folder policy of shardlab.outdir); return the result."""
    from shardlab import outdir

    with outdir.writing(out, "loops") as staging:
        scratch = staging / "scratch"
        scratch.mkdir()
        chosen = course_loops(checkout, scratch) if loops is None else loops(scratch)
        result = {
            "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {
                "logical_cpus": os.cpu_count(),
                "load_average_at_start": list(os.getloadavg()),
                "platform": platform.platform(),
            },
            "samples_per_loop": samples,
            "measured_by": "rig.loops: each loop's command in a child process, round-robin; wall clock",
            "loops": measure(chosen, samples, echo=echo),
        }
        result["machine"]["load_average_at_end"] = list(os.getloadavg())
        shutil.rmtree(scratch)
        (staging / LOOPS_JSON).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


# The times people read. A text states a loop's time only through `took` (a clause that ends by citing the loop's
# key in the committed table), so `restated` can write it again from a new table and tests/test_stated_times.py
# can find every one and compare it with the table.
TABLE = f"bench/loops/{LOOPS_JSON}"  # the committed table, relative to the checkout
STATED_IN = (  # the files that state times, relative to the checkout; each .md notebook's .ipynb pair too
    "README.md",
    "docs/checker.md",
)
CLAUSE = re.compile(
    r"(?:took [0-9.]+ s|has not been measured yet|did not finish cleanly when last measured)"
    r" \([^()]*?`(?P<key>[a-z0-9_]+)` in `" + re.escape(TABLE) + r"`\)"
)


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def took(result: dict, key: str) -> str:
    """The clause stating how long loop `key` took in the table `result`, worded for each outcome: measured,
    measured but not every run exited 0, or not in the table."""
    cited = f"`{key}` in `{TABLE}`"
    row = (result.get("loops") or {}).get(key)
    if row is None:
        return f"has not been measured yet (`make bench` measures it: {cited})"
    date = str(result.get("date_utc", ""))[:10]
    if not row["all_exited_0"]:
        statuses = sorted({str(s["exit_status"]) for s in row["all_samples"]})
        return f"did not finish cleanly when last measured (exit status {', '.join(statuses)}, {date}: {cited})"
    runs = (
        "one run"
        if row["samples"] == 1
        else f"median of {row['samples']} runs, {_seconds(row['min_wall_s'])} to {_seconds(row['max_wall_s'])} s"
    )
    cpus = result.get("machine", {}).get("logical_cpus")
    return (
        f"took {_seconds(row['median_wall_s'])} s ({runs}, on {cpus} logical CPUs at load "
        f"{row['median_load_before']:.1f}, {date}: {cited})"
    )


def restated(text: str, result: dict) -> str:
    """`text` with every stated time clause written again from the table `result`."""
    return CLAUSE.sub(lambda m: took(result, m.group("key")), text)


def restate(checkout=".", table=None, write: bool = True) -> list[str]:
    """The files of STATED_IN and their .ipynb pairs whose stated times differ from the table's (the checkout's
    committed one unless `table` is given); rewritten when `write`. Writes only inside `checkout`.

    A clause is one line of one markdown cell, with no quote or backslash in it, so it reads the same in a
    notebook's JSON as in its MyST text: both files of a pair are rewritten alike, with no sync needed."""
    from shardlab.errors import UsageError

    checkout = Path(checkout).resolve()
    source = Path(table or checkout / TABLE)
    try:
        result = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{source} is not a loops table that can be read ({type(exc).__name__})") from None
    if not isinstance(result, dict) or not isinstance(result.get("loops"), dict):
        raise UsageError(f"{source} holds no 'loops': it is not a table python -m rig.loops wrote")
    names = [
        name
        for relative in STATED_IN
        for name in (
            relative,
            *([str(Path(relative).with_suffix(".ipynb"))] if relative.startswith("notebooks/") else []),
        )
    ]
    missing = [name for name in names if not (checkout / name).is_file()]
    if missing:  # refused before anything is written
        raise UsageError(f"{checkout} is not a shardlab checkout: it has no {', '.join(missing)}")
    changed = []
    for name in names:
        path = checkout / name
        before = path.read_text(encoding="utf-8")
        after = restated(before, result)
        if after != before:
            changed.append(name)
            if write:
                path.write_text(after, encoding="utf-8")
    return changed


def add_arguments(parser) -> None:
    from shardlab.cli import count

    parser.add_argument("--out", default="bench", help=f"folder for {LOOPS_JSON} (default: bench)")
    parser.add_argument("--samples", type=count, default=SAMPLES, help=f"samples per loop (default {SAMPLES})")
    parser.add_argument("--checkout", default=".", help="the checkout whose tests/ the quick loop and the class use")
    parser.add_argument(
        "--restate",
        action="store_true",
        help=f"measure nothing: write the times the checkout's README and docs state again from {TABLE}",
    )


def command(argv=None) -> int:
    """`python -m rig.loops ARGV`: a bad command line is one UsageError line and exit code 2, as for the course's."""
    from rig import cli

    return cli.command("python -m rig.loops", __doc__.splitlines()[0], add_arguments, main, argv)


def main(args) -> int:
    from shardlab.errors import OutputFolderError

    if args.restate:
        from shardlab.errors import UsageError

        try:
            changed = restate(args.checkout)
        except UsageError as exc:
            print(f"[shardlab loops] {exc}", file=sys.stderr)
            return 2
        for relative in changed:
            print(f"[shardlab loops] stated times written again: {relative}")
        print(f"[shardlab loops] {len(changed)} file(s) changed; every stated time is {TABLE}'s")
        return 0
    try:
        result = run(args.out, args.samples, args.checkout)
    except OutputFolderError as exc:
        print(f"[shardlab loops] {exc}", file=sys.stderr)
        return 1
    print(table(result))
    print(f"[shardlab loops] wrote {Path(args.out) / LOOPS_JSON}")
    return 0


if __name__ == "__main__":
    sys.exit(command())
