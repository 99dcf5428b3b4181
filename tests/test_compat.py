"""The private APIs shardlab reaches into: pinned, present, and refused loudly when an upgrade changes them."""

import inspect
import re

import _xdist
import pytest
from conftest import REPO

from shardlab import compat
from shardlab.errors import CompatibilityError


def pinned(name):
    """The exact version requirements-cpu.txt (and environment.yml) pin for `name`."""
    versions = []
    for path in ("requirements-cpu.txt", "environment.yml"):
        found = re.search(rf"^\s*-?\s*{re.escape(name)}==([^\s#]+)", (REPO / path).read_text(), re.M)
        versions.append(found and found.group(1))
    return versions


PINNED = {**compat.PINS, **_xdist.PINS}  # the library's private reaches and the test suite's


@pytest.mark.parametrize("package", sorted(PINNED))
def test_every_pin_is_the_one_the_requirements_install(package):
    assert pinned(package) == [PINNED[package]] * 2
    pins = compat.PINS if package in compat.PINS else _xdist.PINS
    assert compat.require(package, pins=pins) == PINNED[package]


def test_the_library_pins_only_what_the_library_reaches_into():
    assert not set(compat.PINS) & set(_xdist.PINS)
    assert set(compat.PINS) == {"jax", "orbax-checkpoint"}


def test_another_version_is_refused_naming_both():
    with pytest.raises(CompatibilityError, match=r"orbax-checkpoint 0\.12\.8.*0\.13\.0 is installed"):
        compat.require("orbax-checkpoint", found="0.13.0")
    with pytest.raises(CompatibilityError, match=r"pytest 9\.2\.0.*9\.3\.0 is installed.*port tests/_xdist\.py"):
        compat.require("pytest", found="9.3.0", pins=_xdist.PINS, home=_xdist.HOME)


def test_the_orbax_writer_still_has_the_function_its_thread_runs():
    writer = compat.orbax_writer()
    wait = getattr(writer, compat.WRITER_WAIT)
    assert {"directory", "commit_futures", "on_commit_callback"} <= set(inspect.signature(wait).parameters)


def test_jax_cluster_detection_still_finds_slurm_and_mpi4py():
    env = compat.jax_cluster_env()
    names = {cls.__name__ for cls in env._cluster_types}
    assert {"SlurmCluster", "Mpi4pyCluster"} <= names
    assert "cluster_detection_method" in inspect.signature(env.auto_detect_unset_distributed_params).parameters


def test_a_missing_private_name_is_named():
    class Module:
        __name__ = "orbax.checkpoint._src.checkpointers.async_checkpointer"

    with pytest.raises(CompatibilityError, match=f"no {compat.WRITER_WAIT}"):
        compat.private(Module, compat.WRITER_WAIT, "orbax-checkpoint")


def test_the_xdist_group_suffix_is_written_into_the_node_id(request):
    item = request.node
    before, original = item.nodeid, item._id
    try:
        _xdist.group_node_id(item, "probe")
        assert item.nodeid == f"{before}@probe"
        _xdist.group_node_id(item, "again")  # a node id already grouped keeps its group
        assert item.nodeid == f"{before}@probe"
    finally:
        item._id = original


def test_jax_still_writes_cache_entries_through_the_function_multi_cache_wraps():
    compiler, compilation_cache, distributed = compat.jax_cache_writer()
    write = getattr(compiler, compat.CACHE_WRITE)
    names = ["cache_key", "compile_time_secs", "module_name", "backend", "executable", "host_callbacks"]
    assert list(inspect.signature(getattr(write, "shardlab_wraps", write)).parameters) == names
    assert list(inspect.signature(compilation_cache.put_executable_and_time).parameters) == [
        "cache_key",
        "module_name",
        "executable",
        "backend",
        "compile_time",
    ]
    assert hasattr(distributed.global_state, "process_id")
