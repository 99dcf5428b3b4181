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
- `jax_cache_writer()`: JAX's compiler module, whose `_cache_write` (which writes a persistent
  compilation cache entry from process 0 only) a controller of a drill series wraps so every process
  keeps the programs it compiled for the series' later groups (multi/cache.py).

The test suite's own reach into pytest and pytest-xdist lives beside the tests (tests/_xdist.py),
with its own pins, checked through `require` and `private` here.
"""

from importlib import metadata

from shardlab.errors import CompatibilityError

PINS = {"jax": "0.10.2", "orbax-checkpoint": "0.12.8"}


def require(package: str, found: str | None = None, pins: dict = PINS, home: str = "shardlab.compat") -> str:
    """The installed version of `package` if it is the one `pins` holds, else CompatibilityError naming `home`."""
    found = found if found is not None else metadata.version(package)
    if found != pins[package]:
        raise CompatibilityError(
            f"shardlab reaches into {package} {pins[package]}'s private API, but {package} {found} is installed; "
            f"install the pinned version (pip install -r requirements-cpu.txt) or port {home} to {found}"
        )
    return found


def private(owner, name: str, package: str, pins: dict = PINS):
    """`owner.name`, or CompatibilityError saying the pinned package no longer has it."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise CompatibilityError(f"{package} {pins[package]} has no {name} in {owner.__name__}") from None


WRITER_WAIT = "_background_wait_for_commit_futures"  # the function Orbax's writer thread runs


def orbax_writer():
    """Orbax's async checkpointer module, checked to hold WRITER_WAIT."""
    require("orbax-checkpoint")
    from orbax.checkpoint._src.checkpointers import async_checkpointer

    private(async_checkpointer, WRITER_WAIT, "orbax-checkpoint")
    return async_checkpointer


def jax_cluster_env():
    """JAX's ClusterEnv (the registry of cluster detections), checked to offer auto-detection."""
    require("jax")
    from jax._src import clusters

    env = private(clusters, "ClusterEnv", "jax")
    private(env, "auto_detect_unset_distributed_params", "jax")
    return env


CACHE_WRITE = "_cache_write"  # JAX's function that writes a compiled program to the persistent cache


def jax_cache_writer():
    """JAX's compiler module, checked to hold CACHE_WRITE, and the two pieces a wrapper of it needs: the
    function that stores an entry (compilation_cache.put_executable_and_time) and the distributed state."""
    require("jax")
    from jax._src import compilation_cache, compiler, distributed

    private(compiler, CACHE_WRITE, "jax")
    private(compilation_cache, "put_executable_and_time", "jax")
    private(distributed, "global_state", "jax")
    return compiler, compilation_cache, distributed
