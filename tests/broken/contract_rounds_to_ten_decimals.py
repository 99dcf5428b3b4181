"""Mistake: the contract rounds the learning rate and decay to 10 decimals "to remove float noise": exact at the
course's 0.03 and 0.8, but a learning rate of 1e-12 and one float32 step above it give one contract."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    found = reference_contract(data, config)
    return {**found, "learning_rate": round(found["learning_rate"], 10), "decay": round(found["decay"], 10)}
