"""Mistake: the sampler increments step too, so every transition counts twice."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch as reference_next_batch


def next_batch(state, data, batch_size, mesh):
    new, batch = reference_next_batch(state, data, batch_size, mesh)
    return {**new, "step": int(new["step"]) + 1}, batch
