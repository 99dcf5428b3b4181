"""Mistake: next_batch copies the batch's ids into one module-level buffer and returns a view of it, to save an
allocation per batch; the next call writes its own ids there, so the ids a caller already holds change."""

import numpy as np

from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403

_IDS = np.zeros(4096, np.int32)


def next_batch(state, data, batch_size, mesh):
    state, batch = reference.next_batch(state, data, batch_size, mesh)
    ids = _IDS[: len(batch.ids)]
    ids[:] = batch.ids
    return state, batch._replace(ids=ids)
