"""Mistake: next_batch reuses its padded host buffers per shape and never clears the mask, so a batch with fewer
rows than the last one of the same padded size keeps mask 1 on slots that are now padding.

transition is the reference's (one next_batch, one step), written here so that it calls this file's next_batch. The
step is right: every update it makes is right on the arrays it is given; only the batch is wrong.
"""

import numpy as np

from shardlab.core.batch import Batch, padded_length, place
from shardlab.core.sampler import advance, draw
from shardlab.core.state import updated
from shardlab.learner.reference import *  # noqa: F403

_BUFFERS = {}


def next_batch(state, data, batch_size, mesh):
    state, ids = advance(state, batch_size, draw)
    features, targets = (np.asarray(a) for a in data)
    shape = (padded_length(len(ids), mesh.size), features.shape[1])
    if shape not in _BUFFERS:
        _BUFFERS[shape] = (np.zeros(shape, np.float32), np.zeros(shape[0], np.float32), np.zeros(shape[0], np.float32))
    x, y, m = (b.copy() for b in _BUFFERS[shape])
    x[: len(ids)], y[: len(ids)], m[: len(ids)] = features[ids], targets[ids], 1.0  # the rest of m is left as it was
    _BUFFERS[shape] = (x, y, m)
    return state, Batch(*place(x, y, m, mesh), ids)


def transition(state, data, batch_size, step, mesh):
    state, batch = next_batch(state, data, batch_size, mesh)
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    return updated(state, weights, momentum), float(loss), batch.ids
