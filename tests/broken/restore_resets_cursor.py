"""Mistake: restore starts the sampler at the beginning of the saved order."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import restore as reference_restore


def restore(path, expected_contract, mesh):
    return {**reference_restore(path, expected_contract, mesh), "cursor": 0}
