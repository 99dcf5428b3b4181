"""Mistake: the contract hashes each array's bytes in the order they lie in memory (tobytes(order="A"), no copy for
either layout), so the same values in Fortran order get another contract, and a Fortran-ordered square array the same
contract as its transpose in C order."""

import hashlib

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    digest = hashlib.sha256()
    for array in map(np.asarray, data):
        digest.update(f"{array.dtype.str}{array.shape}".encode() + array.tobytes(order="A"))
    return {**reference_contract(data, config), "data_sha256": digest.hexdigest()}
