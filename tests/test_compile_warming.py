"""The checking interpreter warms the compilation cache with the sampler's programs for the search's row counts.

Two facts make that worth doing, and each is observed here from outside the code that relies on it: a learner's
`initial` in another interpreter reads the warmed programs from the cache (JAX's own log says so), and the row
counts warmed are the ones the search gives the learner's `initial` (a learner file records them). The checks that
call the un-jitted step (one program per operation at every call) give it one padded shape.
"""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from shardlab.checker import cli as runner
from shardlab.checker import compile_cache, search

WARM = """
import json, sys
from shardlab.core.devices import setup_devices
setup_devices(4)
import shardlab.checker.compile_cache as compile_cache
compile_cache.enable()
print(json.dumps(compile_cache.warm(json.loads(sys.argv[1])).close(finish=True)))
"""

LEARNER = """
import numpy as np
from shardlab.core.devices import make_mesh, setup_devices
from shardlab.core.fixtures import Dataset
setup_devices(4)
import shardlab.checker.compile_cache as compile_cache
compile_cache.enable()
from shardlab.learner.reference import initial
for rows in (7, 13):
    data = Dataset(np.ones((rows, 2), np.float32), np.ones(rows, np.float32))
    np.asarray(initial(5, data, make_mesh(4))["order"])
"""


def _run(code: str, cache, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, compile_cache.ENV: str(cache), "JAX_LOG_COMPILES": "1", "JAX_PLATFORMS": "cpu"}
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        env.pop(name, None)
    found = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
    assert found.returncode == 0, found.stderr[-2000:]
    return found


def _shuffles(log: str) -> tuple[int, int]:
    """(programs `jax.random.permutation` compiled, of which read from the persistent cache), from JAX's log."""
    return log.count("Compiling jit(_shuffle)"), log.count("Persistent compilation cache hit for 'jit__shuffle'")


@pytest.mark.slow  # three child interpreters: make test's, not the inner loop's
def test_a_learners_initial_in_another_interpreter_reads_the_warmed_permutations(tmp_path):
    warmed = _run(WARM, tmp_path / "warm", json.dumps([7, 13]))
    assert json.loads(warmed.stdout.strip().splitlines()[-1]) == [13, 7]  # the last size the checks use first
    assert _shuffles(_run(LEARNER, tmp_path / "warm").stderr) == (2, 2)  # both read, none compiled again
    assert _shuffles(_run(LEARNER, tmp_path / "cold").stderr) == (2, 0)  # without the warming: both compiled


def _recording(tmp_path):
    """(a learner file that is the reference but records the rows each `initial` receives, the record)."""
    record = tmp_path / "rows.txt"
    path = tmp_path / "recording.py"
    path.write_text(
        textwrap.dedent(f"""
        from shardlab.learner.reference import *  # noqa: F403
        from shardlab.learner.reference import initial as _initial

        def initial(seed, data, mesh):
            with open({str(record)!r}, "a") as out:
                out.write(f"{{len(data[0])}}\\n")
            return _initial(seed, data, mesh)
        """)
    )
    return path, record


# (stage, the searched checks, search seed, cases, the rows each `initial` call receives, in order)
WALKS = [
    # two initial calls per case: the case's rows, then another shape's
    (1, ("random_sampler_walk",), 31, 3, [24, 23, 34, 23, 23, 1]),
    # the teaching fixtures' 23 rows then 5: the first case's other shape is one row (no sort to compile),
    # the second case's the 23 rows compiled already
    (1, ("random_sampler_walk",), 2, 2, [23, 1, 5, 23]),
    # a step search warms no row count (it calls no initial); each transition walk calls initial once, on a row
    # count the sampler walks of that seed draw (search.shared_rows: 24, 23, 34, 1, 2, 5) or on a fixture
    pytest.param(2, ("random_step_update", "random_transition_walk"), 31, 2, [1, 1023], marks=pytest.mark.slow),
]


@pytest.mark.parametrize("stage, searched, seed, cases, rows", WALKS, ids=["walk", "teaching-rows", "step-search"])
def test_the_rows_warmed_are_the_rows_the_search_gives_initial(tmp_path, stage, searched, seed, cases, rows):
    path, record = _recording(tmp_path)
    enumerated = [c.__name__ for c in runner.checks_of(stage) if c.__name__ not in searched]
    results = runner.run_checks(str(path), stage, only=True, skip=enumerated, search_seed=seed, search_cases=cases)
    assert sorted(r.name for r in results) == sorted(searched) and all(r.passed for r in results), results
    given = [int(line) for line in record.read_text().split()]
    assert list(dict.fromkeys(given)) == search.row_counts({stage}, seed, search_cases=cases)
    assert given == rows


@pytest.mark.slow  # three child interpreters: make test's, not the inner loop's
def test_a_warming_leaves_the_row_counts_it_compiled_into_the_same_cache_before(tmp_path):
    first = _run(WARM, tmp_path / "cache", json.dumps([7, 13]))
    assert json.loads(first.stdout.strip().splitlines()[-1]) == [13, 7]
    assert _shuffles(first.stderr) == (2, 0)  # both compiled into the new folder
    again = _run(WARM, tmp_path / "cache", json.dumps([7, 13, 17]))
    assert json.loads(again.stdout.strip().splitlines()[-1]) == [17]  # only the row count it has not compiled there
    assert _shuffles(again.stderr) == (1, 0)  # 7 and 13 neither compiled nor read back
    for entry in (tmp_path / "cache").glob("jit__shuffle-*"):  # the programs go: the record no longer holds
        entry.unlink()
    emptied = _run(WARM, tmp_path / "cache", json.dumps([7, 13]))
    assert json.loads(emptied.stdout.strip().splitlines()[-1]) == [13, 7]
    assert _shuffles(emptied.stderr) == (2, 0)


def _nice(thread_id: int) -> int:
    """A thread's nice value as the kernel reports it (/proc: field 19 of its stat line)."""
    with open(f"/proc/self/task/{thread_id}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[16])


def test_the_warming_thread_runs_at_the_lowest_priority_and_the_checks_do_not():
    here = _nice(threading.get_native_id())
    warming = compile_cache.Warming([1009, 1013, 1019])
    seen, deadline = None, time.monotonic() + 60
    try:
        while warming.thread.is_alive() and time.monotonic() < deadline and seen != 19:
            seen = _nice(warming.thread.native_id)
    finally:
        warming.close()
    assert seen == 19, f"the warming thread ran at nice {seen}"
    assert _nice(threading.get_native_id()) == here  # the thread running the checks keeps its priority


def test_the_warming_waits_while_no_core_is_free_and_finishes_when_asked(monkeypatch):
    monkeypatch.setattr(compile_cache, "spare_core", lambda: False)
    waiting = compile_cache.Warming([1031, 1033])
    time.sleep(0.5)
    assert waiting.thread.is_alive() and waiting.done == []  # nothing compiled while every core is wanted
    assert waiting.close() == [] and not waiting.thread.is_alive()  # stopped without compiling
    assert compile_cache.Warming([1031, 1033]).close(finish=True) == [1033, 1031]  # asked to finish: it does


def test_a_core_is_spare_only_while_the_runnable_threads_fit_the_cores(monkeypatch):
    with open("/proc/loadavg") as loadavg:
        runnable = int(loadavg.read().split()[3].split("/")[0])  # at least the thread reading it
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(runnable + 1000)))
    assert compile_cache.spare_core()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set())
    assert not compile_cache.spare_core()


def test_a_warming_leaves_the_row_counts_no_check_will_draw(monkeypatch):
    monkeypatch.setattr(compile_cache, "spare_core", lambda: False)
    warming = compile_cache.Warming([1031, 1033, 1039])
    warming.leave({1033})
    assert warming.close(finish=True) == [1039, 1031]


def test_stage_2_and_stage_4_give_the_un_jitted_step_one_padded_shape_and_stage_2_an_empty_device():
    from shardlab.checker import stage2, stage4

    # each device holds ceil(rows / 4) slots, filled in order: 5 rows -> [2, 2, 1, 0] over 8 slots, 7 -> [2, 2, 2, 1]
    from shardlab.verify.oracle import device_counts

    empty_device = device_counts(len(stage2.EMPTY_DEVICE_IDS[stage2.UNJITTED_BATCH]), 4)
    assert 4 * max(empty_device) == 4 * max(device_counts(stage4.ROWS, 4)) == 8  # one shape: its programs compile once
    assert empty_device[-1] == 0  # the check is still about a device without a valid row


def test_the_later_searches_draw_the_sampler_walks_row_counts_and_every_favoured_class():
    """A transition walk's or restore search's row count (1 to 64) is an end, its device count, twice it, 23, or a row
    count the same seed's sampler walks give `initial`; over seeds each of those classes is drawn, and so are row
    counts below the device count, and the row counts past stage 1's are at most four a run."""
    walk = search.PROPERTIES["sampler_walk"]
    classes, beyond = set(), []
    for seed in range(48):
        walked = set()
        for case in search.cases_for(walk, seed, walk.cases):
            walked |= {case.shape()[0], 23 if case.shape()[0] != 23 else 1}  # the case's, then its second initial's
        later = set()
        for name in ("transition_walk", "restore_damage"):
            prop = search.PROPERTIES[name]
            for case in (c for c in search.cases_for(prop, seed, prop.cases) if not c.fixture):
                favoured = {1: "end", 64: "end", case.devices: "devices", 2 * case.devices: "twice", 23: "23"}
                assert case.rows in walked or case.rows in favoured, (seed, name, case)
                classes |= {favoured.get(case.rows, "walked")} | (
                    {"fewer than devices"} if case.rows < case.devices else set()
                )
                later.add(case.rows)
        beyond.append(len(later - walked))
    assert classes == {"end", "devices", "twice", "23", "walked", "fewer than devices"}, classes
    assert max(beyond) <= 4, beyond
