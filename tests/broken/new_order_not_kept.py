"""Mistake: a new epoch draws a new permutation for its first batch but leaves the old order in the state."""

import jax
import numpy as np

from shardlab.core.batch import Batch, pad, place
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch as reference_next_batch


def next_batch(state, data, batch_size, mesh):
    order = np.asarray(state["order"])
    if int(state["cursor"]) < len(order):
        return reference_next_batch(state, data, batch_size, mesh)
    key, subkey = jax.random.split(state["key"])
    fresh = np.asarray(jax.random.permutation(subkey, len(order)))
    ids = fresh[:batch_size]
    new = {**state, "key": np.asarray(key, np.uint32), "cursor": len(ids)}  # "order" is still the old one
    return new, Batch(*place(*pad(data, ids, mesh.size), mesh), ids)
