"""Mistake: the contract rounds the learning rate and decay to 4 decimals, so nearby values look equal."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    found = reference_contract(data, config)
    return {**found, "learning_rate": round(found["learning_rate"], 4), "decay": round(found["decay"], 4)}
