"""The reference implementation: the names, and exactly the signatures, a learner's file provides.

The library's pipeline also takes a `put` argument (how arrays reach the devices, which
the multi-controller job changes); the learner's API does not, so it is fixed here.
"""

from shardlab.core import batch as _batch
from shardlab.core import state as _state
from shardlab.core.checkpoint import contract, restore, save
from shardlab.core.update import make_step

__all__ = ["initial", "next_batch", "make_step", "transition", "contract", "save", "restore"]


def initial(seed, data, mesh):
    """State at step 0 (shardlab.core.state.initial, placed in this process)."""
    return _state.initial(seed, data, mesh)


def next_batch(state, data, batch_size, mesh):
    """(new state, placed batch) (shardlab.core.batch.next_batch, placed in this process)."""
    return _batch.next_batch(state, data, batch_size, mesh)


def transition(state, data, batch_size, step, mesh):
    """(new state, loss, ids) (shardlab.core.state.transition, placed in this process)."""
    return _state.transition(state, data, batch_size, step, mesh)
