"""Correct alternative: key, order and cursor stay JAX arrays (jnp slicing), converted only where needed."""

import jax
import jax.numpy as jnp
import numpy as np

from shardlab.core.batch import Batch, pad, place
from shardlab.core.state import replicate
from shardlab.learner.reference import *  # noqa: F403


def initial(seed, data, mesh):
    key, subkey = jax.random.split(jax.random.PRNGKey(seed))
    zeros = np.zeros(data[0].shape[1], np.float32)
    order = jax.random.permutation(subkey, data[0].shape[0])
    return {
        "weights": replicate(zeros, mesh),
        "momentum": replicate(zeros, mesh),
        "key": key,
        "order": order,
        "cursor": jnp.asarray(0),
        "step": 0,
    }


def next_batch(state, data, batch_size, mesh):
    key, order, cursor = state["key"], state["order"], int(state["cursor"])
    if cursor >= order.shape[0]:
        key, subkey = jax.random.split(key)
        order, cursor = jax.random.permutation(subkey, order.shape[0]), 0
    ids = np.asarray(order[cursor : cursor + batch_size])
    new = {**state, "key": key, "order": order, "cursor": jnp.asarray(cursor + len(ids))}
    return new, Batch(*place(*pad(data, ids, mesh.size), mesh), ids)
