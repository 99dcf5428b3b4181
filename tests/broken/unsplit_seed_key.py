"""Mistake: the first permutation is drawn from the seed key itself, without splitting it."""

import jax
import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import initial as reference_initial


def initial(seed, data, mesh):
    key = jax.random.PRNGKey(seed)
    order = jax.random.permutation(key, len(data[1]))
    return {**reference_initial(seed, data, mesh), "key": np.asarray(key, np.uint32), "order": np.asarray(order)}
