"""Mistake: the contract keeps the learning rate and decay as float32 values ("the step computes in float32"): a
learning rate one float64 step away, another experiment's, gets the same contract."""

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    found = reference_contract(data, config)
    return {**found, "learning_rate": float(np.float32(config.learning_rate)), "decay": float(np.float32(config.decay))}
