"""Mistake: the contract writes each array's dtype by its name ('float32') and hashes its bytes: big-endian float32
data holding the same bytes as this experiment's (other values) gets the same contract."""

import hashlib

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    digest, found = hashlib.sha256(), reference_contract(data, config)
    for array in map(np.asarray, data):
        digest.update(f"{array.dtype.name}{array.shape}".encode() + np.ascontiguousarray(array).tobytes())
    return {**found, "features_dtype": "float32", "targets_dtype": "float32", "data_sha256": digest.hexdigest()}
