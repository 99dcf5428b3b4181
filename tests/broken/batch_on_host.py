"""Mistake: next_batch pads correctly but returns host NumPy arrays instead of placing them on the mesh."""

from shardlab.core.batch import Batch, pad
from shardlab.core.sampler import advance
from shardlab.learner.reference import *  # noqa: F403


def next_batch(state, data, batch_size, mesh):
    state, ids = advance(state, batch_size)
    return state, Batch(*pad(data, ids, mesh.size), ids)
