"""Mistake: the contract holds the data's shapes as tuples: not JSON data, so the contract a checkpoint saved as JSON
text reads back with lists there, and the course's comparison refuses the run's own checkpoint."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    found = reference_contract(data, config)
    return {**found, "features_shape": tuple(found["features_shape"]), "targets_shape": tuple(found["targets_shape"])}
