"""Mistake: the contract pins the configuration with Python's hash() of a str, which each interpreter salts
differently (PYTHONHASHSEED), so the same experiment gets another contract in the next process."""

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    return {**reference_contract(data, config), "config_hash": hash(f"{config.seed}/{config.batch_size}")}
