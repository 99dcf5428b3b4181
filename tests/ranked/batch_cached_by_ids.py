"""Mistake: next_batch keeps the placed arrays of each batch by its ids and mesh size, so after data of another
width the same ids give the earlier data's rows: the step then fails on a batch it should never have been given."""

import numpy as np

from shardlab.core.state import updated
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch as reference_next_batch

_BATCHES = {}


def next_batch(state, data, batch_size, mesh):
    new_state, batch = reference_next_batch(state, data, batch_size, mesh)
    key = (np.asarray(batch.ids).tobytes(), mesh.size)
    if key in _BATCHES:
        return new_state, batch._replace(**_BATCHES[key])
    _BATCHES[key] = {"features": batch.features, "targets": batch.targets, "mask": batch.mask}
    return new_state, batch


def transition(state, data, batch_size, step, mesh):
    state, batch = next_batch(state, data, batch_size, mesh)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    return updated(state, weights, momentum), float(loss), np.asarray(batch.ids)
