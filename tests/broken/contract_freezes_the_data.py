"""Mistake: contract marks the caller's data arrays read-only, "so the digest stays valid"."""

from shardlab.learner import reference
from shardlab.learner.reference import *  # noqa: F403


def contract(data, config):
    described = reference.contract(data, config)
    for array in data:
        array.flags.writeable = False  # the caller's own arrays, frozen
    return described
