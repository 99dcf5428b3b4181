"""The private APIs shardlab reaches into: pinned, present, and refused loudly when an upgrade changes them."""

import inspect
import re

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


@pytest.mark.parametrize("package", sorted(compat.PINS))
def test_every_pin_is_the_one_the_requirements_install(package):
    assert pinned(package) == [compat.PINS[package]] * 2
    assert compat.require(package) == compat.PINS[package]


def test_another_version_is_refused_naming_both():
    with pytest.raises(CompatibilityError, match=r"orbax-checkpoint 0\.12\.8.*0\.13\.0 is installed"):
        compat.require("orbax-checkpoint", found="0.13.0")


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
        compat._private(Module, compat.WRITER_WAIT, "orbax-checkpoint")


def test_the_xdist_group_suffix_is_written_into_the_node_id(request):
    item = request.node
    before, original = item.nodeid, item._id
    try:
        compat.xdist_group_node_id(item, "probe")
        assert item.nodeid == f"{before}@probe"
        compat.xdist_group_node_id(item, "again")  # a node id already grouped keeps its group
        assert item.nodeid == f"{before}@probe"
    finally:
        item._id = original
