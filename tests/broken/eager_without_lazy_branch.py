"""Mistake: next_batch draws the next epoch as soon as one ends and has no branch for a state whose cursor is
already rows (the lazy form the rules accept): it restarts the old order instead of drawing a new one."""

import jax
import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch as reference_next_batch


def next_batch(state, data, batch_size, mesh):
    rows = len(state["order"])
    cursor = np.asarray(state["cursor"])
    if int(cursor) >= rows:  # never met here: this sampler draws each new epoch eagerly below
        state = {**state, "cursor": np.zeros_like(cursor)}
    state, batch = reference_next_batch(state, data, batch_size, mesh)
    if int(state["cursor"]) == rows:
        key, subkey = jax.random.split(np.asarray(state["key"]))
        order = np.asarray(jax.random.permutation(subkey, rows)).astype(np.asarray(state["order"]).dtype)
        state = {**state, "key": np.asarray(key), "order": order, "cursor": np.zeros_like(cursor)}
    return state, batch
