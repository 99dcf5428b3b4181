"""Shared fixtures. The notebooks run once per session into a temporary folder (`run_dir`).

Every test that reads notebook results uses `run_dir`, so `make test` executes each stage
notebook exactly once, in fresh kernels, exactly as `make run` does.
"""

from pathlib import Path

import nbformat
import pytest

import shardlab as sl
from shardlab.course import execute as runner
from shardlab.lessons import results as record

REPO = Path(__file__).resolve().parents[1]  # the checkout, for tests only; the library never needs it

sl.setup_devices(4)


@pytest.fixture(scope="session")
def mesh():
    return sl.make_mesh(4)


@pytest.fixture(scope="session")
def data():
    return sl.teaching_fixture()


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    """A complete `python -m shardlab run` (seed 17, batch 7) into a fresh folder."""
    out = tmp_path_factory.mktemp("run") / "receipts"
    return runner.run(out, seed=17, batch_size=7)


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
