"""Orbax CheckpointManager for the six-field state in one folder every controller shares.

Every controller calls `save` and `restore` for the same steps in the same order; Orbax
writes each process's pieces and finalises the step. Saving is synchronous here so a step
is either fully written or visibly unfinished when a drill kills a controller. The state
pytree and the restore target come from stage 3's `orbax_io`.
"""

import os

from jax.sharding import Mesh

from shardlab.core.schema import SCALARS
from shardlab.lessons import orbax_io
from shardlab.multi.manifest import ORBAX


def manager(shared, timeout: float):
    """A CheckpointManager on <shared>/orbax: synchronous, keeps every step, bounded barriers."""
    import orbax.checkpoint as ocp

    options = ocp.CheckpointManagerOptions(
        enable_async_checkpointing=False,
        max_to_keep=None,
        create=True,
        async_options=ocp.options.AsyncOptions(timeout_secs=int(2 * timeout)),
    )
    return ocp.CheckpointManager(os.path.join(os.fspath(shared), ORBAX), options=options)


def save(checkpoints, step: int, state: dict) -> None:
    """Save the state as step `step` (every controller calls this, in the same order)."""
    import orbax.checkpoint as ocp

    checkpoints.save(int(step), args=ocp.args.StandardSave(orbax_io.as_tree(state)), force=True)
    checkpoints.wait_until_finished()


def restore(checkpoints, step: int, like: dict, mesh: Mesh) -> dict:
    """Restore `step` onto `mesh`: weights and momentum replicated on it, host fields as NumPy."""
    import orbax.checkpoint as ocp

    tree = checkpoints.restore(int(step), args=ocp.args.StandardRestore(orbax_io.target(like, mesh)))
    return {**tree, **{name: int(tree[name]) for name in SCALARS}}
