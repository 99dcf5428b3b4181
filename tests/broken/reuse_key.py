"""Mistake: every new epoch draws its permutation from the same saved key (never split again)."""

import jax
import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch as reference_next_batch


def next_batch(state, data, batch_size, mesh):
    rows = len(state["order"])
    if int(state["cursor"]) >= rows:
        state = {**state, "order": np.asarray(jax.random.permutation(state["key"], rows)), "cursor": 0}
    return reference_next_batch(state, data, batch_size, mesh)
