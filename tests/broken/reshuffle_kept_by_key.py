"""Mistake: next_batch keeps every reshuffle it draws under the saved key's bytes alone (drawing is slow, and a key
always gives the same epoch), so a second run from the same seed on data of another row count gets the first
run's orders."""

import numpy as np

from shardlab.core import batch as _batch
from shardlab.core.sampler import draw
from shardlab.learner.reference import *  # noqa: F403

_KEPT = {}  # saved key bytes -> (next key, next order), never the row count


def _kept_draw(key, num_examples):
    kept = np.asarray(key, np.uint32).tobytes()
    if kept not in _KEPT:
        _KEPT[kept] = draw(key, num_examples)
    return _KEPT[kept]


def next_batch(state, data, batch_size, mesh):
    return _batch.next_batch(state, data, batch_size, mesh, reshuffle=_kept_draw)
