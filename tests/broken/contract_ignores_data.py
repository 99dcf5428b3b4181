"""Mistake: the contract records the data's shapes but not a hash of its bytes, so changed data passes."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    return {k: v for k, v in reference_contract(data, config).items() if k != "data_sha256"}
