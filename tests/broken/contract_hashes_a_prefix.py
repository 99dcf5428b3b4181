"""Mistake: the contract hashes only the first 4 KiB of the features (quick, but an edit further on is missed)."""

import hashlib

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    features, targets = (np.ascontiguousarray(a) for a in data)
    digest = hashlib.sha256(features.tobytes()[:4096] + targets.tobytes()).hexdigest()
    return {**reference_contract(data, config), "data_sha256": digest}
