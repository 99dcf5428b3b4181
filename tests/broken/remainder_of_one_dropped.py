"""Mistake: a remainder of a single id is skipped (a new epoch starts instead); other remainders are kept."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch as reference_next_batch


def next_batch(state, data, batch_size, mesh):
    left = len(state["order"]) - int(state["cursor"])
    if left == 1 and int(state["cursor"]) > 0:
        state = {**state, "cursor": len(state["order"])}  # "a batch of one is not worth a step"
    return reference_next_batch(state, data, batch_size, mesh)
