"""Mistake: the transition adds the batch's length to step, counting examples instead of updates."""

from shardlab.core.state import updated
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch


def transition(state, data, batch_size, step, mesh):
    state, batch = next_batch(state, data, batch_size, mesh)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    return updated(state, weights, momentum, steps=len(batch.ids)), float(loss), batch.ids
