"""Mistake: transition hands the step host copies of the batch (np.asarray of features, targets and mask) instead of
the placed arrays next_batch returned; the compiled step sends them to the devices again, with the same numbers."""

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch


def transition(state, data, batch_size, step, mesh):
    state, batch = next_batch(state, data, batch_size, mesh)
    host = [np.asarray(a) for a in (batch.features, batch.targets, batch.mask)]  # "numbers are numbers"
    weights, momentum, loss, _ = step(*host, state["weights"], state["momentum"])
    return {**state, "weights": weights, "momentum": momentum, "step": int(state["step"]) + 1}, float(loss), batch.ids
