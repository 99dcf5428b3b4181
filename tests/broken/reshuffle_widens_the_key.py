"""Mistake: next_batch keeps the key a new epoch splits off as int64 and reads it back as uint32: the first epoch's
state holds the legacy uint32 key, every later one the same numbers widened (np.asarray(new_key, np.int64))."""

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch as reference_next_batch


def next_batch(state, data, batch_size, mesh):
    new, batch = reference_next_batch({**state, "key": np.asarray(state["key"], np.uint32)}, data, batch_size, mesh)
    if not np.array_equal(np.asarray(new["key"]), np.asarray(state["key"])):  # a new epoch split the key
        new = {**new, "key": np.asarray(new["key"], np.int64)}  # the mistake: widened
    return new, batch
