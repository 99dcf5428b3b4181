"""Shared fixtures. The notebooks run once per session into a temporary folder (`run_dir`).

Every test that reads notebook results uses `run_dir`, so `make test` executes each stage
notebook exactly once, in fresh kernels, exactly as `make run` does. The suite runs on two
pytest-xdist workers (`-n 2 --dist loadgroup` in pyproject.toml): every test that uses `run_dir`
goes to one worker, and the other runs the rest of the suite meanwhile.
"""

import fcntl
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest

import shardlab as sl
from shardlab.course import execute as runner
from shardlab.course import results as record

REPO = Path(__file__).resolve().parents[1]  # the checkout, for tests only; the library never needs it
if str(REPO) not in sys.path:  # the rig (REPO/rig) is not installed: the tests import it from the checkout
    sys.path.insert(0, str(REPO))

sl.setup_devices(4)


@pytest.fixture(scope="session")
def mesh():
    return sl.make_mesh(4)


@pytest.fixture(scope="session")
def data():
    return sl.teaching_fixture()


@pytest.fixture(scope="session")
def heldout(tmp_path_factory) -> Path:
    """The held-out learner files (tests/heldout/), made from their bases and diffs, each checked against its hash."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("heldout_files", REPO / "tests" / "heldout" / "files.py")
    files = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(files)
    return files.materialise(tmp_path_factory.mktemp("heldout"))


COURSE_GROUP = "course_run"  # the xdist group of every test that reads the session's course run


def session_folder(tmp_path_factory) -> Path:
    """This session's temporary root: under pytest-xdist the folder every worker's own basetemp sits in."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    """A complete `python -m shardlab run` (seed 17, batch 7) into a fresh folder, once per session.

    A file lock makes it once per session even if two xdist workers ask: the first runs the
    course, a later one waits for it and reuses its folder (or fails with its error), never runs it again.
    """
    shared = session_folder(tmp_path_factory) / "course-run"
    shared.mkdir(exist_ok=True)
    status = shared / "status.json"
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not status.exists():
            try:
                out = runner.run(shared / "receipts", seed=17, batch_size=7)
            except BaseException as exc:
                status.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
                raise
            status.write_text(json.dumps({"out": str(out)}))
    found = json.loads(status.read_text())
    if "error" in found:
        pytest.fail(f"this session's course run failed (in another xdist worker): {found['error']}")
    return Path(found["out"])


@pytest.hookimpl(trylast=True)  # after deselection (-m, -k) and after xdist's own hook
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup`, make the tests that read the course run one unit of work, listed first.

    xdist groups by an `@group` suffix of the node id, which xdist 3.8.0 writes where pytest 9.2 no
    longer reads it (a pytest-xdist 3.8.0 bug, upstream #1386), so the suffix is written here, through
    tests/_xdist.py. Without it the lock in `run_dir` still runs the course once; a second worker would only
    wait for it.
    """
    import _xdist

    course = [item for item in items if "run_dir" in getattr(item, "fixturenames", ())]
    for item in course:
        item.add_marker(pytest.mark.xdist_group(COURSE_GROUP))
    if not getattr(config.option, "loadgroup", False):
        return
    for item in course:
        _xdist.group_node_id(item, COURSE_GROUP)
    items[:] = course + [item for item in items if item not in course]  # the same order in every worker


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` with one unit per test module (its module fixtures set up once) and the course first.

    The course run is the longest unit, so it starts at once on one worker; the modules follow in
    collection order, each on one worker.
    """
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class CourseRunFirst(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return COURSE_GROUP if nodeid.endswith(f"@{COURSE_GROUP}") else nodeid.split("::")[0]

    config.option.loadscopereorder = False  # keep the workers' order, in which the course run leads
    return CourseRunFirst(config, log)


def executed(run_dir, name):
    """The executed notebook `name` from a run, read with nbformat."""
    nb = nbformat.read(run_dir / f"{name}.ipynb", as_version=4)
    assert nb.metadata["papermill"]["exception"] is None, f"{name} recorded an exception"
    return nb


def results(run_dir, name):
    """Results recorded in the executed notebook's outputs, cross-checked with the results file."""
    found = record.from_notebook(executed(run_dir, name))
    assert found == record.load(run_dir, name), f"{name}: notebook outputs and results file disagree"
    return found


_SESSION = {}  # whole-suite wall time, for `python -m shardlab bench` (see pytest_sessionfinish)


def pytest_sessionstart(session):
    import time

    _SESSION["start"] = time.perf_counter()


def pytest_sessionfinish(session, exitstatus):
    """After a whole-suite run (tests from `testpaths`, no -k/-m, as `make test` runs), keep its wall time."""
    import time
    from datetime import UTC, datetime

    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: the controller records the whole session
        return
    whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    whole = whole and not config.option.keyword and not config.option.markexpr
    if not whole or getattr(config, "cache", None) is None or "start" not in _SESSION:
        return
    config.cache.set(
        "shardlab/wall_time",
        {
            "wall_s": round(time.perf_counter() - _SESSION["start"], 1),
            "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "tests": session.testscollected,
            "failed": session.testsfailed,
            "exit_status": int(exitstatus),
            "measured_by": "tests/conftest.py: pytest session start to finish (excludes make's venv check)",
        },
    )
