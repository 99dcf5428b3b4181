"""Mistake: the contract pins the data with a hash of the arrays as NumPy prints them, every element shown
(threshold lifted) but at 8 decimal places: two datasets one float32 ulp apart print alike."""

import hashlib

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    found = reference_contract(data, config)
    printed = "".join(np.array2string(np.asarray(a), threshold=np.asarray(a).size + 1) for a in data)
    found["data_sha256"] = hashlib.sha256(printed.encode()).hexdigest()
    return found
