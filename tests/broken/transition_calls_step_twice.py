"""Mistake: transition calls the step twice, the loss from one call and the update from the other."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch


def transition(state, data, batch_size, step, mesh):
    new, batch = next_batch(state, data, batch_size, mesh)
    args = (batch.features, batch.targets, batch.mask, new["weights"], new["momentum"])
    loss = step(*args)[2]
    weights, momentum, _, _ = step(*args)
    return {**new, "weights": weights, "momentum": momentum, "step": int(new["step"]) + 1}, float(loss), batch.ids
