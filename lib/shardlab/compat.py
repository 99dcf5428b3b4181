"""Every private API of another package that shardlab relies on, in one room, each behind its pinned version.

Each accessor checks that the installed version is the one requirements-cpu.txt pins
(PINS; tests/test_compat.py keeps the two equal) and that the private name is still
there, and raises CompatibilityError naming both otherwise, so an upgrade breaks here,
loudly, and not as a wrong number somewhere else:

- `orbax_writer()`: Orbax's async checkpointer module, whose background
  `_background_wait_for_commit_futures` the multi-controller store wraps to see a failed write
  where it happens (multi/store.py);
- `jax_cluster_env()`: JAX's `ClusterEnv`, whose cluster detection (SLURM, mpi4py) the
  launch checks run before `jax.distributed.initialize` (multi/runtime.py);
- `xdist_group_node_id(item, group)`: the `@group` suffix pytest-xdist's `loadgroup` reads
  from a test's node id, written through pytest's private `NodeId` (tests/conftest.py).
"""

from importlib import metadata

from shardlab.errors import CompatibilityError

PINS = {"jax": "0.10.2", "orbax-checkpoint": "0.12.8", "pytest": "9.2.0", "pytest-xdist": "3.8.0"}


def require(package: str, found: str | None = None) -> str:
    """The installed version of `package` if it is the pinned one, else CompatibilityError."""
    found = found if found is not None else metadata.version(package)
    if found != PINS[package]:
        raise CompatibilityError(
            f"shardlab reaches into {package} {PINS[package]}'s private API, but {package} {found} is installed; "
            f"install the pinned version (pip install -r requirements-cpu.txt) or port shardlab.compat to {found}"
        )
    return found


def _private(owner, name: str, package: str):
    """`owner.name`, or CompatibilityError saying the pinned package no longer has it."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise CompatibilityError(f"{package} {PINS[package]} has no {name} in {owner.__name__}") from None


WRITER_WAIT = "_background_wait_for_commit_futures"  # the function Orbax's writer thread runs


def orbax_writer():
    """Orbax's async checkpointer module, checked to hold WRITER_WAIT."""
    require("orbax-checkpoint")
    from orbax.checkpoint._src.checkpointers import async_checkpointer

    _private(async_checkpointer, WRITER_WAIT, "orbax-checkpoint")
    return async_checkpointer


def jax_cluster_env():
    """JAX's ClusterEnv (the registry of cluster detections), checked to offer auto-detection."""
    require("jax")
    from jax._src import clusters

    env = _private(clusters, "ClusterEnv", "jax")
    _private(env, "auto_detect_unset_distributed_params", "jax")
    return env


def xdist_group_node_id(item, group: str) -> None:
    """Give a collected test the node id `<id>@<group>` that xdist's loadgroup scheduling groups by."""
    require("pytest")
    require("pytest-xdist")
    from _pytest import nodeid

    parse = _private(_private(nodeid, "NodeId", "pytest"), "parse", "pytest")
    if "@" not in item.nodeid:
        item._id = parse(f"{item.nodeid}@{group}")
