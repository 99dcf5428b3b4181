"""Mistake: transition returns the loss as the step gave it, a jax.Array on the devices, not a host float."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch


def transition(state, data, batch_size, step, mesh):
    new, batch = next_batch(state, data, batch_size, mesh)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    return {**new, "weights": weights, "momentum": momentum, "step": state["step"] + 1}, loss, batch.ids
