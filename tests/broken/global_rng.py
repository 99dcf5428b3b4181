"""Mistake: the permutations come from NumPy's global random generator, not from the state's key."""

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import initial as reference_initial
from shardlab.learner.reference import next_batch as reference_next_batch


def initial(seed, data, mesh):
    return {**reference_initial(seed, data, mesh), "order": np.random.permutation(len(data[1]))}


def next_batch(state, data, batch_size, mesh):
    if int(state["cursor"]) >= len(state["order"]):
        state = {**state, "order": np.random.permutation(len(state["order"])), "cursor": 0}
    return reference_next_batch(state, data, batch_size, mesh)
