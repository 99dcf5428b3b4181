"""Mistake: after a reshuffle the sampler's key and order stay JAX device arrays (initial gave host NumPy)."""

import jax
import numpy as np

from shardlab.core.batch import Batch, pad, place
from shardlab.learner.reference import *  # noqa: F403


def next_batch(state, data, batch_size, mesh):
    key, order, cursor = state["key"], state["order"], int(state["cursor"])
    if cursor >= len(order):
        key, subkey = jax.random.split(key)
        order, cursor = jax.random.permutation(subkey, len(order)), 0
    ids = np.asarray(order[cursor : cursor + batch_size], np.int32)
    new = {**state, "key": key, "order": order, "cursor": cursor + len(ids)}
    return new, Batch(*place(*pad(data, ids, mesh.size), mesh), ids)
