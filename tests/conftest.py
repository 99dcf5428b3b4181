"""Shared fixtures. The notebooks run once per session into a temporary folder (`run_dir`).

Every test that reads notebook results uses `run_dir`, so `make test` executes each stage
notebook exactly once, in fresh kernels, exactly as `make run` does.
"""

import nbformat
import pytest

import shardlab as sl
from shardlab import record, runner

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
