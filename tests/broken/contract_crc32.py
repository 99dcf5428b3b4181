"""Mistake: the contract pins the data with a 32-bit CRC, so two different datasets share a contract after about
77,000 datasets (the birthday bound)."""

import zlib

import numpy as np

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import contract as reference_contract


def contract(data, config):
    found = reference_contract(data, config)
    features, targets = (np.ascontiguousarray(a) for a in data)
    found["data_sha256"] = format(zlib.crc32(features.tobytes() + targets.tobytes()), "08x")
    return found
