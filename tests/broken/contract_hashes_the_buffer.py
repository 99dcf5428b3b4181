"""Mistake: the contract hashes each array's buffer as it lies in memory (`sha256.update(array)`), which Python's
buffer protocol refuses for an array that is not C-contiguous: valid float32 data in Fortran order or a column
slice makes contract raise, where the course's contract hashes the values whatever their layout."""

import hashlib

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    found = reference_contract(data, config)
    digest = hashlib.sha256()
    for array in data:
        array = np.asarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array)  # the buffer itself: refused unless C-contiguous
    found["data_sha256"] = digest.hexdigest()
    return found
