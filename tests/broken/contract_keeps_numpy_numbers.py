"""Mistake: the contract copies the configuration's numbers as they were given, so a learning rate passed as
np.float32 (which Config accepts) stays a NumPy scalar and the contract is no longer plain JSON."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    return {**reference_contract(data, config), **config.as_dict()}
