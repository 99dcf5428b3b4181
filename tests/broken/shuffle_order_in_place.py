"""Mistake: a new epoch writes its permutation into the caller's order array (order[:] = ...)."""

import jax
import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import initial as reference_initial
from shardlab.learner.reference import next_batch as reference_next_batch


def initial(seed, data, mesh):
    state = reference_initial(seed, data, mesh)
    return {**state, "order": np.array(state["order"])}  # a writable array


def next_batch(state, data, batch_size, mesh):
    order = state["order"]
    if int(state["cursor"]) >= len(order):
        key, subkey = jax.random.split(state["key"])
        order[:] = np.asarray(jax.random.permutation(subkey, len(order)))  # the caller's array changes too
        state = {**state, "key": np.asarray(key, np.uint32), "order": order, "cursor": 0}
    new, batch = reference_next_batch(state, data, batch_size, mesh)
    return {**new, "order": order}, batch
