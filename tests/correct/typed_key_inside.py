"""Correct alternative: typed keys (jax.random.key) inside, the legacy uint32 (2,) key data in the state."""

import jax
import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import initial as reference_initial
from shardlab.learner.reference import next_batch as reference_next_batch


def _split(key_data):
    key, subkey = jax.random.split(jax.random.wrap_key_data(np.asarray(key_data, np.uint32)))
    return np.asarray(jax.random.key_data(key)), subkey


def initial(seed, data, mesh):
    key, subkey = _split(jax.random.key_data(jax.random.key(seed)))
    return {**reference_initial(seed, data, mesh), "key": key, "order": jax.random.permutation(subkey, len(data[1]))}


def next_batch(state, data, batch_size, mesh):
    order = np.asarray(state["order"])
    if int(state["cursor"]) >= len(order):
        key, subkey = _split(state["key"])
        state = {**state, "key": key, "order": np.asarray(jax.random.permutation(subkey, len(order))), "cursor": 0}
    return reference_next_batch(state, data, batch_size, mesh)
