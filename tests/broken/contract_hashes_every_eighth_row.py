"""Mistake: the contract's data digest covers every eighth row only: an edit to any other row keeps the contract.

restore compares contracts correctly (it is the reference's); it cannot tell apart what the contract merges.
"""

import hashlib

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    features, targets = (np.ascontiguousarray(np.asarray(a)[::8]) for a in data)
    digest = hashlib.sha256(features.tobytes() + targets.tobytes()).hexdigest()
    return {**reference_contract(data, config), "data_sha256": digest}
