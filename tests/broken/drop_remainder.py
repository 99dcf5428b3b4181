"""Mistake: a batch that would run short starts the next epoch instead (the remainder is dropped)."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch as reference_next_batch


def next_batch(state, data, batch_size, mesh):
    if int(state["cursor"]) + batch_size > len(state["order"]):
        state = {**state, "cursor": len(state["order"])}  # pretend the epoch is used up
    return reference_next_batch(state, data, batch_size, mesh)
