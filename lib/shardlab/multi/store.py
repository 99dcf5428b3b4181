"""Orbax CheckpointManager for the six-field state in one folder every controller shares.

Every controller calls `save` and `restore` for the same steps in the same order; Orbax
writes each process's pieces and finalises the step. With `asynchronous=True` `save` returns
once the state is copied off the devices and Orbax writes in a background thread; `wait`
blocks until that write is finished and turns a failure of it into an AsyncSaveError, and
`check` does so without waiting (every step, while a save is pending), so a failed background
save is reported at the next step, save or wait, never swallowed. Either way
Orbax keeps every step (`max_to_keep=None`): which steps count and which are removed is the
manifest's and `retention`'s business. The state pytree and the restore target come from
stage 3's `orbax_io`.
"""

import asyncio
import concurrent.futures
import errno
import os

from jax.sharding import Mesh

from shardlab import orbax_io
from shardlab.core.schema import SCALARS
from shardlab.errors import AsyncSaveError
from shardlab.multi.manifest import ORBAX

FAILED: list = []  # this process's background-write failures, as Orbax's writer thread raised them
FAIL_NEXT: list = []  # drill hook: reasons for which the next background write fails (fail_next_write)


def _watch_writer() -> None:
    """Record every failure of this process's Orbax background writer where it happens.

    Orbax 0.12.8's CheckpointManager raises a failed background write only at `wait`, and with
    several processes only after a finalisation barrier the other processes pass only once
    every write succeeded, so the failed process would wait out its bound, and its error would
    surface as a hang. The writer thread's own function is wrapped once per process (the
    version is pinned and checked in shardlab.compat; a test runs this against Orbax's real manager).
    """
    from shardlab import compat

    writer = compat.orbax_writer()
    original = getattr(writer, compat.WRITER_WAIT)
    if getattr(original, "shardlab_watched", False):
        return

    def watched(*args, **kwargs):
        try:
            if FAIL_NEXT:
                raise OSError(errno.ENOSPC, f"No space left on device ({FAIL_NEXT.pop()})")
            return original(*args, **kwargs)
        except (concurrent.futures.CancelledError, asyncio.CancelledError):
            raise
        except BaseException as exc:
            FAILED.append(exc)
            raise

    watched.shardlab_watched = True
    setattr(writer, compat.WRITER_WAIT, watched)


def fail_next_write(reason: str) -> None:
    """Drill hook: this process's next background write fails with ENOSPC inside Orbax's writer thread,
    so the error travels Orbax's own path (and ours); only its origin is simulated, once."""
    _watch_writer()
    FAIL_NEXT.append(reason)


def manager(shared, timeout: float, asynchronous: bool = False):
    """A CheckpointManager on <shared>/orbax: keeps every step, bounded barriers, (a)synchronous."""
    import orbax.checkpoint as ocp

    _watch_writer()
    options = ocp.CheckpointManagerOptions(
        enable_async_checkpointing=bool(asynchronous),
        max_to_keep=None,
        create=True,
        async_options=ocp.options.AsyncOptions(timeout_secs=int(2 * timeout)),
    )
    return ocp.CheckpointManager(os.path.join(os.fspath(shared), ORBAX), options=options)


def save(checkpoints, step: int, state: dict, wait: bool = True) -> None:
    """Save the state as step `step` (every controller calls this, in the same order); `wait` for it."""
    import orbax.checkpoint as ocp

    try:
        checkpoints.save(int(step), args=ocp.args.StandardSave(orbax_io.as_tree(state)), force=True)
    except Exception as exc:  # Orbax re-raises a failed earlier background save here
        raise AsyncSaveError(
            f"saving step {step} failed ({type(exc).__name__}: {str(exc)[:200]}); an earlier background save "
            "may have failed. Its step has no manifest and will not be restored; restart from the newest "
            "complete checkpoint."
        ) from exc
    if wait:
        finish(checkpoints, step)


def check(checkpoints, step: int) -> None:
    """AsyncSaveError now, without waiting, if this process's background save of `step` already failed."""
    if FAILED:
        raise _failed(step, FAILED.pop(0))
    try:
        checkpoints.check_for_errors()
    except Exception as exc:
        raise _failed(step, exc) from exc


def _failed(step: int, exc: Exception) -> AsyncSaveError:
    return AsyncSaveError(
        f"the background save of step {step} failed ({type(exc).__name__}: {str(exc)[:200]}); the step has "
        "no manifest and will not be restored. Free the disk or fix the folder, then restart from the newest "
        "complete checkpoint."
    )


def finish(checkpoints, step: int) -> None:
    """Block until the background save of `step` is written; AsyncSaveError if it failed."""
    check(checkpoints, step)
    try:
        checkpoints.wait_until_finished()
    except Exception as exc:
        raise _failed(step, exc) from exc


def in_progress(checkpoints) -> bool:
    """Whether this process's background save is still being written."""
    return bool(checkpoints.is_saving_in_progress())


def restore(checkpoints, step: int, like: dict, mesh: Mesh) -> dict:
    """Restore `step` onto `mesh`: weights and momentum replicated on it, host fields as NumPy."""
    import orbax.checkpoint as ocp

    tree = checkpoints.restore(int(step), args=ocp.args.StandardRestore(orbax_io.target(like, mesh)))
    return {**tree, **{name: int(tree[name]) for name in SCALARS}}
