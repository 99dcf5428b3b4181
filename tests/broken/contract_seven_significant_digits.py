"""Mistake: the contract writes the learning rate and decay with seven significant digits ("float32 holds about
seven"), which merges neighbouring float32 values, most often just above a power of ten."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    found = reference_contract(data, config)
    return {**found, "learning_rate": f"{found['learning_rate']:.7g}", "decay": f"{found['decay']:.7g}"}
