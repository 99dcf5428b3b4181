"""Mistake: the state keeps a new-style typed key (jax.random.key) instead of the legacy uint32 (2,) key."""

import jax

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import initial as reference_initial


def initial(seed, data, mesh):
    key, subkey = jax.random.split(jax.random.key(seed))
    state = reference_initial(seed, data, mesh)
    return {**state, "key": key, "order": jax.random.permutation(subkey, len(data[1]))}
